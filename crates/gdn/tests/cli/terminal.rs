//! What a person sees at a terminal and what a machine reads from a pipe
//! (issue 38): no JSON log line on a terminal, a Turn's activity (spinner,
//! tool and delegation lines) there and nowhere else, `--json` from every
//! command, Swarms shown by the names people chose, `gdn doctor` and
//! `gdn usage` telling what matters. Terminals are real pseudo-terminals.

use crate::stdin::Terminal;
use crate::swarm::{code, gdn_command, run_with_deadline, stderr, stdout, Swarm};
use serde_json::Value;

/// The `pair` fixture as the Package `term-demo`.
fn named_swarm() -> Swarm {
    let swarm = Swarm::pair(5, crate::ledger::relay_or_answer);
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let package = "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: term-demo\nspec:\n  version: \"0.1.0\"\n---\n";
    std::fs::write(&path, format!("{package}{text}")).unwrap();
    swarm
}

/// The lines of a terminal's screen, without carriage returns.
fn lines(screen: &str) -> Vec<String> {
    screen
        .split('\n')
        .map(|line| line.replace('\r', ""))
        .collect()
}

/// No line a terminal showed is a JSON object (a log line).
fn assert_no_json_line(screen: &str) {
    for line in lines(screen) {
        let shown = line.rsplit("\x1b[K").next().unwrap_or(&line).trim_start();
        assert!(
            !shown.starts_with('{'),
            "a JSON line reached the terminal: {line:?}\n{screen}"
        );
    }
}

#[test]
fn a_terminal_shows_the_turns_activity_and_no_json_line() {
    let swarm = named_swarm();
    let terminal = Terminal::start(&swarm, &["run", "--input", "relay ping"]);
    let (output, screen) = terminal.finish("gdn run --input on a terminal");
    assert_eq!(code(&output), 0, "{screen}");
    assert!(screen.contains("alpha heard: "), "{screen}");
    // The activity comes before the answer it led to.
    let answered = screen.find("alpha heard: ").unwrap();
    assert!(
        screen.find("→ beta").is_some_and(|at| at < answered),
        "{screen}"
    );
    assert!(screen.contains("thinking"), "a spinner: {screen}");
    assert!(
        screen.contains("→ agents__request beta"),
        "a line for the tool call: {screen}"
    );
    assert!(
        screen.contains("→ beta"),
        "a line for the delegation: {screen}"
    );
    assert!(screen.contains('✓'), "the call's end: {screen}");
    assert_no_json_line(&screen);
}

#[test]
fn a_pipe_gets_the_answer_and_nothing_of_the_activity() {
    let swarm = named_swarm();
    let output = swarm.run(&["run", "--input", "relay ping"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let answer = stdout(&output);
    assert!(answer.starts_with("alpha heard: "), "{answer}");
    assert!(answer.contains("pong(relay ping)"), "{answer}");
    let error = stderr(&output);
    for activity in ["thinking", "→", "✓", "\x1b["] {
        assert!(!error.contains(activity), "{activity:?} on a pipe: {error}");
    }
}

#[test]
fn a_missing_key_is_one_readable_error_on_a_terminal_and_json_in_the_log_file() {
    let bundle = crate::swarm::fixture("no-key", &[]);
    let state = tempfile::tempdir().unwrap();
    let command = gdn_command(bundle.path(), state.path(), &["run", "--input", "hi"]);
    let (output, screen) = Terminal::start_command(command).finish("a run without its key");
    assert_ne!(code(&output), 0, "{screen}");
    assert_eq!(
        screen.matches("E_MODEL_API_KEY_MISSING").count(),
        1,
        "one line for one problem: {screen}"
    );
    assert!(
        screen.contains("error[E_MODEL_API_KEY_MISSING]"),
        "{screen}"
    );
    assert_no_json_line(&screen);
    // The structured line went to the orchestrator's log file instead.
    let logs = state.path().join("runtime/logs");
    let logged: String = std::fs::read_dir(&logs)
        .unwrap()
        .map(|dir| dir.unwrap().path().join("orchestrator.stderr.log"))
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .collect();
    let line = logged
        .lines()
        .find(|line| line.contains("E_MODEL_API_KEY_MISSING"))
        .unwrap_or_else(|| panic!("no log line in {}: {logged}", logs.display()));
    let line: Value = serde_json::from_str(line).unwrap();
    assert_eq!(line["level"], "ERROR", "{line}");
}

#[test]
fn json_is_honored_by_every_command() {
    let swarm = named_swarm();
    let first = swarm.run(&["run", "--input", "relay ping"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    // (arguments, whether the command succeeds)
    let commands: &[(&[&str], bool)] = &[
        (&["--json", "run", "--input", "hello"], true),
        (&["--json", "validate"], true),
        (&["--json", "doctor"], true),
        (&["--json", "usage"], true),
        (&["--json", "instance", "list"], true),
        (&["--json", "instance", "history", "alpha:default"], true),
        (&["--json", "logs", "-l", "5"], true),
        (&["--json", "approvals"], true),
        (&["--json", "stop"], false),
        (&["--json", "instance", "restart", "alpha:default"], false),
        (
            &["--json", "instance", "restart", "alpha:default", "--fresh"],
            true,
        ),
        (
            &["--json", "instance", "delete", "beta:default", "--force"],
            true,
        ),
        (
            &["--json", "instance", "delete", "nobody", "--force"],
            false,
        ),
    ];
    for (args, succeeds) in commands {
        let output = swarm.run(args);
        let (out, error) = (stdout(&output), stderr(&output));
        assert_eq!(code(&output) == 0, *succeeds, "{args:?}: {out}{error}");
        let parses = |text: &str| {
            serde_json::from_str::<Value>(text).is_ok()
                || text
                    .lines()
                    .all(|line| serde_json::from_str::<Value>(line).is_ok())
        };
        assert!(parses(&out), "{args:?} printed more than JSON: {out}");
        assert!(
            !out.trim().is_empty() || !error.trim().is_empty(),
            "{args:?} said nothing"
        );
        assert!(parses(&error), "{args:?}: stderr is not JSON: {error}");
    }
    let answer: Value =
        serde_json::from_str(stdout(&swarm.run(&["--json", "run", "--input", "hi"])).trim())
            .unwrap();
    assert_eq!(answer["text"], "alpha says: hi", "{answer}");
    let refused = stderr(&swarm.run(&["--json", "stop"]));
    let refused: Value = serde_json::from_str(refused.trim()).unwrap();
    assert_eq!(refused["error"]["code"], "E_ORCHESTRATOR_NOT_RUNNING");
}

#[test]
fn swarms_are_shown_by_the_names_people_chose() {
    let swarm = named_swarm();
    let first = swarm.run(&["run", "--input", "relay ping"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let rows: Value = serde_json::from_str(&stdout(&swarm.run(&["--json", "usage"]))).unwrap();
    let workspace = rows[0]["workspace"].as_str().unwrap().to_string();
    assert_eq!(rows[0]["package"], "term-demo", "{rows}");
    assert_eq!(rows[0]["swarmName"], "default", "{rows}");
    for args in [&["usage"][..], &["instance", "list"][..]] {
        let text = stdout(&swarm.run(args));
        assert!(text.contains("term-demo/default"), "{args:?}: {text}");
        assert!(!text.contains(&workspace), "{args:?}: {text}");
    }
    let (output, screen) = Terminal::start(&swarm, &["logs", "-l", "40"]).finish("gdn logs");
    assert_eq!(code(&output), 0, "{screen}");
    assert!(screen.contains("Swarm term-demo/default"), "{screen}");
    assert!(screen.contains("tool.completed"), "{screen}");
    assert!(screen.contains("agents__request"), "{screen}");
    assert!(screen.contains("beta:"), "{screen}");
    assert_no_json_line(&screen);
}

#[test]
fn outside_a_project_instance_list_says_what_it_shows() {
    let swarm = named_swarm();
    let first = swarm.run(&["run", "--input", "hi"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let elsewhere = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .arg("--state-root")
        .arg(swarm.state.path())
        .args(["instance", "list"])
        .current_dir(elsewhere.path());
    let output = run_with_deadline(command);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let error = stderr(&output);
    assert!(error.contains("no bundle (goondan.yaml)"), "{error}");
    assert!(error.contains("--config"), "{error}");
    assert!(
        stdout(&output).contains("term-demo/default"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn doctor_warns_only_about_keys_the_bundles_models_use() {
    let swarm = named_swarm();
    let check = |output: &std::process::Output, name: &str| -> String {
        let report: Value = serde_json::from_str(&stdout(output)).unwrap();
        let check = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|check| check["name"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {report}"))
            .clone();
        check["status"].as_str().unwrap().to_string()
    };
    let mut command = swarm.command(&["--json", "doctor"]);
    command.env_remove("OPENAI_API_KEY");
    let output = run_with_deadline(command);
    // The pair's Model is `provider: openai`.
    assert_eq!(check(&output, "OPENAI_API_KEY"), "warn");
    assert_eq!(check(&output, "ANTHROPIC_API_KEY"), "pass");
    assert_eq!(check(&output, "GOOGLE_GENERATIVE_AI_API_KEY"), "pass");
    let output = swarm.run(&["--json", "doctor"]);
    assert_eq!(check(&output, "OPENAI_API_KEY"), "pass");
}

#[test]
fn usage_counts_scripted_runs_at_zero_cost() {
    let bundle = tempfile::tempdir().unwrap();
    let example = crate::workspace_root().join("examples/single-agent");
    for file in ["goondan.yaml", "scripted-rules.yaml"] {
        std::fs::copy(example.join(file), bundle.path().join(file)).unwrap();
    }
    let state = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| run_with_deadline(gdn_command(bundle.path(), state.path(), args));
    let output = run(&["run", "--input", "shout hello"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let rows: Value = serde_json::from_str(&stdout(&run(&["--json", "usage"]))).unwrap();
    assert_eq!(
        rows[0]["modelCalls"], 2,
        "a tool call and the answer: {rows}"
    );
    assert_eq!(rows[0]["inputTokens"], 0, "{rows}");
    assert_eq!(rows[0]["costUsd"], 0.0, "{rows}");
    let table = stdout(&run(&["usage"]));
    assert!(!table.contains("no model calls"), "{table}");
    assert!(table.contains("single-agent/default"), "{table}");
}

#[test]
fn a_chat_shows_activity_without_color_under_no_color_and_ends_on_a_new_line() {
    let swarm = named_swarm();
    let mut command = swarm.command(&["run"]);
    command.env("NO_COLOR", "1");
    let mut terminal = Terminal::start_command(command);
    terminal.shows("type a message");
    terminal.types(b"relay chat\n");
    terminal.shows("alpha heard: ");
    terminal.shows("> ");
    // Ctrl-D at the start of a line ends the chat.
    terminal.types(&[4]);
    let (output, screen) = terminal.finish("a chat on a terminal");
    assert_eq!(code(&output), 0, "{screen}");
    assert!(screen.contains("→ agents__request beta"), "{screen}");
    assert!(!screen.contains("\x1b[2m"), "NO_COLOR: {screen:?}");
    let last_prompt = screen.rfind("> ").unwrap();
    assert!(
        screen[last_prompt + 2..].contains('\n'),
        "what follows the chat starts on a new line: {:?}",
        &screen[last_prompt..]
    );
    assert_no_json_line(&screen);
}

#[test]
fn package_install_shows_progress_on_a_terminal_and_not_on_a_pipe() {
    let registry = crate::packages::Registry::start();
    let publisher = tempfile::tempdir().unwrap();
    crate::packages::publish_library(&registry, publisher.path());
    let app = tempfile::tempdir().unwrap();
    std::fs::write(
        app.path().join("goondan.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: app\nspec:\n  version: \"0.1.0\"\n  dependencies:\n    - name: \"@acme/calc\"\n      version: \"^1.0.0\"\n",
    )
    .unwrap();
    let install = |state: &std::path::Path| {
        let mut command = gdn_command(
            app.path(),
            state,
            &["package", "install", "--registry", &registry.url],
        );
        command.env("GOONDAN_REGISTRY_TOKEN", crate::packages::TOKEN);
        command
    };
    let state = tempfile::tempdir().unwrap();
    let (output, screen) =
        Terminal::start_command(install(state.path())).finish("package install on a terminal");
    assert_eq!(code(&output), 0, "{screen}");
    assert!(screen.contains("installing packages"), "{screen}");
    assert!(screen.contains("installed @acme/calc@1.0.0"), "{screen}");
    // The spinner was erased (the line cleared) before the result was
    // written: what the line shows last is the result alone.
    let result = lines(&screen)
        .into_iter()
        .find(|line| line.contains("installed @acme/calc"))
        .unwrap();
    let shown = result.rsplit("\x1b[K").next().unwrap();
    assert!(shown.starts_with("installed @acme/calc"), "{result:?}");

    let piped = tempfile::tempdir().unwrap();
    let output = run_with_deadline(install(piped.path()));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("installed @acme/calc@1.0.0"));
    assert!(
        !stderr(&output).contains("installing packages"),
        "{}",
        stderr(&output)
    );
}

/// Issue 50 #4: `gdn logs -f` started before the swarm made any instance
/// shows the events of the instances made after it began (the entry
/// agent's and the one it delegates to), as they happen.
#[test]
fn logs_follow_started_before_any_instance_shows_the_instances_made_after_it() {
    let swarm = Swarm::pair(5, crate::ledger::relay_or_answer);
    assert!(crate::swarm::find_instance(swarm.state.path(), "alpha", "default").is_none());
    let mut follow = Terminal::start_controlling(gdn_command(
        swarm.bundle.path(),
        swarm.state.path(),
        &["logs", "-f"],
    ));
    // The header comes once the history (none) is read: from then on the
    // logs are followed.
    follow.shows("AGENT:INSTANCE");
    let answered = swarm.run(&["run", "--input", "relay ping"]);
    assert_eq!(code(&answered), 0, "{}", stderr(&answered));
    for (agent, kind) in [
        ("alpha:default", "tool.called"),
        ("beta:default", "turn.started"),
        ("beta:default", "turn.completed"),
        ("alpha:default", "turn.completed"),
    ] {
        crate::swarm::wait_until(&format!("{agent} {kind} under gdn logs -f"), || {
            lines(&follow.shown())
                .iter()
                .any(|line| line.contains(agent) && line.contains(kind))
                .then_some(())
        });
    }
    follow.types(b"\x03");
    let (_, screen) = follow.finish("gdn logs -f after Ctrl-C");
    // Each event once.
    let completed = lines(&screen)
        .iter()
        .filter(|line| line.contains("turn.completed"))
        .count();
    assert_eq!(completed, 2, "{screen}");
    assert_no_json_line(&screen);
}
