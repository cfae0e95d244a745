//! Replays every corpus file through its target on the stable toolchain:
//! the regression half of fuzzing, run by `cargo test` and `.ci/run`
//! (`fuzz/regress.sh`). A crash the fuzzer once found, fixed and added to
//! `corpus/<target>/`, fails this test if it comes back.

use goondan_fuzz::TARGETS;
use std::path::{Path, PathBuf};

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus")
}

/// The files of one target's corpus, sorted so failures name the same
/// file every time.
fn corpus_files(target: &str) -> Vec<PathBuf> {
    let dir = corpus_root().join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

#[test]
fn every_corpus_file_runs_through_its_target_without_a_panic() {
    for target in TARGETS {
        let files = corpus_files(target.name);
        assert!(!files.is_empty(), "corpus/{} is empty", target.name);
        for file in files {
            let input = std::fs::read(&file).unwrap();
            let outcome = std::panic::catch_unwind(|| (target.run)(&input));
            assert!(
                outcome.is_ok(),
                "{} panicked on {}",
                target.name,
                file.display()
            );
        }
    }
}

#[test]
fn every_corpus_folder_belongs_to_a_target() {
    for entry in std::fs::read_dir(corpus_root()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            TARGETS.iter().any(|target| target.name == name),
            "corpus/{name} has no target in goondan_fuzz::TARGETS"
        );
    }
}

#[test]
fn every_target_has_a_libfuzzer_binary() {
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("libfuzzer/Cargo.toml"))
            .unwrap();
    for target in TARGETS {
        let path = format!("path = \"fuzz_targets/{}.rs\"", target.name);
        assert!(
            manifest.contains(&path),
            "libfuzzer/Cargo.toml has no [[bin]] for {}",
            target.name
        );
    }
}
