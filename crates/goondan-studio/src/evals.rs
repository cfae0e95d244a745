//! The stored runs of `gdn eval` (`<System Root>/evals/<runId>/run.json`,
//! written by `goondan-eval`), for the Studio's Evals page: every run with
//! its cases and scores, newest first, and the System Root each case ran
//! in (`<runId>/<n>/`), so a case's trace opens from there.
//!
//! Run files are read as JSON and only the fields the page shows are
//! passed on; a damaged run is left out. Names from a URL are only ever
//! compared with the names a listing found, never joined onto a path.

use crate::data::ReadError;
use goondan_store::StateRoot;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The longest answer of a case the listing carries, in characters.
const MAX_ANSWER_CHARS: usize = 2000;

/// `text` cut to `limit` characters, with `…` when it was longer.
fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        None => text.to_string(),
        Some((at, _)) => format!("{}…", &text[..at]),
    }
}

/// The folder of the stored runs.
fn runs_dir(root: &StateRoot) -> PathBuf {
    root.path().join("evals")
}

/// The run folders that hold a report, by name, newest first (run ids
/// are UTC times).
fn run_folders(root: &StateRoot) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(runs_dir(root)) else {
        return Vec::new();
    };
    let mut runs: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter(|entry| entry.path().join("run.json").is_file())
        .map(|entry| {
            (
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            )
        })
        .collect();
    runs.sort_by(|a, b| b.0.cmp(&a.0));
    runs
}

/// What the page shows of case `index` of a stored run (one entry of
/// its `cases`).
pub(crate) fn case_summary(index: usize, case: &Value) -> Value {
    json!({
        "index": index,
        "eval": case["eval"],
        "name": case["name"],
        "model": case["model"],
        "repeat": case["repeat"],
        "status": case["status"],
        "score": case["score"],
        "threshold": case["threshold"],
        "failures": case["failures"],
        // What the case got, beside each failed check's wanted-and-seen,
        // cut so a long answer does not make the listing heavy.
        "answer": case["answer"].as_str().map(|answer| cut(answer, MAX_ANSWER_CHARS)),
        "deductions": case["deductions"],
        "latencyMs": case["latencyMs"],
        "costUsd": case["costUsd"],
        "workspaceId": case["workspaceId"],
        "traceId": case["traceId"],
    })
}

/// The report (`run.json`) of the stored run `run`, found by its name
/// among the runs listed, as JSON.
pub(crate) fn run_report(root: &StateRoot, run: &str) -> Result<Value, ReadError> {
    let not_found = || ReadError::NotFound(format!("no eval run `{run}` under the System Root"));
    let (_, dir) = run_folders(root)
        .into_iter()
        .find(|(name, _)| name == run)
        .ok_or_else(not_found)?;
    let text = std::fs::read_to_string(dir.join("run.json")).map_err(|_| not_found())?;
    serde_json::from_str(&text).map_err(|_| not_found())
}

/// `GET /api/evals`: every stored run with its cases.
pub(crate) fn eval_runs(root: &StateRoot) -> Result<Value, ReadError> {
    let mut runs = Vec::new();
    for (id, dir) in run_folders(root) {
        let Ok(text) = std::fs::read_to_string(dir.join("run.json")) else {
            continue;
        };
        let Ok(report) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        let cases: Vec<Value> = report["cases"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(index, case)| case_summary(index, case))
            .collect();
        runs.push(json!({
            "runId": id,
            "startedAt": report["startedAt"],
            "durationMs": report["durationMs"],
            "passed": report["passed"],
            "replay": report["replay"],
            "cases": cases,
        }));
    }
    Ok(json!({ "runs": runs }))
}

/// The System Root case `case` of run `run` ran in.
pub(crate) fn case_root(root: &StateRoot, run: &str, case: &str) -> Result<StateRoot, ReadError> {
    let not_found =
        || ReadError::NotFound(format!("no eval case `{run}/{case}` under the System Root"));
    let (_, run_dir) = run_folders(root)
        .into_iter()
        .find(|(name, _)| name == run)
        .ok_or_else(not_found)?;
    let entries = std::fs::read_dir(&run_dir).map_err(|_| not_found())?;
    entries
        .flatten()
        .filter(|entry| entry.path().is_dir())
        .find(|entry| entry.file_name().to_str() == Some(case))
        .map(|entry| StateRoot::new(entry.path()))
        .ok_or_else(not_found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_listed_newest_first_and_names_are_matched_not_joined() {
        let dir = tempfile::tempdir().unwrap();
        let root = StateRoot::new(dir.path());
        for (id, status) in [
            ("20261128T010000Z", "failed"),
            ("20261128T020000Z", "passed"),
        ] {
            let run = dir.path().join("evals").join(id);
            std::fs::create_dir_all(run.join("0")).unwrap();
            let report = json!({"startedAt": "t", "passed": status == "passed", "cases": [{"eval": "e", "name": "c", "status": status, "score": 8.0, "traceId": "abc", "workspaceId": "w"}]});
            std::fs::write(run.join("run.json"), report.to_string()).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("evals/damaged")).unwrap();
        std::fs::write(dir.path().join("evals/damaged/run.json"), "{").unwrap();
        let runs = eval_runs(&root).unwrap();
        let ids: Vec<&str> = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["runId"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["20261128T020000Z", "20261128T010000Z"]);
        assert_eq!(runs["runs"][0]["cases"][0]["score"], 8.0);
        assert!(case_root(&root, "20261128T010000Z", "0").is_ok());
        for (run, case) in [
            ("..", "0"),
            ("20261128T010000Z", ".."),
            ("20261128T010000Z", "1"),
            ("nope", "0"),
        ] {
            assert!(
                matches!(case_root(&root, run, case), Err(ReadError::NotFound(_))),
                "{run}/{case}"
            );
        }
    }
}
