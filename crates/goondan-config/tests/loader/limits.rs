//! YAML safety limits and path escapes that need generated files: a YAML
//! bomb, a file one byte over 1 MiB, 101 documents, absurd nesting, and
//! symlinks leading out of the bundle root; and bundles with nothing in
//! them: a missing path, an empty folder, an empty file.

use super::{codes, load, VALID};
use std::fmt::Write as _;

fn bundle_with(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    dir
}

#[test]
fn billion_laughs_is_refused_fast() {
    let mut text = String::from("a0: &a0 [\"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\", \"lol\"]\n");
    for level in 1..10 {
        let previous = format!("*a{}", level - 1);
        let items = [previous.as_str(); 10].join(", ");
        writeln!(text, "a{level}: &a{level} [{items}]").unwrap();
    }
    let dir = bundle_with(&text);
    let outcome = load(dir.path());
    assert_eq!(codes(&outcome), ["E_CONFIG_YAML_LIMIT"]);
    assert!(outcome.diagnostics[0].message.contains("alias expansion"));
    assert!(outcome.bundle.is_none());
}

#[test]
fn a_file_over_one_mebibyte_is_refused_before_parsing() {
    // Valid YAML up to the limit, then one byte too many; the content
    // would parse, so only the size check can refuse it.
    let mut text = String::from(VALID);
    text.push_str("# ");
    while text.len() < 1024 * 1024 {
        text.push('x');
    }
    let dir = bundle_with(&text);
    let exactly = load(dir.path());
    assert!(exactly.bundle.is_some(), "{:?}", exactly.diagnostics);
    text.push('x');
    std::fs::write(dir.path().join("goondan.yaml"), &text).unwrap();
    let outcome = load(dir.path());
    assert_eq!(codes(&outcome), ["E_CONFIG_YAML_LIMIT"]);
    assert_eq!(outcome.diagnostics[0].path.as_deref(), Some("goondan.yaml"));
}

#[test]
fn more_than_one_hundred_documents_are_refused() {
    // One resource on one line, so the bundle is not empty and every
    // document still takes one line.
    let resource = "{apiVersion: goondan.ai/v1, kind: Model, metadata: {name: main}, spec: {provider: scripted, model: demo}}\n";
    let documents = |count: usize| {
        let mut documents = vec!["note: not a resource\n"; count];
        documents[0] = resource;
        documents.join("---\n")
    };
    let dir = bundle_with(&documents(100));
    assert!(
        load(dir.path()).diagnostics.is_empty(),
        "100 documents are allowed"
    );
    let hundred_and_one = documents(101);
    std::fs::write(dir.path().join("goondan.yaml"), hundred_and_one).unwrap();
    let outcome = load(dir.path());
    assert_eq!(codes(&outcome), ["E_CONFIG_YAML_LIMIT"]);
    assert_eq!(outcome.diagnostics[0].line, Some(200), "the 101st `---`");
}

#[test]
fn absurd_nesting_is_refused_without_overflowing_the_stack() {
    for text in [
        format!("a: {}{}\n", "[".repeat(100_000), "]".repeat(100_000)),
        format!("a: {}1{}\n", "{x: ".repeat(50_000), "}".repeat(50_000)),
        (0..5000)
            .map(|depth| format!("{}- \n", "  ".repeat(depth)))
            .collect(),
    ] {
        let dir = bundle_with(&text);
        let outcome = load(dir.path());
        assert_eq!(
            codes(&outcome),
            ["E_CONFIG_YAML_LIMIT"],
            "{:?}",
            outcome.diagnostics
        );
    }
}

#[cfg(unix)]
#[test]
fn symlinks_leaving_the_root_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("prompt.md"), "secret").unwrap();
    std::fs::write(outside.path().join("tool.js"), "x").unwrap();
    let text = VALID.replace(
        "    modelRef: Model/main\n",
        "    modelRef: Model/main\n  prompt:\n    systemRef: ./linked/prompt.md\n  extensions:\n    - ref: Extension/context-message\n",
    ) + "---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: t
spec:
  entry: ./tool.js
  exports:
    - name: run
      description: Runs.
      parameters: { type: object }
";
    let dir = bundle_with(&text);
    std::os::unix::fs::symlink(outside.path(), dir.path().join("linked")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("tool.js"), dir.path().join("tool.js")).unwrap();
    let outcome = load(dir.path());
    let mut found: Vec<String> = outcome
        .diagnostics
        .iter()
        .map(|d| format!("{} {}", d.code, d.path.as_deref().unwrap_or("-")))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            "E_CONFIG_PATH_ESCAPE goondan.yaml#spec.entry",
            "E_CONFIG_PATH_ESCAPE goondan.yaml#spec.prompt.systemRef",
        ],
        "{:#?}",
        outcome.diagnostics
    );
}

#[test]
fn a_missing_path_and_an_empty_folder_are_load_errors() {
    let dir = tempfile::tempdir().unwrap();
    let options = goondan_config::LoadOptions::default();
    let missing = goondan_config::load_bundle(&dir.path().join("nope"), &options).unwrap_err();
    assert_eq!(missing.code().as_str(), "E_CONFIG_FILE_NOT_FOUND");
    let empty = goondan_config::load_bundle(dir.path(), &options).unwrap_err();
    assert_eq!(empty.code().as_str(), "E_CONFIG_BUNDLE_EMPTY");
    assert!(empty.suggestion().is_some());
}

#[test]
fn an_empty_file_or_one_of_only_comments_is_a_bundle_empty_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("goondan.yaml");
    for text in [
        "",
        "  \n\n",
        "# only a comment\n",
        "---\n",
        "--- # first\n---\n...\n",
        "notes: not a resource\n",
    ] {
        std::fs::write(&file, text).unwrap();
        for path in [file.as_path(), dir.path()] {
            let outcome = load(path);
            assert_eq!(codes(&outcome), ["E_CONFIG_BUNDLE_EMPTY"], "{text:?}");
            let diagnostic = &outcome.diagnostics[0];
            assert!(diagnostic.is_error());
            assert_eq!(diagnostic.file.as_deref(), Some("goondan.yaml"));
            assert!(diagnostic.suggestion.is_some());
            assert!(outcome.bundle.is_none());
        }
    }
    #[cfg(unix)]
    assert_eq!(
        codes(&load("/dev/null".as_ref())),
        ["E_CONFIG_BUNDLE_EMPTY"]
    );
}

#[test]
fn a_file_that_fails_to_parse_is_not_also_reported_empty() {
    let dir = bundle_with("kind: [unclosed\n");
    assert_eq!(codes(&load(dir.path())), ["E_CONFIG_YAML_SYNTAX"]);
}
