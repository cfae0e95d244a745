//! Strips every `.ts` file of the original Goondan's `samples/` and
//! `packages/base/src/` and checks that Node accepts each output as an ES
//! module (`node --check`). Nothing of the original is kept in this
//! repository: the files are read from a local clone or bare mirror named
//! by `GOONDAN_ORIGINAL_REPO`, through `git show HEAD:<path>`.
//!
//! Skipped, with a line on stderr, when that variable is unset or the
//! repository, `git` or `node` is missing, so CI without them passes.

use goondan_typescript::strip_types;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The folders whose TypeScript is checked.
const ROOTS: [&str; 2] = ["samples/", "packages/base/src/"];

fn git(repo: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let output = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .ok()?;
    output.status.success().then_some(output.stdout)
}

fn node_available() -> bool {
    Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success())
}

#[test]
fn every_original_module_strips_to_javascript_node_accepts() {
    let Some(repo) = std::env::var_os("GOONDAN_ORIGINAL_REPO").map(PathBuf::from) else {
        eprintln!("skipped: GOONDAN_ORIGINAL_REPO does not name a clone of the original");
        return;
    };
    let Some(listing) = repo
        .exists()
        .then(|| git(&repo, &["ls-tree", "-r", "--name-only", "HEAD"]))
        .flatten()
    else {
        eprintln!("skipped: no original repository at {}", repo.display());
        return;
    };
    if !node_available() {
        eprintln!("skipped: node is not on PATH");
        return;
    }
    let listing = String::from_utf8(listing).unwrap();
    let files: Vec<&str> = listing
        .lines()
        .filter(|path| ROOTS.iter().any(|root| path.starts_with(root)))
        .filter(|path| path.ends_with(".ts") || path.ends_with(".mts") || path.ends_with(".cts"))
        .filter(|path| !path.ends_with(".d.ts"))
        .collect();
    assert!(
        !files.is_empty(),
        "the original has TypeScript under {ROOTS:?}"
    );

    let out_dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for path in &files {
        let source = git(&repo, &["show", &format!("HEAD:{path}")]).unwrap();
        let source = String::from_utf8(source).unwrap();
        let javascript = match strip_types(&source, Path::new(path)) {
            Ok(javascript) => javascript,
            Err(error) => {
                failures.push(format!("{error}"));
                continue;
            }
        };
        // `.mjs`, so Node reads each output as an ES module whatever its
        // folder says.
        let target = out_dir
            .path()
            .join(path.replace('/', "__"))
            .with_extension("mjs");
        std::fs::write(&target, javascript).unwrap();
        let check = Command::new("node")
            .arg("--check")
            .arg(&target)
            .output()
            .unwrap();
        if !check.status.success() {
            failures.push(format!(
                "{path}: node --check failed:\n{}",
                String::from_utf8_lossy(&check.stderr)
            ));
        }
    }
    eprintln!("stripped and checked {} files of the original", files.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
