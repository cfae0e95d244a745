//! A whole plugin in the original's style (`tests/fixtures/plugin`: shared
//! types, utilities, a tool module, an entry) stripped file by file into a
//! temporary folder, `.ts` names turned into `.js` as the plugin host's
//! loader does, then run with Node when `node` is on PATH. The imports
//! stay `./utils.js` and resolve to the stripped files; the entry prints
//! one JSON line that must equal `main.expected`.

use goondan_typescript::strip_types;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plugin")
}

fn typescript_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            typescript_files(&path, out);
        } else if path.extension().is_some_and(|extension| extension == "ts") {
            out.push(path);
        }
    }
}

fn node_available() -> bool {
    Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

#[test]
fn a_stripped_plugin_runs_on_node_and_prints_the_expected_line() {
    let source_dir = fixture_dir();
    let mut files = Vec::new();
    typescript_files(&source_dir, &mut files);
    files.sort();
    assert!(files.len() >= 4, "the fixture plugin has its files");

    let out_dir = tempfile::tempdir().unwrap();
    std::fs::write(out_dir.path().join("package.json"), r#"{"type":"module"}"#).unwrap();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        let javascript = strip_types(&source, file).unwrap_or_else(|error| panic!("{error}"));
        for leftover in ["import type", "interface ", ": string", "satisfies", " as "] {
            assert!(
                !javascript.contains(leftover),
                "{}: `{leftover}` survived:\n{javascript}",
                file.display()
            );
        }
        let relative = file.strip_prefix(&source_dir).unwrap().with_extension("js");
        let target = out_dir.path().join(relative);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, javascript).unwrap();
    }

    if !node_available() {
        eprintln!("node is not on PATH: stripped the fixture plugin, did not run it");
        return;
    }
    let output = Command::new("node")
        .arg(out_dir.path().join("main.js"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "node failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let expected = std::fs::read_to_string(source_dir.join("main.expected")).unwrap();
    assert_eq!(String::from_utf8(output.stdout).unwrap(), expected);
}
