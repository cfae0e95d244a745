//! `gdn eval` (issue 39) end to end: the built binary runs Eval cases as
//! real swarms (orchestrator and agent processes) against the mock LLM of
//! [`crate::mock_llm`], which also plays the judge; each test checks the
//! report (`--json`), the exit code and what is left on disk.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const COORDINATOR: &str = "agent COORDINATOR";
const RESEARCHER: &str = "agent RESEARCHER";
/// Long enough for a loaded two-core machine, short enough to fail a hang.
const DEADLINE: Duration = Duration::from_secs(120);

/// Two agents and a judge on the mock; the agents' Models are priced so
/// cost assertions have numbers. `evals` is appended as more documents.
fn bundle(dir: &Path, endpoint: &str, evals: &str) {
    let model = |name: &str, id: &str| {
        format!(
            "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: {name}
spec:
  provider: openai
  model: {id}
  endpoint: \"{endpoint}\"
  options:
    maxRetries: 0
  pricing:
    inputUsdPerMillionTokens: 1
    outputUsdPerMillionTokens: 2
---
"
        )
    };
    let text = format!(
        "{}{}{}apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: coordinator
spec:
  modelConfig:
    modelRef: Model/llm
  prompt:
    system: \"You are {COORDINATOR}.\"
  tools:
    - ref: Tool/agents
  extensions:
    - ref: Extension/context-message
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: researcher
spec:
  modelConfig:
    modelRef: Model/llm
  prompt:
    system: \"You are {RESEARCHER}.\"
  extensions:
    - ref: Extension/context-message
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/coordinator
  agents:
    - ref: Agent/coordinator
    - ref: Agent/researcher
---
{evals}",
        model("llm", "gpt-a"),
        model("llm-b", "gpt-b"),
        model("judge", "judge-mock"),
    );
    std::fs::write(dir.join("goondan.yaml"), text).unwrap();
}

/// The mock's answers: the judge by the case named in its prompt, the
/// researcher with facts, the coordinator by its last user message
/// (`delegate …` asks the researcher, `count` says how many user messages
/// its conversation holds, `hang` never answers, JSON is answered as is,
/// anything else is echoed; with Model `gpt-b` the echo is marked `[b]`).
fn decide(request: &ChatRequest) -> Reply {
    if request.body["model"] == "judge-mock" {
        let prompt = request.last_user_text();
        return Reply::text(if prompt.contains("judge-good") {
            r#"{"score": 8, "deductions": [{"criterion": "mentions tools", "pointsDeducted": 2, "reason": "it does not"}]}"#
        } else if prompt.contains("judge-low") {
            r#"{"score": 3, "deductions": [{"criterion": "correct", "pointsDeducted": 7, "reason": "wrong"}]}"#
        } else if prompt.contains("judge-malformed") {
            "Score: 9/10, well done"
        } else {
            "I'm sorry, but I can't help with grading that."
        });
    }
    if request.is_from(RESEARCHER) {
        return Reply::text(format!("facts about {}", request.last_user_text()));
    }
    if let Some(result) = request.tool_result() {
        let result: Value = serde_json::from_str(result).unwrap_or(Value::Null);
        return Reply::text(format!("The researcher says: {}", result["response"]));
    }
    let text = request.last_user_text();
    if let Some(topic) = text.strip_prefix("delegate ") {
        return Reply::tool(
            "agents__request",
            json!({"target": "researcher", "input": topic}),
        );
    }
    if text == "count" {
        let n = request
            .messages()
            .iter()
            .filter(|message| message["role"] == "user")
            .count();
        return Reply::text(format!("user messages: {n}"));
    }
    if text == "hang" {
        return Reply::Hang;
    }
    if text.starts_with('{') {
        return Reply::text(text);
    }
    if request.body["model"] == "gpt-b" {
        return Reply::text(format!("[b] echo: {text}"));
    }
    Reply::text(format!("echo: {text}"))
}

/// `gdn --config BUNDLE --state-root STATE ARGS…` with no provider key
/// but `api_key`; killed if it outlives [`DEADLINE`].
fn run_gdn(bundle: &Path, state: &Path, args: &[&str], api_key: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .arg("--config")
        .arg(bundle)
        .arg("--state-root")
        .arg(state)
        .args(args)
        .current_dir(bundle);
    for variable in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GOONDAN_STATE_ROOT",
        "RUST_LOG",
    ] {
        command.env_remove(variable);
    }
    if let Some(key) = api_key {
        command.env("OPENAI_API_KEY", key);
    }
    crate::run_to_files(command, bundle, DEADLINE, &format!("gdn {args:?}"))
}

/// The `--json` report of a run.
fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "not a JSON report ({error}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The case named `name` of a report.
fn case<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|case| case["name"] == name)
        .unwrap_or_else(|| panic!("no case {name} in {report:#}"))
}

/// The assertion keys of a case's failures.
fn failed_checks(case: &Value) -> Vec<String> {
    case["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|failure| failure["assertion"].as_str().unwrap().to_string())
        .collect()
}

const DETERMINISTIC: &str = "apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: checks
spec:
  cases:
    - name: all-hold
      input: delegate tides
      assert:
        - contains: \"facts about tides\"
        - notContains: error
        - regex: \"^The researcher says\"
        - equals: 'The researcher says: \"facts about tides\"'
        - toolCalled: { name: agents__request, args: { target: researcher, input: tides } }
        - toolNotCalled: { name: bash__exec }
        - agentAsked: researcher
        - maxSteps: 3
        - maxTokens: 100000
        - maxCostUsd: 1
        - maxLatencyMs: 60000
        - noErrors: true
    - name: all-fail
      input: delegate tides
      assert:
        - contains: volcanoes
        - notContains: tides
        - regex: \"^[0-9]\"
        - equals: something else
        - toolCalled: { name: agents__request, args: { target: writer } }
        - toolNotCalled: { name: agents__request }
        - maxSteps: 2
        - maxTokens: 1
        - maxCostUsd: 0
        - maxLatencyMs: 0
    - name: schema
      input: '{\"n\": 3}'
      assert:
        - jsonSchema: { type: object }
        - agentAsked: coordinator
    - name: schema-fails
      input: plain words
      assert:
        - jsonSchema: { type: object }
        - agentAsked: researcher
";

#[test]
fn deterministic_assertions_each_pass_and_fail_on_purpose() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    bundle(dir.path(), &mock.endpoint(), DETERMINISTIC);
    let output = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--json"],
        Some("sk-test"),
    );
    assert_eq!(output.status.code(), Some(1), "a failed case fails the run");
    let report = report(&output);
    let holds = case(&report, "all-hold");
    assert_eq!(holds["status"], "passed", "{holds:#}");
    assert!(holds["steps"].as_u64().unwrap() >= 3, "{holds:#}");
    assert!(holds["costUsd"].as_f64().unwrap() > 0.0, "{holds:#}");
    // The Turn as its log recorded it lies within the time to the answer.
    let turn_ms = holds["turnMs"].as_u64().unwrap();
    assert!(
        turn_ms > 0 && turn_ms <= holds["latencyMs"].as_u64().unwrap(),
        "{holds:#}"
    );
    let fails = case(&report, "all-fail");
    assert_eq!(fails["status"], "failed");
    assert_eq!(
        failed_checks(fails),
        [
            "contains",
            "notContains",
            "regex",
            "equals",
            "toolCalled",
            "toolNotCalled",
            "maxSteps",
            "maxTokens",
            "maxCostUsd",
            "maxLatencyMs"
        ]
    );
    assert_eq!(case(&report, "schema")["status"], "passed");
    assert_eq!(
        failed_checks(case(&report, "schema-fails")),
        ["jsonSchema", "agentAsked"]
    );
    assert_eq!(report["passed"], false);
}

const JUDGED: &str = "apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: judged
spec:
  judge: Model/judge
  threshold: 7
  cases:
    - name: judge-good
      input: explain turns (judge-good)
      expected: a short explanation
      rubric: [mentions steps, mentions tools]
    - name: judge-low
      input: explain turns (judge-low)
      rubric: [correct]
    - name: judge-malformed
      input: explain turns (judge-malformed)
      rubric: [correct]
    - name: judge-refusal
      input: explain turns (judge-refusal)
      rubric: [correct]
";

#[test]
fn a_judge_scores_and_a_malformed_answer_or_a_refusal_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    bundle(dir.path(), &mock.endpoint(), JUDGED);
    let output = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--json"],
        Some("sk-test"),
    );
    assert_eq!(output.status.code(), Some(1));
    let report = report(&output);
    let good = case(&report, "judge-good");
    assert_eq!(good["status"], "passed", "{good:#}");
    assert_eq!(good["score"], 8.0);
    assert_eq!(good["deductions"][0]["pointsDeducted"], 2.0);
    let low = case(&report, "judge-low");
    assert_eq!(low["status"], "failed");
    assert_eq!(low["score"], 3.0);
    assert_eq!(failed_checks(low), ["threshold"]);
    for name in ["judge-malformed", "judge-refusal"] {
        let bad = case(&report, name);
        assert_eq!(bad["status"], "error", "{bad:#}");
        assert_eq!(bad["passed"], false);
        assert_eq!(bad["score"], Value::Null);
        assert_eq!(failed_checks(bad), ["E_EVAL_JUDGE_ANSWER"]);
    }
    // The judge saw the conversation, the rubric and the expected behavior.
    let prompts: Vec<String> = mock
        .requests()
        .into_iter()
        .filter(|request| request.body["model"] == "judge-mock")
        .map(|request| request.last_user_text())
        .collect();
    assert!(
        prompts
            .iter()
            .any(|p| p.contains("User: explain turns (judge-good)")
                && p.contains("Agent: echo: explain turns (judge-good)")
                && p.contains("1. mentions steps")
                && p.contains("a short explanation")),
        "{prompts:?}"
    );
}

const SIMPLE: &str = "apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: simple
spec:
  judge: Model/judge
  cases:
    - name: echo
      input: hello
      assert:
        - regex: \"^echo: hello$\"
    - name: delegates
      input: delegate tides
      assert:
        - agentAsked: researcher
        - toolCalled: { name: agents__request, args: { target: researcher } }
    - name: judge-good
      input: explain (judge-good)
      rubric: [mentions steps]
";

#[test]
fn a_matrix_of_two_models_runs_every_case_with_each() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    bundle(dir.path(), &mock.endpoint(), SIMPLE);
    let output = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--json", "--models", "llm,llm-b", "--repeat", "2"],
        Some("sk-test"),
    );
    let report = report(&output);
    // 3 cases × 2 Models × 2 repeats; `echo` fails with Model b.
    assert_eq!(report["cases"].as_array().unwrap().len(), 12);
    let runs = |model: &str, name: &str| -> Vec<Value> {
        report["cases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|case| case["model"] == model && case["name"] == name)
            .cloned()
            .collect()
    };
    assert!(runs("llm", "echo").iter().all(|run| run["passed"] == true));
    let with_b = runs("llm-b", "echo");
    assert_eq!(with_b.len(), 2);
    assert!(with_b.iter().all(|run| run["answer"] == "[b] echo: hello"));
    assert!(with_b.iter().all(|run| run["passed"] == false));
    assert!(runs("llm-b", "delegates")
        .iter()
        .all(|run| run["passed"] == true));
    // The matrix reached the provider: both model ids were asked.
    let ids: std::collections::BTreeSet<String> = mock
        .requests()
        .iter()
        .map(|request| request.body["model"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ids,
        ["gpt-a", "gpt-b", "judge-mock"].map(String::from).into()
    );
    let summary = report["summary"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "judge-good" && s["model"] == "llm-b")
        .unwrap();
    assert_eq!(summary["runs"], 2);
    assert_eq!(summary["passed"], 2);
    assert_eq!(summary["meanScore"], 8.0);
    assert_eq!(summary["spread"], 0.0);
    assert_eq!(output.status.code(), Some(1));
}

/// What a run's cases came to, for comparing two runs.
fn outcomes(report: &Value) -> Vec<(String, String, Value, Value)> {
    report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| {
            (
                case["name"].as_str().unwrap().to_string(),
                case["status"].as_str().unwrap().to_string(),
                case["score"].clone(),
                case["answer"].clone(),
            )
        })
        .collect()
}

#[test]
fn recorded_cases_replay_offline_with_the_mock_stopped_and_no_key() {
    let dir = tempfile::tempdir().unwrap();
    let cassettes = dir.path().join("cassettes");
    let mock = MockLlm::start(decide);
    bundle(dir.path(), &mock.endpoint(), SIMPLE);
    let recording_state = tempfile::tempdir().unwrap();
    let recorded = run_gdn(
        dir.path(),
        recording_state.path(),
        &["eval", "--json", "--record", cassettes.to_str().unwrap()],
        Some("sk-record"),
    );
    assert_eq!(
        recorded.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&recorded.stderr)
    );
    let n_requests = mock.requests().len();
    drop(mock);
    assert!(cassettes.join("simple/delegates.jsonl").is_file());
    assert!(cassettes.join("simple/judge-good.judge.jsonl").is_file());
    let replay_state = tempfile::tempdir().unwrap();
    let replayed = run_gdn(
        dir.path(),
        replay_state.path(),
        &["eval", "--json", "--replay", cassettes.to_str().unwrap()],
        None,
    );
    assert_eq!(
        replayed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&replayed.stdout)
    );
    let (recorded, replayed) = (report(&recorded), report(&replayed));
    assert_eq!(outcomes(&recorded), outcomes(&replayed));
    assert_eq!(replayed["replay"], true);
    assert!(n_requests >= 5);
    // A case with no cassette is an error, not a pass.
    std::fs::remove_file(cassettes.join("simple/echo.jsonl")).unwrap();
    let missing = run_gdn(
        dir.path(),
        replay_state.path(),
        &["eval", "--json", "--replay", cassettes.to_str().unwrap()],
        None,
    );
    assert_eq!(missing.status.code(), Some(1));
    let echo = case(&report(&missing), "echo").clone();
    assert_eq!(echo["status"], "error");
    assert_eq!(failed_checks(&echo), ["E_EVAL_CASSETTE_MISSING"]);
}

/// Issue 49 #4: a recorded case whose tools report measured times (`bash`'s
/// `durationMs`, `wait`'s `waitedMs`) replays every time, because the
/// cassette's matching blanks them at record and at replay alike.
#[test]
fn a_recorded_tool_case_replays_twenty_times_in_a_row() {
    let dir = tempfile::tempdir().unwrap();
    let cassettes = dir.path().join("cassettes");
    let mock = MockLlm::start(|request: &ChatRequest| {
        let n_results = request
            .messages()
            .iter()
            .filter(|message| message["role"] == "tool")
            .count();
        match n_results {
            0 => Reply::tool(
                "bash__exec",
                json!({"command": "sleep 0.0$((RANDOM % 9)); echo measured"}),
            ),
            1 => Reply::tool("wait__seconds", json!({"seconds": 0.01})),
            _ => Reply::text("done with both tools"),
        }
    });
    bundle(
        dir.path(),
        &mock.endpoint(),
        "apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: timed
spec:
  cases:
    - name: tools
      input: use the tools
      assert:
        - toolCalled: { name: bash__exec }
        - toolCalled: { name: wait__seconds }
        - regex: \"^done with both tools$\"
",
    );
    let path = dir.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap().replacen(
        "  tools:\n    - ref: Tool/agents\n",
        "  tools:\n    - ref: Tool/agents\n    - ref: Tool/bash\n    - ref: Tool/wait\n",
        1,
    );
    std::fs::write(&path, text).unwrap();
    let recording_state = tempfile::tempdir().unwrap();
    let recorded = run_gdn(
        dir.path(),
        recording_state.path(),
        &["eval", "--json", "--record", cassettes.to_str().unwrap()],
        Some("sk-record"),
    );
    assert_eq!(
        recorded.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&recorded.stdout)
    );
    drop(mock);
    let cassette = std::fs::read_to_string(cassettes.join("timed/tools.jsonl")).unwrap();
    assert!(cassette.contains("durationMs"), "{cassette}");
    for attempt in 1..=20 {
        let state = tempfile::tempdir().unwrap();
        let replayed = run_gdn(
            dir.path(),
            state.path(),
            &["eval", "--json", "--replay", cassettes.to_str().unwrap()],
            None,
        );
        assert_eq!(
            replayed.status.code(),
            Some(0),
            "replay {attempt}: {}",
            String::from_utf8_lossy(&replayed.stdout)
        );
        assert_eq!(case(&report(&replayed), "tools")["status"], "passed");
    }
}

/// Python's `junitparser` (a real JUnit consumer), installed when missing.
fn junitparser() -> bool {
    let found = |python: &str| {
        Command::new(python)
            .args(["-c", "import junitparser"])
            .status()
            .is_ok_and(|status| status.success())
    };
    if found("python3") {
        return true;
    }
    let _ = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "junitparser==3.2.0",
        ])
        .status();
    found("python3")
}

#[test]
fn junit_output_is_read_by_a_real_junit_consumer() {
    assert!(
        junitparser(),
        "python3 with junitparser (pip install junitparser==3.2.0)"
    );
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    bundle(
        dir.path(),
        &mock.endpoint(),
        &format!("{SIMPLE}---\n{JUDGED}"),
    );
    let junit = dir.path().join("out/junit.xml");
    let markdown = dir.path().join("out/report.md");
    let output = run_gdn(
        dir.path(),
        state.path(),
        &[
            "eval",
            "--junit",
            junit.to_str().unwrap(),
            "--markdown",
            markdown.to_str().unwrap(),
        ],
        Some("sk-test"),
    );
    assert_eq!(output.status.code(), Some(1));
    let script = r#"
import sys, json
from junitparser import JUnitXml, Failure, Error
xml = JUnitXml.fromfile(sys.argv[1])
out = {}
suites = {}
for suite in xml:
    suites[suite.name] = {"time": suite.time, "cases": [case.time for case in suite]}
    for case in suite:
        kinds = [type(r).__name__ for r in case.result]
        out[suite.name + "/" + case.name] = {"classname": case.classname, "results": kinds, "time": case.time}
print(json.dumps({"tests": xml.tests, "failures": xml.failures, "errors": xml.errors, "time": xml.time, "suites": suites, "cases": out}))
"#;
    let parsed = Command::new("python3")
        .args(["-c", script, junit.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        parsed.status.success(),
        "{}",
        String::from_utf8_lossy(&parsed.stderr)
    );
    let parsed: Value = serde_json::from_slice(&parsed.stdout).unwrap();
    assert_eq!(parsed["tests"], 7);
    assert_eq!(parsed["failures"], 1);
    assert_eq!(parsed["errors"], 2);
    let cases = &parsed["cases"];
    assert_eq!(cases["simple/echo"]["results"], json!([]));
    assert_eq!(cases["simple/echo"]["classname"], "simple");
    assert_eq!(cases["judged/judge-low"]["results"], json!(["Failure"]));
    assert_eq!(cases["judged/judge-refusal"]["results"], json!(["Error"]));
    // Issue 49 #5: times are clock time. Cases run at once (`--jobs`
    // defaults to the cores), so a suite's time is the span of its cases,
    // not their sum, and fits in the whole run; each case fits in its
    // suite. A sum once made a suite outlast the run it was part of.
    let total = parsed["time"].as_f64().unwrap();
    assert!(total > 0.0, "{parsed}");
    let suites = parsed["suites"].as_object().unwrap();
    assert_eq!(suites.len(), 2, "{parsed}");
    for (name, suite) in suites {
        let suite_time = suite["time"].as_f64().unwrap();
        assert!(
            suite_time > 0.0 && suite_time <= total,
            "suite {name} took {suite_time} s of a {total} s run: {parsed}"
        );
        for case_time in suite["cases"].as_array().unwrap() {
            let case_time = case_time.as_f64().unwrap();
            assert!(
                case_time > 0.0 && case_time <= suite_time,
                "a case of {name} took {case_time} s of its suite's {suite_time} s: {parsed}"
            );
        }
    }
    let markdown = std::fs::read_to_string(&markdown).unwrap();
    assert!(
        markdown.contains("| judged | judge-low | - | 3.0 | FAIL |"),
        "{markdown}"
    );
    // The terminal table names every case with its result.
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.contains("judged/judge-refusal"), "{table}");
    assert!(table.contains("E_EVAL_JUDGE_ANSWER"), "{table}");
    assert!(table.contains("4 of 7 passed"), "{table}");
}

#[test]
fn parallel_cases_do_not_share_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    let mut evals = String::from(
        "apiVersion: goondan.ai/v1\nkind: Eval\nmetadata:\n  name: apart\nspec:\n  cases:\n",
    );
    for n in 0..4 {
        // Same agent, same instance key: only separate System Roots keep
        // their conversations apart.
        evals.push_str(&format!(
            "    - name: c{n}\n      turns: [\"one {n}\", \"count\"]\n      assert:\n        - equals: \"user messages: 2\"\n"
        ));
    }
    bundle(dir.path(), &mock.endpoint(), &evals);
    let output = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--json", "--jobs", "4"],
        Some("sk-test"),
    );
    let report = report(&output);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    let roots: std::collections::BTreeSet<&str> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| case["stateRoot"].as_str().unwrap())
        .collect();
    assert_eq!(roots.len(), 4);
    for root in roots {
        assert!(
            Path::new(root).starts_with(state.path().join("evals")),
            "{root}"
        );
    }
}

/// The pids of live processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn a_case_that_times_out_is_reported_and_its_processes_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    let evals = "apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: slow
spec:
  timeoutSeconds: 2
  cases:
    - name: hangs
      input: hang
    - name: quick
      input: hi
      assert:
        - contains: \"echo: hi\"
";
    bundle(dir.path(), &mock.endpoint(), evals);
    let started = Instant::now();
    let output = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--json"],
        Some("sk-test"),
    );
    let report = report(&output);
    assert_eq!(output.status.code(), Some(1));
    let hangs = case(&report, "hangs");
    assert_eq!(hangs["status"], "timedOut", "{hangs:#}");
    assert_eq!(failed_checks(hangs), ["timeout"]);
    let message = hangs["failures"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("the Turns outlived the case's time limit of 2 s"),
        "{message}"
    );
    assert_eq!(case(&report, "quick")["status"], "passed");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    // No agent of the case outlived it (they run with its state root in
    // their arguments).
    let root = hangs["stateRoot"].as_str().unwrap();
    assert_eq!(processes_mentioning(root), Vec::<u32>::new());
}

#[test]
fn a_judge_that_never_answers_times_its_case_out_at_the_cases_limit() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    // The judge's endpoint accepts the request and never answers: without
    // the case's deadline, the judge would hold it for the Model's own
    // request timeout (300 s), past this test's harness deadline.
    let (silent, held) = crate::silent_server();
    let evals = format!(
        "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: silent-judge
spec:
  provider: openai
  model: judge-silent
  endpoint: \"http://{silent}/v1\"
  options:
    maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: judged-slowly
spec:
  judge: Model/silent-judge
  timeoutSeconds: 3
  cases:
    - name: judge-hangs
      input: explain turns
      rubric: [mentions steps]
"
    );
    bundle(dir.path(), &mock.endpoint(), &evals);
    let output = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--json"],
        Some("sk-test"),
    );
    assert_eq!(output.status.code(), Some(1));
    let report = report(&output);
    let hangs = case(&report, "judge-hangs");
    assert_eq!(hangs["status"], "timedOut", "{hangs:#}");
    assert_eq!(failed_checks(hangs), ["timeout"]);
    let message = hangs["failures"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "the judge (Model/silent-judge) did not answer within the case's time limit of 3 s"
        ),
        "{message}"
    );
    // The Turn answered; it was the judge that ran out.
    assert_eq!(hangs["answer"], "echo: explain turns");
    assert_eq!(hangs["score"], Value::Null);
    assert!(
        !held.lock().unwrap().is_empty(),
        "the judge was never asked"
    );
}

#[test]
fn the_example_eval_runs_offline_and_passes() {
    let example = crate::workspace_root().join("examples/eval");
    let state = tempfile::tempdir().unwrap();
    let output = run_gdn(
        &example_copy(&example),
        state.path(),
        &["eval", "--json"],
        None,
    );
    let report = report(&output);
    assert_eq!(output.status.code(), Some(0), "{report:#}");
    assert_eq!(report["cases"].as_array().unwrap().len(), 3);
    assert_eq!(case(&report, "judged")["score"], 9.0);
    // Stored under the System Root, listed and compared.
    let runs = run_gdn(
        &example_copy(&example),
        state.path(),
        &["eval", "runs", "--json"],
        None,
    );
    let runs: Value = serde_json::from_slice(&runs.stdout).unwrap();
    assert_eq!(runs[0]["runId"], report["runId"]);
}

/// A copy of an example folder (tests write their output files beside the
/// bundle; the example stays clean).
fn example_copy(example: &Path) -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    copy_dir(example, &dir);
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().filter_map(Result::ok) {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn compare_shows_what_got_better_and_worse() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    let evals = |wanted: &str| {
        format!(
            "apiVersion: goondan.ai/v1\nkind: Eval\nmetadata:\n  name: drift\nspec:\n  cases:\n    - name: a\n      input: hello\n      assert:\n        - contains: \"{wanted}\"\n    - name: b\n      input: hello\n      assert:\n        - notContains: \"{wanted}\"\n"
        )
    };
    bundle(dir.path(), &mock.endpoint(), &evals("volcano"));
    let first = report(&run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--json"],
        Some("k"),
    ));
    bundle(dir.path(), &mock.endpoint(), &evals("hello"));
    let second = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--baseline", first["runId"].as_str().unwrap()],
        Some("k"),
    );
    let table = String::from_utf8_lossy(&second.stdout);
    assert!(table.contains("better drift/a: FAIL -> pass"), "{table}");
    assert!(table.contains("WORSE  drift/b: pass -> FAIL"), "{table}");
    assert_eq!(second.status.code(), Some(1), "a regression fails the run");
    let compared = run_gdn(
        dir.path(),
        state.path(),
        &[
            "eval",
            "compare",
            first["runId"].as_str().unwrap(),
            "latest",
            "--json",
        ],
        Some("k"),
    );
    // A regression is a failure for the CI step that compares (issue 49 #5).
    assert_eq!(compared.status.code(), Some(1));
    let compared: Value = serde_json::from_slice(&compared.stdout).unwrap();
    let changes: Vec<&str> = compared["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| case["change"].as_str().unwrap())
        .collect();
    assert_eq!(changes, ["better", "worse"]);
    // The same run against itself moved nowhere: success.
    let same = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "compare", "latest", "latest"],
        None,
    );
    assert_eq!(
        same.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&same.stdout)
    );
    let unknown = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "compare", "nope", "latest"],
        None,
    );
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("error[E_EVAL_RUN_NOT_FOUND]"));
}

#[test]
fn a_bad_eval_gets_coded_diagnostics_and_gdn_run_ignores_evals() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    bundle(dir.path(), &mock.endpoint(), "");
    std::fs::create_dir(dir.path().join("evals")).unwrap();
    std::fs::write(
        dir.path().join("evals/bad.yaml"),
        "apiVersion: goondan.ai/v1
kind: Eval
metadata:
  name: bad
spec:
  agent: coordinater
  threshold: 12
  cases:
    - name: both
      input: a
      turns: [b]
      rubric: [x]
      assert:
        - regex: \"(\"
        - containz: a
",
    )
    .unwrap();
    let validated = run_gdn(
        dir.path(),
        state.path(),
        &["validate", "--format", "json"],
        None,
    );
    assert_eq!(validated.status.code(), Some(4));
    let text = String::from_utf8_lossy(&validated.stdout).to_string()
        + &String::from_utf8_lossy(&validated.stderr);
    // The unknown assertion key is a schema error; the rest are found
    // once it is fixed.
    assert!(
        text.contains("E_CONFIG_SCHEMA") && text.contains("containz"),
        "{text}"
    );
    let fixed = std::fs::read_to_string(dir.path().join("evals/bad.yaml"))
        .unwrap()
        .replace("        - containz: a\n", "");
    std::fs::write(dir.path().join("evals/bad.yaml"), fixed).unwrap();
    let validated = run_gdn(dir.path(), state.path(), &["validate"], None);
    let text = String::from_utf8_lossy(&validated.stdout).to_string()
        + &String::from_utf8_lossy(&validated.stderr);
    for wanted in [
        "E_CONFIG_REF_NOT_FOUND",
        "did you mean Agent/coordinator?",
        "E_CONFIG_OUT_OF_RANGE",
        "E_CONFIG_MUTUALLY_EXCLUSIVE",
        "names no judge",
        "not a regular expression",
        "evals/bad.yaml",
    ] {
        assert!(text.contains(wanted), "{wanted} in {text}");
    }
    // A valid Eval is none of `gdn run`'s business.
    std::fs::write(
        dir.path().join("evals/bad.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Eval\nmetadata:\n  name: fine\nspec:\n  cases:\n    - name: x\n      input: hello\n",
    )
    .unwrap();
    let ran = run_gdn(
        dir.path(),
        state.path(),
        &["run", "--input", "hello"],
        Some("k"),
    );
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "echo: hello\n",
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let unknown = run_gdn(dir.path(), state.path(), &["eval", "nope"], Some("k"));
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains(
        "error[E_EVAL_NOT_FOUND]: Eval/nope is not defined in this bundle (there are: fine)"
    ));
}

/// Issue 49 #6: `--case NAME` runs only the cases of that name, given
/// again or with commas; an unknown one is a coded error that lists the
/// cases there are, and runs nothing. The stored run keeps what a re-run
/// needs: the bundle folder, `--config`, each case's time limit.
#[test]
fn case_runs_only_the_cases_named_and_an_unknown_one_lists_those_there_are() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(decide);
    bundle(dir.path(), &mock.endpoint(), SIMPLE);
    let names = |report: &Value| -> Vec<String> {
        report["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|case| case["name"].as_str().unwrap().to_string())
            .collect()
    };
    for args in [
        &["eval", "--json", "--case", "judge-good", "--case", "echo"][..],
        &["eval", "simple", "--json", "--case", "echo,judge-good"],
    ] {
        let output = run_gdn(dir.path(), state.path(), args, Some("sk-test"));
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report = report(&output);
        // Plan order, not the order asked in.
        assert_eq!(names(&report), ["echo", "judge-good"], "{args:?}");
        assert_eq!(
            report["bundle"],
            std::path::absolute(dir.path()).unwrap().to_str().unwrap()
        );
        assert_eq!(report["config"], report["bundle"]);
        assert_eq!(report["cassettes"], Value::Null);
        assert_eq!(report["cases"][0]["timeoutMs"], 120_000);
    }
    let n_requests = mock.requests().len();
    let n_runs = std::fs::read_dir(state.path().join("evals"))
        .unwrap()
        .count();
    let unknown = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "--case", "echo,nope"],
        Some("sk-test"),
    );
    assert_eq!(unknown.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains(
            "error[E_EVAL_CASE_NOT_FOUND]: no case `nope` in any Eval (there are: echo, delegates, judge-good)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("= help:"), "{stderr}");
    // Of the Eval named, with --json as a JSON line.
    let scoped = run_gdn(
        dir.path(),
        state.path(),
        &["eval", "simple", "--json", "--case", "tides"],
        Some("sk-test"),
    );
    assert_eq!(scoped.status.code(), Some(2));
    let line: Value = String::from_utf8_lossy(&scoped.stderr)
        .lines()
        .find_map(|line| serde_json::from_str::<Value>(line).ok())
        .unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&scoped.stderr)));
    assert_eq!(line["error"]["code"], "E_EVAL_CASE_NOT_FOUND");
    assert_eq!(
        line["error"]["message"],
        "no case `tides` in Eval/simple (there are: echo, delegates, judge-good)"
    );
    // Nothing ran and nothing was stored.
    assert_eq!(mock.requests().len(), n_requests);
    assert_eq!(
        std::fs::read_dir(state.path().join("evals"))
            .unwrap()
            .count(),
        n_runs
    );
}
