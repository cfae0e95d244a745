//! The YAML loader: the bytes as a bundle's `goondan.yaml`, through
//! `goondan_config::yaml::parse` and the whole of
//! `goondan_config::load_bundle` (parse, rules, references), as `gdn run`
//! and `gdn validate` read a bundle.

use goondan_config::{load_bundle, yaml, LoadOptions};

/// Parses `data` as YAML (every document's JSON form and every field
/// path's location), then loads it as a one-file bundle in a fresh
/// folder, with no process environment and no installed packages.
pub fn config_bundle(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(documents) = yaml::parse(text) {
        for document in &documents {
            if let Some(root) = &document.root {
                let _ = root.to_json();
                for path in ["metadata.name", "spec.tools[0].ref", "spec", "a.b[1000].c"] {
                    let _ = root.locate(path, true);
                    let _ = root.locate(path, false);
                }
            }
        }
    }
    let scratch = tempfile::tempdir().expect("a temporary folder can be made");
    let file = scratch.path().join("goondan.yaml");
    std::fs::write(&file, data).expect("a temporary file can be written");
    let options = LoadOptions {
        inherit_process_env: false,
        ..LoadOptions::default()
    };
    let _ = load_bundle(scratch.path(), &options);
}
