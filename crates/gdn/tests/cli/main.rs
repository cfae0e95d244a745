//! Drives the real `gdn` binary: exit codes, text, JSON and GitHub output,
//! and global flags on either side of the subcommand.

mod a2a_client;
mod approvals;
mod bash_sandbox;
mod bot_api;
mod cdp;
mod chat_approvals;
mod cluster;
mod compat;
mod connectors;
mod deploy_image;
mod deploy_manifests;
mod edges;
mod eval;
mod hardening;
mod inbox;
mod init;
mod interrupt;
mod ipc;
mod lean;
mod ledger;
mod liveness;
mod mcp;
mod mock_llm;
mod onion;
mod operator;
mod otel;
mod packages;
mod plugins;
mod replay;
mod samples;
mod script_api;
mod secrets;
mod seed_rules;
mod self_approval;
mod serve;
mod serve_openai;
mod shell_gates;
mod stdin;
mod store_damage;
mod strip_types;
mod studio;
mod studio_evals;
mod swarm;
mod telegram;
mod terminal;
mod watch;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `gdn` in `cwd` with a private state root and no color hints from
/// the environment.
fn gdn(cwd: &Path, args: &[&str]) -> Output {
    let state = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_gdn"))
        .args(args)
        .current_dir(cwd)
        .env("GOONDAN_STATE_ROOT", state.path())
        .env_remove("NO_COLOR")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn code(output: &Output) -> i32 {
    output.status.code().unwrap()
}

/// Runs `command` (stdin closed) with its stdout and stderr in files under
/// `dir`, so a chatty child never blocks on a full pipe, and kills it if
/// it outlives `deadline`; `what` names it in the panic.
fn run_to_files(mut command: Command, dir: &Path, deadline: Duration, what: &str) -> Output {
    let stdout_path = dir.join("stdout.txt");
    let stderr_path = dir.join("stderr.txt");
    command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap());
    let mut child = command.spawn().unwrap();
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} did not finish within {deadline:?}; stderr: {}",
                std::fs::read_to_string(&stderr_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: std::fs::read(&stdout_path).unwrap(),
        stderr: std::fs::read(&stderr_path).unwrap(),
    }
}

/// A server on 127.0.0.1 that accepts every connection and never reads
/// from or answers it (a peer that hangs): its address, and the
/// connections it holds so far.
fn silent_server() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let held: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>> = Default::default();
    let held_by_thread = held.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            held_by_thread.lock().unwrap().push(stream);
        }
    });
    (address, held)
}

/// Every file under `dir`, recursively (folders themselves are left out).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

const MODEL_AND_SWARM: &str = "\
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: claude-sonnet
spec:
  provider: anthropic
  model: claude-sonnet-4-5
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/planner
  agents:
    - ref: Agent/planner
---
";

/// A bundle whose agent names a model that does not exist.
fn broken_bundle() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{MODEL_AND_SWARM}apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: planner\nspec:\n  modelConfig:\n    modelRef: Model/claude\n"
    );
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    dir
}

/// A valid bundle with one warning (a prompt nothing injects).
fn warning_bundle() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{MODEL_AND_SWARM}apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: planner\nspec:\n  modelConfig:\n    modelRef: Model/claude-sonnet\n  prompt:\n    system: Plan.\n"
    );
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    dir
}

#[test]
fn examples_are_valid_and_exit_zero() {
    for example in [
        "examples/single-agent",
        "examples/two-agents",
        "examples/webhook",
        "examples/plugins",
        "examples/mcp",
    ] {
        let state = tempfile::tempdir().unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_gdn"))
            .args(["validate", example])
            .current_dir(workspace_root())
            .env("GOONDAN_STATE_ROOT", state.path())
            .env("WEBHOOK_SECRET", "the-secret-the-readme-exports")
            .env("TELEGRAM_BOT_TOKEN", "123:the-token-botfather-gave")
            .env("ANTHROPIC_API_KEY", "sk-ant-the-readme-key")
            .output()
            .unwrap();
        assert_eq!(code(&output), 0, "{example}: {}", stdout(&output));
        assert_eq!(stdout(&output), "Errors: 0, Warnings: 0\n");
    }
}

#[test]
fn a_missing_reference_shows_its_source_line_with_a_caret_and_exits_4() {
    let bundle = broken_bundle();
    let output = gdn(bundle.path(), &["validate"]);
    assert_eq!(code(&output), 4);
    assert_eq!(
        stdout(&output),
        "error[E_CONFIG_REF_NOT_FOUND]: Agent/planner refers to Model/claude, which is not defined
  --> goondan.yaml:24:15
   |
24 |     modelRef: Model/claude
   |               ^^^^^^^^^^^^ document 3
   |
   = field: spec.modelConfig.modelRef
   = help: did you mean Model/claude-sonnet (goondan.yaml:1)?

Errors: 1, Warnings: 0
"
    );
    assert!(
        !stdout(&output).contains('\x1b'),
        "no color when not a terminal"
    );
}

#[test]
fn a_misspelt_kind_is_one_error_not_one_per_reference() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{MODEL_AND_SWARM}apiVersion: goondan.ai/v1\nkind: Agnt\nmetadata:\n  name: planner\nspec:\n  modelConfig:\n    modelRef: Model/claude-sonnet\n"
    );
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let output = gdn(dir.path(), &["validate"]);
    assert_eq!(code(&output), 4);
    let said = stdout(&output);
    assert!(
        said.starts_with("error[E_CONFIG_UNKNOWN_KIND]: `Agnt` is not a resource kind\n  --> goondan.yaml:19:7\n"),
        "{said}"
    );
    assert!(said.contains("19 | kind: Agnt\n   |       ^^^^"), "{said}");
    assert!(said.ends_with("Errors: 1, Warnings: 0\n"), "{said}");
}

/// Issue 49 #5: `tools` written one level too deep, inside `modelConfig`,
/// is only mis-indented; `remove it` would lose the Agent's tools.
#[test]
fn a_mis_indented_field_is_to_be_moved_not_removed() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{MODEL_AND_SWARM}apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: planner\nspec:\n  modelConfig:\n    modelRef: Model/claude-sonnet\n    tools:\n      - ref: Tool/bash\n"
    );
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let output = gdn(dir.path(), &["validate"]);
    assert_eq!(code(&output), 4);
    let said = stdout(&output);
    assert!(
        said.starts_with("error[E_CONFIG_SCHEMA]: unknown field `tools` in spec.modelConfig\n"),
        "{said}"
    );
    assert!(
        said.contains("   = help: `tools` is a field of spec, not a field of spec.modelConfig: indent it less, into spec\n"),
        "{said}"
    );
    assert!(!said.contains("remove it"), "{said}");
}

#[test]
fn a_script_entry_syntax_error_is_reported_at_its_line_by_validate_and_run() {
    let bundle = workspace_root().join("crates/goondan-config/tests/fixtures/invalid/entry-syntax");
    let caret =
        "2 |   run: async (ctx, input: { x: string } => input.x,\n  |                         ^\n";
    let output = gdn(&bundle, &["validate"]);
    assert_eq!(code(&output), 4);
    let said = stdout(&output);
    assert!(
        said.starts_with("error[E_CONFIG_ENTRY_SYNTAX]: the entry of Tool/t does not parse: Expected `,` or `)` but found `:`\n --> tools/t.ts:2:25\n"),
        "{said}"
    );
    assert!(said.contains(caret), "{said}");
    // A swarm's start-up loads through the same loader: the same report,
    // and nothing is started.
    let output = gdn(&bundle, &["run", "--input", "hi"]);
    assert_eq!(code(&output), 4);
    let said = swarm::stderr(&output);
    assert!(said.contains(" --> tools/t.ts:2:25\n"), "{said}");
    assert!(said.contains(caret), "{said}");
    assert!(!said.contains("Command failed"), "{said}");
}

#[test]
fn help_names_no_hidden_mode_and_run_help_groups_its_own_flags() {
    let here = tempfile::tempdir().unwrap();
    let help = stdout(&gdn(here.path(), &["--help"]));
    assert!(!help.contains("hidden"), "{help}");
    for mode in ["agent", "connector", "strip-types"] {
        assert!(
            !help
                .lines()
                .any(|line| line.trim_start().starts_with(&format!("{mode} "))),
            "`{mode}` listed in:\n{help}"
        );
    }
    let run_help = stdout(&gdn(here.path(), &["run", "--help"]));
    let run_options = run_help.find("Run options:").expect(&run_help);
    let global_options = run_help.find("Global options:").expect(&run_help);
    let section = |flag: &str| run_help.find(flag).expect(flag);
    assert!(
        section("--input <INPUT>") > run_options && section("--input <INPUT>") < global_options
    );
    assert!(
        section("--state-root <PATH>") > global_options,
        "{run_help}"
    );
}

#[test]
fn a_folder_without_goondan_yaml_says_so_and_loads_no_nested_project() {
    let folder = tempfile::tempdir().unwrap();
    for project in ["a", "b"] {
        std::fs::create_dir(folder.path().join(project)).unwrap();
        std::fs::write(
            folder.path().join(project).join("goondan.yaml"),
            "kind: Agnt\n",
        )
        .unwrap();
    }
    let output = gdn(folder.path(), &["validate"]);
    assert_eq!(code(&output), 3, "{}", stdout(&output));
    let said = format!("{}{}", stdout(&output), swarm::stderr(&output));
    assert!(
        said.contains("no goondan.yaml and no recognized resource file; projects below it: a, b"),
        "{said}"
    );
    assert!(said.contains("--config a"), "{said}");
    assert!(!said.contains("E_CONFIG_UNKNOWN_KIND"), "{said}");
}

#[test]
fn validate_fix_sets_the_api_version_and_leaves_the_rest_of_the_text_alone() {
    let bundle = tempfile::tempdir().unwrap();
    let original = "# models first\nkind: Model\nmetadata:\n  name: m # the only one\nspec:\n  provider: openai\n  model: gpt-4o\n---\napiVersion: goondan.ai/v1alpha1 # old\nkind: Agent\nmetadata:\n  name: a\nspec:\n  modelConfig:\n    modelRef: \"Model/m\"\n---\nkind: Agnet\nmetadata:\n  name: typo\n";
    std::fs::write(bundle.path().join("goondan.yaml"), original).unwrap();

    // Without --fix nothing is written.
    let output = gdn(bundle.path(), &["validate"]);
    assert_eq!(code(&output), 4);
    let text = std::fs::read_to_string(bundle.path().join("goondan.yaml")).unwrap();
    assert_eq!(text, original);

    let output = gdn(bundle.path(), &["validate", "--fix"]);
    assert_eq!(
        swarm::stderr(&output),
        "fixed goondan.yaml:2: added `apiVersion: goondan.ai/v1`\nfixed goondan.yaml:9: set `apiVersion: goondan.ai/v1`\n"
    );
    // The kind typo has no single right fix: it is still reported.
    assert_eq!(code(&output), 4, "{}", stdout(&output));
    assert!(
        stdout(&output).contains("E_CONFIG_UNKNOWN_KIND"),
        "{}",
        stdout(&output)
    );
    assert!(
        !stdout(&output).contains("E_CONFIG_API_VERSION"),
        "{}",
        stdout(&output)
    );
    let text = std::fs::read_to_string(bundle.path().join("goondan.yaml")).unwrap();
    assert_eq!(
        text,
        original
            .replacen("kind: Model", "apiVersion: goondan.ai/v1\nkind: Model", 1)
            .replace("goondan.ai/v1alpha1 # old", "goondan.ai/v1 # old")
    );
    // Nothing left behind, and a second run has nothing to fix.
    let names: Vec<String> = std::fs::read_dir(bundle.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["goondan.yaml"]);
    let again = gdn(bundle.path(), &["validate", "--fix"]);
    assert_eq!(swarm::stderr(&again), "");
}

#[test]
fn json_format_lists_errors_and_warnings() {
    let bundle = broken_bundle();
    let output = gdn(bundle.path(), &["validate", ".", "--format", "json"]);
    assert_eq!(code(&output), 4);
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["errors"][0]["code"], "E_CONFIG_REF_NOT_FOUND");
    assert_eq!(
        report["errors"][0]["path"],
        "goondan.yaml#spec.modelConfig.modelRef"
    );
    assert_eq!(report["errors"][0]["resource"], "Agent/planner");
    assert_eq!(report["warnings"], serde_json::json!([]));
}

#[test]
fn github_format_prints_workflow_annotations() {
    let bundle = broken_bundle();
    let parent = bundle.path().parent().unwrap();
    let name = bundle.path().file_name().unwrap().to_str().unwrap();
    let output = gdn(parent, &["validate", name, "--format", "github"]);
    assert_eq!(code(&output), 4);
    let text = stdout(&output);
    assert!(
        text.starts_with(&format!(
            "::error file={name}/goondan.yaml,line=24,col=15,title=E_CONFIG_REF_NOT_FOUND::Agent/planner refers to Model/claude"
        )),
        "{text}"
    );
}

#[test]
fn global_flags_work_before_and_after_the_subcommand() {
    let bundle = broken_bundle();
    let path = bundle.path().to_str().unwrap();
    let root = workspace_root();
    for args in [
        vec!["--json", "validate", path],
        vec!["validate", path, "--json"],
        vec!["--config", path, "--no-color", "validate", "--json"],
        vec![
            "validate",
            "--json",
            "-c",
            path,
            "--state-root",
            "/tmp/unused",
        ],
    ] {
        let output = gdn(&root, &args);
        assert_eq!(code(&output), 4, "{args:?}");
        let report: serde_json::Value =
            serde_json::from_str(&stdout(&output)).expect("json output");
        assert_eq!(report["valid"], false, "{args:?}");
    }
}

#[test]
fn strict_turns_warnings_into_errors_and_quiet_hides_them() {
    let bundle = warning_bundle();
    let relaxed = gdn(bundle.path(), &["validate"]);
    assert_eq!(code(&relaxed), 0);
    assert!(stdout(&relaxed).contains("warning[W_CONFIG_PROMPT_UNUSED]"));
    assert!(stdout(&relaxed).ends_with("Errors: 0, Warnings: 1\n"));
    let strict = gdn(bundle.path(), &["validate", "--strict"]);
    assert_eq!(code(&strict), 4);
    assert!(stdout(&strict).contains("error[W_CONFIG_PROMPT_UNUSED]"));
    let quiet = gdn(bundle.path(), &["-q", "validate"]);
    assert_eq!((code(&quiet), stdout(&quiet)), (0, String::new()));
    let verbose = gdn(bundle.path(), &["validate", "-v"]);
    assert!(stdout(&verbose).starts_with("Validating .\nLoaded 1 model(s), 1 agent(s)"));
}

#[test]
fn exit_codes_follow_the_spec_table() {
    let root = workspace_root();
    let bad_flag = gdn(&root, &["validate", "--frobnicate"]);
    assert_eq!(code(&bad_flag), 2);
    assert!(String::from_utf8_lossy(&bad_flag.stderr).contains("--frobnicate"));
    assert_eq!(code(&gdn(&root, &["validate", "--format", "yaml"])), 2);
    assert_eq!(code(&gdn(&root, &["-v", "-q", "validate"])), 2);
    assert_eq!(code(&gdn(&root, &["frobnicate"])), 2);

    let missing = gdn(&root, &["validate", "no/such/bundle"]);
    assert_eq!(code(&missing), 3);
    assert!(
        stdout(&missing).starts_with("error[E_CONFIG_FILE_NOT_FOUND]: no bundle at no/such/bundle")
    );
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(code(&gdn(empty.path(), &["validate"])), 3);
    // An empty file is read, and found to hold nothing: a validation error.
    let empty_file = gdn(&root, &["validate", "/dev/null"]);
    assert_eq!(code(&empty_file), 4);
    assert!(stdout(&empty_file).starts_with("error[E_CONFIG_BUNDLE_EMPTY]: no resource in null"));
    let env_file = gdn(
        &root,
        &[
            "validate",
            "examples/two-agents",
            "--env-file",
            "missing.env",
        ],
    );
    assert_eq!(code(&env_file), 3);

    for args in [["--help"], ["--version"]] {
        let output = gdn(&root, &args);
        assert_eq!(code(&output), 0, "{args:?}");
        assert!(!output.stdout.is_empty());
    }
}

#[test]
fn env_file_feeds_the_missing_variable_check() {
    let dir = tempfile::tempdir().unwrap();
    let text = MODEL_AND_SWARM.replace(
        "  model: claude-sonnet-4-5\n",
        "  model: claude-sonnet-4-5\n  apiKey:\n    valueFrom:\n      env: GDN_CLI_TEST_KEY_7F3A\n",
    ) + "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: planner\nspec:\n  modelConfig:\n    modelRef: Model/claude-sonnet\n";
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let without = gdn(dir.path(), &["validate", "--strict"]);
    assert_eq!(code(&without), 4, "{}", stdout(&without));
    assert!(stdout(&without).contains("W_CONFIG_ENV_MISSING"));
    std::fs::write(
        dir.path().join("keys.env"),
        "GDN_CLI_TEST_KEY_7F3A=sk-test\n",
    )
    .unwrap();
    let with = gdn(
        dir.path(),
        &["validate", "--strict", "--env-file", "keys.env"],
    );
    assert_eq!(code(&with), 0, "{}", stdout(&with));
}

/// The README's main command: the two-agent example answers offline, and
/// the entry agent's text streams to the terminal step by step (its first
/// step's text is not part of the final answer, so only streaming can put
/// it on the first line).
#[test]
fn readme_main_command_streams_each_step_then_answers() {
    let root = workspace_root();
    let output = gdn(
        &root,
        &[
            "--config",
            "examples/two-agents",
            "run",
            "--input",
            "What is Goondan?",
        ],
    );
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], "I will ask the researcher.");
    assert!(
        lines[1].starts_with("The researcher says: Notes:"),
        "{text}"
    );
}

/// `examples/mcp`: the agent's tool is an MCP server's (a Python glossary
/// over stdio, through the `mcp` extension); an unknown term is the tool's
/// coded error, not a failed turn.
#[test]
fn the_mcp_example_answers_through_its_server() {
    let root = workspace_root();
    let output = gdn(
        &root,
        &["--config", "examples/mcp", "run", "--input", "define turn"],
    );
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout(&output).starts_with("turn: One input handled by an agent"),
        "{}",
        stdout(&output)
    );
    let output = gdn(
        &root,
        &["--config", "examples/mcp", "run", "--input", "define zebra"],
    );
    assert_eq!(
        code(&output),
        0,
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout(&output).contains("E_MCP_CALL"),
        "{}",
        stdout(&output)
    );
}
