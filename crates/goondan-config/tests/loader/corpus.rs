//! The invalid-bundle corpus: each folder under `tests/fixtures/invalid`
//! breaks one rule, and its `expected.txt` lists every diagnostic the
//! loader must report as `CODE path`, no more and no fewer.

use super::load;
use std::path::Path;

#[test]
fn every_fixture_reports_exactly_its_expected_diagnostics() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    let mut fixtures: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 50, "corpus went missing");
    let mut failures = Vec::new();
    for fixture in &fixtures {
        let expected_text = std::fs::read_to_string(fixture.join("expected.txt")).unwrap();
        let mut expected: Vec<&str> = expected_text
            .lines()
            .filter(|line| !line.is_empty())
            .collect();
        expected.sort();
        let outcome = load(fixture);
        let mut actual: Vec<String> = outcome
            .diagnostics
            .iter()
            .map(|d| format!("{} {}", d.code, d.path.as_deref().unwrap_or("-")))
            .collect();
        actual.sort();
        let name = fixture.file_name().unwrap().to_string_lossy();
        if actual != expected {
            failures.push(format!(
                "{name}: expected {expected:?}, got {:#?}",
                outcome.diagnostics
            ));
            continue;
        }
        let has_error = outcome.diagnostics.iter().any(|d| d.is_error());
        if has_error == outcome.bundle.is_some() {
            failures.push(format!(
                "{name}: bundle must exist exactly when there is no error"
            ));
        }
        for diagnostic in &outcome.diagnostics {
            if diagnostic.line.is_none() && diagnostic.field.is_some() {
                failures.push(format!(
                    "{name}: {} has a field but no line",
                    diagnostic.code
                ));
            }
            if diagnostic.suggestion.is_none() {
                failures.push(format!("{name}: {} has no suggestion", diagnostic.code));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// tool.md §6.2: an export name holds only lowercase letters, digits, `_`
/// and `-`; the diagnostic names the conforming spelling.
#[test]
fn must_refuse_an_export_name_outside_the_seed_character_set() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid/tool-export-charset");
    let outcome = load(&fixture);
    let diagnostic = outcome
        .diagnostics
        .iter()
        .find(|d| d.code == "E_CONFIG_TOOL_NAME")
        .expect("the export name is refused");
    assert!(diagnostic.message.contains("`runNow`"), "{diagnostic:?}");
    assert!(
        diagnostic
            .suggestion
            .as_deref()
            .is_some_and(|s| s.contains("`run-now`")),
        "{diagnostic:?}"
    );
}
