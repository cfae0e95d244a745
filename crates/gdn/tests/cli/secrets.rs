//! Issue 16 #1, end to end: the model must never be able to read an API
//! key. A Model takes its key from `apiKey.valueFrom.env: MY_KEY`, another
//! Model's key sits in the bundle's `.env`, `OPENAI_API_KEY` is set too,
//! and the mock LLM makes the agent run bash commands that look for them:
//! `env`, its parent's `/proc/$PPID/environ`, `echo $MY_KEY; printenv
//! OPENAI_API_KEY` and `cat .env`. No key value may then appear anywhere:
//! not in a request body the mock received, not in any file of the System
//! Root (conversation, runtime events, process logs), not in the cassette
//! of `--record`, not on stdout or stderr. The key still reaches the
//! provider, in the `Authorization` header only.

use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// The key the Model reads through `valueFrom.env: MY_KEY`.
const MY_KEY: &str = "sk-test-SECRET-9f3a7c2e1b";
/// The provider's usual variable, set for the run but not referenced.
const OPENAI_KEY: &str = "sk-openai-OTHER-4d8b6a1f09";
/// A key that only the bundle's `.env` file holds.
const DOTENV_KEY: &str = "sk-dotenv-FILE-71c0e5b3aa";
const SECRETS: [&str; 3] = [MY_KEY, OPENAI_KEY, DOTENV_KEY];
/// Long enough for a loaded two-core machine, short enough to fail a hang.
const DEADLINE: Duration = Duration::from_secs(60);

/// The commands the model asks for, in order.
const COMMANDS: [&str; 4] = [
    "env",
    "cat /proc/$PPID/environ | tr '\\0' '\\n'",
    "echo $MY_KEY; printenv OPENAI_API_KEY",
    "cat .env",
];

fn bundle_text(endpoint: &str) -> String {
    format!(
        "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: llm
spec:
  provider: openai
  model: gpt-mock
  endpoint: \"{endpoint}\"
  apiKey:
    valueFrom:
      env: MY_KEY
  options:
    maxRetries: 0
---
# Never called: it only makes DOTENV_KEY a secret the bundle reads.
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: spare
spec:
  provider: openai
  model: gpt-spare
  endpoint: \"{endpoint}\"
  apiKey:
    valueFrom:
      env: DOTENV_KEY
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: snoop
spec:
  modelConfig:
    modelRef: Model/llm
  tools:
    - ref: Tool/bash
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/snoop
  agents:
    - ref: Agent/snoop
  policy:
    maxStepsPerTurn: 8
"
    )
}

/// One bash command per step, then a text answer that quotes the last
/// tool result (so what the model read also reaches stdout).
fn snoop(request: &ChatRequest) -> Reply {
    let n_results = request
        .messages()
        .iter()
        .filter(|message| message["role"] == "tool")
        .count();
    match COMMANDS.get(n_results) {
        Some(command) => Reply::tool("bash__exec", json!({"command": command})),
        None => Reply::text(format!(
            "done; last result: {}",
            request.tool_result().unwrap_or_default()
        )),
    }
}

/// `gdn --config BUNDLE --state-root STATE ARGS...` with the keys (and
/// `extra_env`) in its environment, killed if it outlives [`DEADLINE`]. Output goes to files,
/// so a chatty child never blocks on a full pipe.
fn run_gdn(bundle: &Path, state: &Path, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
    let out_dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .arg("--config")
        .arg(bundle)
        .arg("--state-root")
        .arg(state)
        .args(args)
        .current_dir(bundle);
    for variable in [
        "ANTHROPIC_API_KEY",
        "GOOGLE_GENERATIVE_AI_API_KEY",
        "GOONDAN_STATE_ROOT",
        "RUST_LOG",
        "DOTENV_KEY",
    ] {
        command.env_remove(variable);
    }
    command
        .env("MY_KEY", MY_KEY)
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .envs(extra_env.iter().copied());
    crate::run_to_files(command, out_dir.path(), DEADLINE, &format!("gdn {args:?}"))
}

/// Fails if `secret` occurs in any file below any of `dirs`.
pub(crate) fn assert_nowhere_below(secret: &str, dirs: &[&Path]) {
    for path in dirs.iter().flat_map(|dir| files_below(dir)) {
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            !bytes
                .windows(secret.len())
                .any(|window| window == secret.as_bytes()),
            "a secret is in {}",
            path.display()
        );
    }
}

/// Every regular file below `dir`.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(path),
                Ok(kind) if kind.is_file() => files.push(path),
                _ => {}
            }
        }
    }
    files
}

/// Where each key value occurs among `places` (name, bytes).
fn leaks(places: &[(String, Vec<u8>)]) -> Vec<String> {
    let mut found = Vec::new();
    for (place, bytes) in places {
        for secret in SECRETS {
            let needle = secret.as_bytes();
            if bytes.windows(needle.len()).any(|window| window == needle) {
                found.push(format!("{secret} in {place}"));
            }
        }
    }
    found
}

/// Runs the snooping Turn once (recording to `cassette` when given) and
/// checks every place a key could leak to.
fn snoop_run(cassette: Option<&Path>) {
    let mock = MockLlm::start(snoop);
    let bundle = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(
        bundle.path().join("goondan.yaml"),
        bundle_text(&mock.endpoint()),
    )
    .unwrap();
    std::fs::write(
        bundle.path().join(".env"),
        format!("DOTENV_KEY={DOTENV_KEY}\n"),
    )
    .unwrap();
    let mut args = vec!["run", "--input", "look for keys"];
    if let Some(cassette) = cassette {
        args.extend(["--record", cassette.to_str().unwrap()]);
    }
    let output = run_gdn(bundle.path(), state.path(), &args, &[]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(stdout.starts_with("done; last result:"), "{stdout}");

    let requests = mock.requests();
    assert_eq!(requests.len(), COMMANDS.len() + 1, "one call per step");
    for request in &requests {
        assert_eq!(
            request.authorization.as_deref(),
            Some(format!("Bearer {MY_KEY}").as_str()),
            "the provider still gets the key, in the header"
        );
    }
    // Each command ran: the agent really looked.
    let results: Vec<String> = requests
        .iter()
        .filter_map(|request| request.tool_result().map(str::to_string))
        .collect();
    assert_eq!(results.len(), COMMANDS.len());
    assert!(results[0].contains("PATH="), "env ran: {}", results[0]);
    // The file on disk holds the key; the model reads a marker instead.
    assert!(
        results[3].contains("DOTENV_KEY=[REDACTED:DOTENV_KEY]"),
        "cat .env: {}",
        results[3]
    );

    let mut places: Vec<(String, Vec<u8>)> = vec![
        ("stdout".into(), output.stdout.clone()),
        ("stderr".into(), output.stderr.clone()),
    ];
    for (index, request) in requests.iter().enumerate() {
        places.push((
            format!("request body {index}"),
            request.body.to_string().into_bytes(),
        ));
    }
    let state_files = files_below(state.path());
    assert!(
        state_files
            .iter()
            .any(|path| path.ends_with("messages/base.jsonl")),
        "the conversation was stored: {state_files:?}"
    );
    for path in state_files {
        let bytes = std::fs::read(&path).unwrap_or_default();
        places.push((path.display().to_string(), bytes));
    }
    if let Some(cassette) = cassette {
        places.push((
            "the cassette".into(),
            std::fs::read(cassette).expect("the cassette was written"),
        ));
    }
    let found = leaks(&places);
    assert!(found.is_empty(), "keys leaked: {found:#?}");
}

#[test]
fn secrets_never_reach_the_model_the_state_root_or_the_output() {
    snoop_run(None);
}

#[test]
fn secrets_never_reach_a_recorded_cassette() {
    let dir = tempfile::tempdir().unwrap();
    snoop_run(Some(&dir.path().join("cassette.jsonl")));
}

/// The key of the second agent's Model, set in `gdn`'s environment.
const OTHER_AGENT_KEY: &str = "sk-ant-OTHER-AGENT-5e2d9c";

/// The snooping agent runs `echo`, and a second agent has a Model of its
/// own whose key comes from another variable.
fn two_agents_text(endpoint: &str) -> String {
    let one_agent = bundle_text(endpoint);
    let models_and_snoop = one_agent
        .split("---\napiVersion: goondan.ai/v1\nkind: Swarm")
        .next()
        .unwrap();
    format!(
        "{models_and_snoop}---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: other-llm
spec:
  provider: anthropic
  model: claude-mock
  endpoint: \"{endpoint}\"
  apiKey:
    valueFrom:
      env: OTHER_AGENT_KEY
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: other
spec:
  modelConfig:
    modelRef: Model/other-llm
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/snoop
  agents:
    - ref: Agent/snoop
    - ref: Agent/other
"
    )
}

/// Issue 35: an agent's process is handed only the secrets its own
/// resources read. Its tool results are masked with every secret it
/// holds, so echoing both keys shows which it holds: its own Model's key
/// comes back masked, the other agent's comes back as written, because
/// the snooping agent never received it (before the fix every child got
/// every key, and both came back masked).
#[test]
fn secrets_an_agent_holds_are_only_those_its_own_resources_read() {
    let command = format!("echo {OTHER_AGENT_KEY} {MY_KEY}");
    let mock = MockLlm::start(move |request: &ChatRequest| match request.tool_result() {
        None => Reply::tool("bash__exec", json!({"command": command})),
        Some(result) => Reply::text(format!("done; last result: {result}")),
    });
    let bundle = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(
        bundle.path().join("goondan.yaml"),
        two_agents_text(&mock.endpoint()),
    )
    .unwrap();
    std::fs::write(
        bundle.path().join(".env"),
        format!("DOTENV_KEY={DOTENV_KEY}\n"),
    )
    .unwrap();
    let output = run_gdn(
        bundle.path(),
        state.path(),
        &["run", "--input", "echo the keys"],
        &[("OTHER_AGENT_KEY", OTHER_AGENT_KEY)],
    );
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    let requests = mock.requests();
    let result = requests
        .iter()
        .find_map(|request| request.tool_result().map(str::to_string))
        .expect("the echo ran");
    assert!(result.contains("[REDACTED:MY_KEY]"), "own key: {result}");
    assert!(
        result.contains(OTHER_AGENT_KEY) && !result.contains("[REDACTED:OTHER_AGENT_KEY]"),
        "the other agent's key was handed to this agent: {result}"
    );
}

/// A key only `gdn`'s environment holds, looked for by the scanners below.
const SCANNED_KEY: &str = "sk-scan-ENVIRON-3c7e19d04a";

/// A Python tool that lists the processes whose environment block holds
/// `needle`: what a plugin (run as root here, as in a container) could
/// learn by reading every `/proc/<pid>/environ`.
const SCAN_TOOL: &str = r#"import os


def scan(_ctx, input):
    needle = input["needle"].encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as environ:
                if needle in environ.read():
                    found.append(int(name))
        except OSError:
            pass
    return {"found": found, "scanned": True}


handlers = {"scan": scan}
"#;

/// Issue 35: the orchestrator (and every process of ours) scrubs the
/// environment block it started with, so reading every
/// `/proc/<pid>/environ` on the machine finds no key, even outside the
/// sandboxes (both turned off here) and as root. Before the fix the
/// orchestrator's block held `MY_KEY` and `SCANNED_KEY` (inherited from
/// the shell), and both scanners found it.
#[test]
fn no_process_environment_on_the_machine_holds_a_key() {
    let grep = format!("grep -lsa -- '{SCANNED_KEY}' /proc/[0-9]*/environ; echo scanned");
    let mock = MockLlm::start(move |request: &ChatRequest| {
        match request
            .messages()
            .iter()
            .filter(|message| message["role"] == "tool")
            .count()
        {
            0 => Reply::tool("bash__exec", json!({"command": grep})),
            1 => Reply::tool("scan__scan", json!({"needle": SCANNED_KEY})),
            2 => Reply::tool("scan__scan", json!({"needle": MY_KEY})),
            _ => Reply::text("done"),
        }
    });
    let bundle = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let with_scan_tool = bundle_text(&mock.endpoint()).replace(
        "    - ref: Tool/bash\n",
        "    - ref: Tool/bash\n    - ref: Tool/scan\n",
    ) + "---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: scan
spec:
  entry: ./scan.py
  exports:
    - name: scan
      description: Lists the processes whose environment holds a text.
      parameters:
        type: object
        properties:
          needle: { type: string }
";
    std::fs::write(bundle.path().join("goondan.yaml"), with_scan_tool).unwrap();
    std::fs::write(bundle.path().join("scan.py"), SCAN_TOOL).unwrap();
    let output = run_gdn(
        bundle.path(),
        state.path(),
        &["run", "--input", "scan the machine"],
        &[
            ("SCANNED_KEY", SCANNED_KEY),
            ("DOTENV_KEY", DOTENV_KEY),
            ("GOONDAN_BASH_SANDBOX", "off"),
            ("GOONDAN_PLUGIN_SANDBOX", "off"),
        ],
    );
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Vec<String> = mock
        .requests()
        .iter()
        .filter_map(|request| request.tool_result().map(str::to_string))
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    let bash: serde_json::Value = serde_json::from_str(&results[0]).unwrap();
    assert_eq!(bash["stdout"], "scanned\n", "bash found the key");
    for result in &results[1..] {
        let result: serde_json::Value = serde_json::from_str(result).unwrap();
        assert_eq!(result["scanned"], true);
        assert_eq!(result["found"], json!([]), "the plugin found a key");
    }
}
