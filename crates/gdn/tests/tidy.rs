//! Workspace rules that no compiler checks (STYLE.md §2):
//!
//! * crates follow the data flow and nothing depends rightward;
//! * every Rust file opens with a `//!` header saying what it owns;
//! * every library crate warns on missing docs and unreachable `pub`.

use std::path::{Path, PathBuf};

/// The crates in flow order; a crate may depend only on crates before it.
const FLOW: &[&str] = &[
    "goondan-types",
    "goondan-config",
    "goondan-store",
    "goondan-model",
    "goondan-ipc",
    "goondan-runtime",
    "goondan-base",
    "goondan-agent",
    "goondan-orchestrator",
    "gdn",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/gdn sits two levels below the root")
        .to_path_buf()
}

fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace_root().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    dirs
}

/// The `goondan-*` names in a manifest's `[dependencies]` table.
fn normal_dependencies(manifest: &str) -> Vec<String> {
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies {
            if let Some(name) = line.split(['=', '.', ' ']).next() {
                if name.starts_with("goondan-") {
                    found.push(name.to_string());
                }
            }
        }
    }
    found
}

#[test]
fn crates_follow_the_flow_and_nothing_depends_rightward() {
    let mut problems = Vec::new();
    for dir in crate_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let Some(position) = FLOW.iter().position(|known| *known == name) else {
            problems.push(format!(
                "{name} is not placed in the FLOW list of tests/tidy.rs"
            ));
            continue;
        };
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        for dependency in normal_dependencies(&manifest) {
            match FLOW.iter().position(|known| *known == dependency) {
                Some(dep_position) if dep_position < position => {}
                _ => problems.push(format!(
                    "{name} depends on {dependency}, which is not to its left"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|name| name != "target" && name != "fixtures")
            {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_opens_with_a_module_header() {
    let mut files = Vec::new();
    for dir in crate_dirs() {
        rust_files(&dir, &mut files);
    }
    let missing: Vec<String> = files
        .iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            !text.trim_start().starts_with("//!")
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` header:\n{}",
        missing.join("\n")
    );
}

#[test]
fn library_crates_warn_on_missing_docs() {
    let mut problems = Vec::new();
    for dir in crate_dirs() {
        let lib = dir.join("src/lib.rs");
        if !lib.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&lib).unwrap();
        for needle in ["missing_docs", "unreachable_pub", "unsafe_code"] {
            if !text.contains(needle) {
                problems.push(format!("{} does not set `{needle}`", lib.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
