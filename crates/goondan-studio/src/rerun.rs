//! The Evals page's Re-run (`POST /api/actions/rerun`, an action behind
//! the same gate as the others): one case of a stored run of `gdn eval`
//! run again, as a new stored run under the same System Root, by the
//! `gdn` executable the Studio was given
//! ([`crate::Studio::eval_command`]).
//!
//! The body names the run by its id and the case by its index in the
//! run's `cases` (as `/api/evals` lists them). What the case is, and how
//! its run was made, come from that run's `run.json`: the Eval and case
//! names, its Model, the bundle folder (the child's current directory),
//! and the flags that change what a case does (the cassette folder of a
//! replay, `--config`, `--env-file`, `--timeout`). That file is on disk
//! under the System Root, so it is treated as data: the run is found by
//! comparing its id with the runs listed, never by joining it onto a
//! path; the bundle folder must be an absolute, existing directory (as
//! must a replay's cassette folder); and every value is one element of
//! the child's argv, in the `--flag=value` form so none can pass for a
//! flag, with `--` before the Eval's name. No shell is involved.
//!
//! The child is `gdn --state-root=<the Studio's> --json eval --case=NAME
//! [--models=MODEL] [--replay=DIR] … -- EVAL`. It is waited for at most
//! the case's time limit (as the run recorded it, else `gdn eval`'s
//! default) plus [`MARGIN`], then killed (its agent processes die with
//! it: they ask for that when they start). Its output is read up to
//! [`MAX_STDOUT_BYTES`] and [`MAX_STDERR_BYTES`]; more is read and
//! dropped. Its report names the new run, whose `run.json` the answer is
//! read from.
//!
//! What it does not own: who may act (`server.rs`), how a case runs
//! (`goondan-eval`, in the child).

use crate::actions::ActionError;
use crate::data::ReadError;
use crate::evals;
use goondan_store::StateRoot;
use goondan_types::ErrorBody;
use serde_json::{json, Value};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Re-runs at once; one more is answered 503, so re-runs (which take
/// minutes) never hold every action permit.
pub(crate) const MAX_RERUNS: usize = 2;
/// The longest run id a body may name, in characters.
const MAX_RUN_ID_CHARS: usize = 100;
/// What a re-run may take beyond its case's time limit: the swarm's start
/// and stop, the bundle's load, a package install.
pub(crate) const MARGIN: Duration = Duration::from_secs(60);
/// A case's time limit when its run did not record one (`gdn eval`'s
/// default).
const DEFAULT_CASE_LIMIT: Duration = Duration::from_secs(120);
/// The longest time limit a stored run is believed about, so a damaged
/// `run.json` cannot hold a permit for days.
const MAX_CASE_LIMIT: Duration = Duration::from_secs(3600);
/// The child's report (`--json`) is read up to this many bytes.
pub(crate) const MAX_STDOUT_BYTES: usize = 8 * 1024 * 1024;
/// The child's errors are read up to this many bytes.
pub(crate) const MAX_STDERR_BYTES: usize = 64 * 1024;
/// The variable that holds the Studio's token; the child does not get it.
const TOKEN_VARIABLE: &str = "GOONDAN_STUDIO_TOKEN";

/// A re-run asked for by the page: `{"run": RUN_ID, "case": INDEX}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RerunAsk {
    /// The stored run's id.
    pub(crate) run: String,
    /// The case's index in its `cases`.
    pub(crate) case: usize,
}

/// Reads a re-run's body.
pub(crate) fn parse_rerun(body: &[u8]) -> Result<RerunAsk, ActionError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| ActionError::BadRequest(format!("the body is not JSON: {error}")))?;
    if !value.is_object() {
        return Err(ActionError::BadRequest(
            "the body is an object: {\"run\": RUN_ID, \"case\": INDEX}".into(),
        ));
    }
    let run = match &value["run"] {
        Value::String(run) if !run.is_empty() && run.chars().count() <= MAX_RUN_ID_CHARS => {
            run.clone()
        }
        _ => {
            return Err(ActionError::BadRequest(format!(
                "`run` is a stored run's id, of 1 to {MAX_RUN_ID_CHARS} characters"
            )))
        }
    };
    let case = value["case"]
        .as_u64()
        .and_then(|index| usize::try_from(index).ok())
        .ok_or_else(|| {
            ActionError::BadRequest(
                "`case` is the case's index in the run (a whole number from 0), as /api/evals lists it"
                    .into(),
            )
        })?;
    Ok(RerunAsk { run, case })
}

/// What to run again, read from the stored run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RerunTarget {
    eval: String,
    case_name: String,
    model: Option<String>,
    bundle: PathBuf,
    config: Option<PathBuf>,
    replay: Option<PathBuf>,
    env_file: Option<PathBuf>,
    timeout_seconds: Option<f64>,
    /// The case's time limit.
    limit: Duration,
}

/// A refusal about the stored run (409, with `code`).
fn refused(code: &str, message: String, suggestion: &str) -> ActionError {
    ActionError::Refused(ErrorBody::new(code, message).with_suggestion(suggestion))
}

/// An absolute path from the stored run, or `None` when it holds none.
fn absolute_path(value: &Value) -> Option<PathBuf> {
    value
        .as_str()
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
}

/// Finds case `ask.case` of run `ask.run` and what its run was made with
/// (blocking reads).
pub(crate) fn find_rerun(root: &StateRoot, ask: &RerunAsk) -> Result<RerunTarget, ActionError> {
    let report = evals::run_report(root, &ask.run)?;
    let case = report["cases"]
        .as_array()
        .and_then(|cases| cases.get(ask.case))
        .ok_or_else(|| {
            ActionError::from(ReadError::NotFound(format!(
                "eval run `{}` has no case {}",
                ask.run, ask.case
            )))
        })?;
    let unreadable = |what: &str| {
        refused(
            "E_STUDIO_RERUN_UNREADABLE",
            format!(
                "eval run `{}` does not say {what} for a re-run of case {}",
                ask.run, ask.case
            ),
            "run the case with `gdn eval NAME --case CASE` in the bundle's folder",
        )
    };
    let text = |value: &Value, what: &str| match value.as_str() {
        Some(text) if !text.is_empty() => Ok(text.to_string()),
        _ => Err(unreadable(what)),
    };
    let eval = text(&case["eval"], "the case's Eval")?;
    let case_name = text(&case["name"], "the case's name")?;
    let model = match &case["model"] {
        Value::Null => None,
        model => Some(text(model, "the case's Model")?),
    };
    let bundle = absolute_path(&report["bundle"])
        .filter(|bundle| bundle.is_dir())
        .ok_or_else(|| {
            refused(
                "E_STUDIO_RERUN_NO_BUNDLE",
                format!(
                    "the bundle folder eval run `{}` ran in is not a folder on this machine any more, or the run does not say it as an absolute path",
                    ask.run
                ),
                "run the case with `gdn eval NAME --case CASE` in the bundle's folder",
            )
        })?;
    let replay = match report["replay"].as_bool() {
        Some(true) => Some(
            absolute_path(&report["cassettes"])
                .filter(|cassettes| cassettes.is_dir())
                .ok_or_else(|| {
                    refused(
                        "E_STUDIO_RERUN_NO_CASSETTES",
                        format!(
                            "eval run `{}` was replayed, and its cassette folder is not recorded in it or is not a folder any more",
                            ask.run
                        ),
                        "run the case with `gdn eval NAME --case CASE --replay DIR` in the bundle's folder",
                    )
                })?,
        ),
        _ => None,
    };
    let timeout_seconds = report["timeoutSeconds"]
        .as_f64()
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0);
    let limit = case["timeoutMs"]
        .as_u64()
        .map(Duration::from_millis)
        .or_else(|| timeout_seconds.map(Duration::from_secs_f64))
        .unwrap_or(DEFAULT_CASE_LIMIT)
        .min(MAX_CASE_LIMIT);
    Ok(RerunTarget {
        eval,
        case_name,
        model,
        bundle,
        config: absolute_path(&report["config"]),
        replay,
        env_file: absolute_path(&report["envFile"]),
        timeout_seconds,
        limit,
    })
}

/// `--name=value`, as one argv element.
fn flag(name: &str, value: impl AsRef<std::ffi::OsStr>) -> OsString {
    let mut flag = OsString::from(format!("--{name}="));
    flag.push(value);
    flag
}

/// The child's arguments: `gdn` with the System Root `state_root`, run on
/// `target`.
pub(crate) fn arguments(state_root: &Path, target: &RerunTarget) -> Vec<OsString> {
    let mut args = vec![flag("state-root", state_root), OsString::from("--json")];
    if let Some(config) = &target.config {
        args.push(flag("config", config));
    }
    args.push(OsString::from("eval"));
    args.push(flag("case", &target.case_name));
    if let Some(model) = &target.model {
        args.push(flag("models", model));
    }
    if let Some(replay) = &target.replay {
        args.push(flag("replay", replay));
    }
    if let Some(env_file) = &target.env_file {
        args.push(flag("env-file", env_file));
    }
    if let Some(seconds) = target.timeout_seconds {
        args.push(flag("timeout", seconds.to_string()));
    }
    args.push(OsString::from("--"));
    args.push(OsString::from(&target.eval));
    args
}

/// Reads `reader` to its end, keeping at most `limit` bytes.
async fn read_bounded(mut reader: impl AsyncRead + Unpin, limit: usize) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buffer = [0u8; 8192];
    loop {
        match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = limit.saturating_sub(kept.len());
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
    }
}

/// The new run's id from the child's report: its `runId`, which comes
/// first, so even a report cut at [`MAX_STDOUT_BYTES`] names it.
fn new_run_id(stdout: &[u8]) -> Option<String> {
    if let Ok(report) = serde_json::from_slice::<Value>(stdout) {
        return report["runId"].as_str().map(str::to_string);
    }
    let rest = std::str::from_utf8(stdout.get(..200.min(stdout.len()))?)
        .ok()?
        .strip_prefix("{\"runId\":\"")?;
    rest.split_once('"').map(|(id, _)| id.to_string())
}

/// The child's coded error, from the JSON line `--json` makes of it.
fn child_error(stderr: &[u8]) -> Option<ErrorBody> {
    String::from_utf8_lossy(stderr).lines().find_map(|line| {
        let line: Value = serde_json::from_str(line).ok()?;
        let error = &line["error"];
        let mut body = ErrorBody::new(error["code"].as_str()?, error["message"].as_str()?);
        if let Some(suggestion) = error["suggestion"].as_str() {
            body = body.with_suggestion(suggestion);
        }
        Some(body)
    })
}

/// Runs `program` (`gdn`) on `target` with `state_root` as its System
/// Root, waits for it (bounded), and answers with the new run's id and
/// its case as `/api/evals` lists it.
pub(crate) async fn rerun(
    program: PathBuf,
    state_root: StateRoot,
    target: RerunTarget,
) -> Result<Value, ActionError> {
    // The child runs in another folder: a relative System Root would name
    // another one there.
    let root_path = std::path::absolute(state_root.path())
        .map_err(|error| ActionError::Internal(format!("the System Root's path: {error}")))?;
    let mut child = tokio::process::Command::new(&program)
        .args(arguments(&root_path, &target))
        .current_dir(&target.bundle)
        .env_remove(TOKEN_VARIABLE)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|error| {
            ActionError::Internal(format!("starting {}: {error}", program.display()))
        })?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(ActionError::Internal("the child has no pipes".into()));
    };
    let deadline = target.limit + MARGIN;
    let finished = tokio::time::timeout(deadline, async {
        let (stdout, stderr, status) = tokio::join!(
            read_bounded(stdout, MAX_STDOUT_BYTES),
            read_bounded(stderr, MAX_STDERR_BYTES),
            child.wait()
        );
        (stdout, stderr, status)
    })
    .await;
    let Ok((stdout, stderr, status)) = finished else {
        let _ = child.start_kill();
        let _ = child.wait().await;
        return Err(ActionError::TimedOut(format!(
            "the re-run of {}/{} did not end within {} s (its time limit and {} s more); it was stopped",
            target.eval,
            target.case_name,
            deadline.as_secs(),
            MARGIN.as_secs()
        )));
    };
    let status = status.map_err(|error| ActionError::Internal(error.to_string()))?;
    let Some(run_id) = new_run_id(&stdout) else {
        tracing::warn!(
            %status,
            stderr = %String::from_utf8_lossy(&stderr),
            "studio re-run: gdn eval made no report"
        );
        return Err(ActionError::Refused(child_error(&stderr).unwrap_or_else(
            || {
                ErrorBody::new(
                    "E_STUDIO_RERUN_FAILED",
                    format!("gdn eval ended ({status}) without a report"),
                )
            },
        )));
    };
    let report = evals::run_report(&state_root, &run_id)
        .map_err(|_| ActionError::Internal(format!("the new run {run_id} has no report")))?;
    let cases = report["cases"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let model = target.model.as_deref().map_or(Value::Null, Value::from);
    let (index, case) = cases
        .iter()
        .enumerate()
        .find(|(_, case)| {
            case["eval"] == target.eval.as_str()
                && case["name"] == target.case_name.as_str()
                && case["model"] == model
        })
        .or_else(|| cases.iter().enumerate().next())
        .ok_or_else(|| ActionError::Internal(format!("the new run {run_id} has no case")))?;
    Ok(json!({
        "runId": run_id,
        "passed": report["passed"],
        "replay": report["replay"],
        "case": evals::case_summary(index, case),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rerun_body_names_a_run_and_a_case_index() {
        assert_eq!(
            parse_rerun(br#"{"run":"20261128T031600Z-2","case":3}"#).unwrap(),
            RerunAsk {
                run: "20261128T031600Z-2".into(),
                case: 3
            }
        );
        let long = format!(
            r#"{{"run":"{}","case":0}}"#,
            "1".repeat(MAX_RUN_ID_CHARS + 1)
        );
        let refused: [&[u8]; 11] = [
            b"not json",
            b"[1]",
            br#"{"case":0}"#,
            br#"{"run":"","case":0}"#,
            br#"{"run":7,"case":0}"#,
            br#"{"run":"r"}"#,
            br#"{"run":"r","case":-1}"#,
            br#"{"run":"r","case":1.5}"#,
            br#"{"run":"r","case":"0"}"#,
            br#"{"run":"r","case":null}"#,
            long.as_bytes(),
        ];
        for body in refused {
            assert!(
                matches!(parse_rerun(body), Err(ActionError::BadRequest(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    /// A stored run under `root` with one case, whose report is `report`
    /// with `cases` set to that case.
    fn stored(root: &Path, id: &str, report: Value) {
        let dir = root.join("evals").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("run.json"), report.to_string()).unwrap();
    }

    #[test]
    fn a_rerun_runs_the_case_of_the_run_with_its_flags_each_one_argument() {
        let state = tempfile::tempdir().unwrap();
        let bundle = tempfile::tempdir().unwrap();
        let cassettes = tempfile::tempdir().unwrap();
        let root = StateRoot::new(state.path());
        let case = json!({"eval": "smoke", "name": "--help; rm -rf /", "model": "fast", "timeoutMs": 30000});
        stored(
            state.path(),
            "20261128T010000Z",
            json!({"bundle": bundle.path(), "replay": true, "cassettes": cassettes.path(), "timeoutSeconds": 30.0, "cases": [case]}),
        );
        let ask = |run: &str, case: usize| RerunAsk {
            run: run.into(),
            case,
        };
        let target = find_rerun(&root, &ask("20261128T010000Z", 0)).unwrap();
        assert_eq!(target.limit, Duration::from_secs(30));
        let args: Vec<String> = arguments(Path::new("/state"), &target)
            .into_iter()
            .map(|arg| arg.into_string().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "--state-root=/state".to_string(),
                "--json".into(),
                "eval".into(),
                "--case=--help; rm -rf /".into(),
                "--models=fast".into(),
                format!("--replay={}", cassettes.path().display()),
                "--timeout=30".into(),
                "--".into(),
                "smoke".into(),
            ]
        );
        // Unknown runs and cases are not found; names are matched, never
        // joined onto a path.
        for (run, case) in [("nope", 0), ("..", 0), ("20261128T010000Z", 1)] {
            assert!(
                matches!(
                    find_rerun(&root, &ask(run, case)),
                    Err(ActionError::NotFound(..))
                ),
                "{run}/{case}"
            );
        }
        // What the stored run says is checked: a bundle that is not an
        // absolute folder, a replay without its cassettes.
        let refusals = [
            (
                json!({"bundle": "relative", "replay": false, "cases": [{"eval": "e", "name": "c"}]}),
                "E_STUDIO_RERUN_NO_BUNDLE",
            ),
            (
                json!({"bundle": state.path().join("gone"), "replay": false, "cases": [{"eval": "e", "name": "c"}]}),
                "E_STUDIO_RERUN_NO_BUNDLE",
            ),
            (
                json!({"bundle": bundle.path(), "replay": true, "cases": [{"eval": "e", "name": "c"}]}),
                "E_STUDIO_RERUN_NO_CASSETTES",
            ),
            (
                json!({"bundle": bundle.path(), "replay": false, "cases": [{"eval": 3, "name": "c"}]}),
                "E_STUDIO_RERUN_UNREADABLE",
            ),
        ];
        for (n, (report, code)) in refusals.into_iter().enumerate() {
            let id = format!("20261128T02000{n}Z");
            stored(state.path(), &id, report);
            match find_rerun(&root, &ask(&id, 0)) {
                Err(ActionError::Refused(body)) => assert_eq!(body.code, code, "{id}"),
                other => panic!("{id}: {other:?}"),
            }
        }
        // An older run without the fields: no flags, the default limit.
        stored(
            state.path(),
            "20261128T030000Z",
            json!({"bundle": bundle.path(), "replay": false, "cases": [{"eval": "e", "name": "c", "model": null}]}),
        );
        let older = find_rerun(&root, &ask("20261128T030000Z", 0)).unwrap();
        assert_eq!(older.limit, DEFAULT_CASE_LIMIT);
        assert_eq!(
            arguments(Path::new("/s"), &older),
            ["--state-root=/s", "--json", "eval", "--case=c", "--", "e"].map(OsString::from)
        );
    }

    #[test]
    fn the_new_run_is_named_by_the_report_even_when_it_was_cut() {
        assert_eq!(
            new_run_id(br#"{"runId":"20261128T010000Z","cases":[]}"#).as_deref(),
            Some("20261128T010000Z")
        );
        assert_eq!(
            new_run_id(br#"{"runId":"20261128T010000Z","cases":[{"answer":"tru"#).as_deref(),
            Some("20261128T010000Z")
        );
        assert_eq!(new_run_id(b""), None);
        assert_eq!(
            child_error(b"noise\n{\"error\":{\"code\":\"E_EVAL_CASE_NOT_FOUND\",\"message\":\"no case\",\"suggestion\":null}}\n")
                .map(|body| body.code),
            Some("E_EVAL_CASE_NOT_FOUND".to_string())
        );
    }
}
