//! Issue 47 #3, the smaller hostile findings at the CLI's edges, each
//! against the real `gdn`: a state root beside the project named through
//! `..`, instance keys that would forge what people read, a reader that
//! closes stdout, and a client whose orchestrator goes away mid-request.

use crate::mock_llm::{ChatRequest, Reply};
use crate::swarm::{code, gdn_command, run_with_deadline, stderr, stdout, wait_until, Swarm};
use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixListener;
use std::process::Stdio;

fn echo(request: &ChatRequest) -> Reply {
    Reply::text(format!("heard: {}", request.last_user_text()))
}

#[test]
fn issue_47_a_state_root_beside_the_project_through_dotdot_runs_and_one_inside_is_refused_at_start()
{
    let swarm = Swarm::pair(1, echo);
    let bundle = swarm.bundle.path();
    let beside = tempfile::tempdir().unwrap();
    // Relative to the project, as a person types it next to it.
    let relative = format!(
        "../{}",
        beside.path().file_name().unwrap().to_string_lossy()
    );
    let command = gdn_command(bundle, beside.path(), &["run", "--input", "hello"]);
    // `gdn_command` passed the absolute path; a person passes it relative.
    let args: Vec<std::ffi::OsString> = command
        .get_args()
        .map(|arg| {
            if arg == beside.path().as_os_str() {
                relative.clone().into()
            } else {
                arg.to_os_string()
            }
        })
        .collect();
    let mut command = std::process::Command::new(command.get_program());
    command
        .args(args)
        .current_dir(bundle)
        .env("OPENAI_API_KEY", crate::swarm::API_KEY)
        .env_remove("GOONDAN_STATE_ROOT")
        .env_remove("OPENAI_BASE_URL");
    let output = run_with_deadline(command);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("heard: hello"),
        "{}",
        stdout(&output)
    );

    // `..` that leads back into the project is inside it: refused before
    // anything starts, not by every agent as it starts.
    let back_inside = bundle
        .join("..")
        .join(bundle.file_name().unwrap())
        .join("state");
    let mut command = gdn_command(bundle, &back_inside, &["run", "--detach"]);
    command.current_dir(bundle);
    let output = run_with_deadline(command);
    assert_ne!(code(&output), 0, "{}", stdout(&output));
    assert!(
        stderr(&output).contains("E_STORE_STATE_ROOT_IN_PROJECT"),
        "{}",
        stderr(&output)
    );
    assert!(!stdout(&output).contains("started orchestrator"));
}

#[test]
fn issue_47_instance_keys_with_control_or_bidi_characters_are_refused_at_every_door() {
    let swarm = Swarm::pair(1, echo);
    let resident = swarm.start_resident();
    for key in [
        "evil\u{202E}live",
        "two\nlines",
        "\u{1b}[31mred",
        "iso\u{2066}x",
    ] {
        let output = swarm.run(&["run", "--input", "hi", "--instance-key", key]);
        assert_ne!(code(&output), 0, "{key:?} was taken");
        assert!(
            stderr(&output).contains("E_INSTANCE_KEY_INVALID"),
            "{key:?}: {}",
            stderr(&output)
        );
    }
    // The control socket's own door (what the Studio and `gdn serve` use).
    let socket = control_socket(&swarm);
    let deliver = serde_json::json!({
        "op": "deliver",
        "key": "alpha:evil\u{202E}live",
        "event": {"name": "message", "message": {"type": "text", "text": "hi"}, "properties": {}},
        "source": "studio",
    });
    let answer = exchange(&socket, &deliver);
    assert_eq!(answer["code"], "E_INSTANCE_KEY_INVALID", "{answer}");
    // A fork's new key too.
    let first = swarm.run(&["run", "--input", "hi"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let fork = swarm.run(&[
        "instance",
        "fork",
        "alpha:default",
        "--at",
        "1",
        "--as",
        "a\u{202E}b",
    ]);
    assert_ne!(code(&fork), 0);
    assert!(
        stderr(&fork).contains("E_INSTANCE_KEY_INVALID"),
        "{}",
        stderr(&fork)
    );
    let listed = swarm.run(&["instance", "list", "--json"]);
    let text = stdout(&listed);
    assert!(
        !text.contains('\u{202E}') && !text.contains("\\u202e"),
        "{text}"
    );
    drop(resident);
}

#[test]
fn issue_47_a_closed_stdout_ends_a_command_quietly() {
    let swarm = Swarm::pair(1, echo);
    for args in [
        &["validate"][..],
        &["instance", "list"][..],
        &["approvals"][..],
        &["--help"][..],
    ] {
        let mut child = swarm
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before the first line.
        drop(child.stdout.take());
        let output = crate::swarm::finish(child, "a command whose reader left");
        assert!(
            !stderr(&output).contains("panicked"),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            output.status.code().is_some(),
            "{args:?} was killed by a signal"
        );
    }
}

#[test]
fn issue_47_a_client_whose_orchestrator_went_away_mid_request_gets_a_coded_error() {
    let swarm = Swarm::pair(1, echo);
    let resident = swarm.start_resident();
    let first = swarm.run(&["run", "--input", "hi"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let socket = control_socket(&swarm);
    crate::swarm::sigkill(resident.pid());
    drop(resident);
    // An orchestrator that takes every request and dies before answering.
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut line = String::new();
            let _ = BufReader::new(&stream).read_line(&mut line);
            drop(stream);
        }
    });
    for args in [
        &["instance", "cancel", "alpha:default"][..],
        &["instance", "list"][..],
        &["instance", "rewind", "alpha:default", "--to", "1"][..],
        &["restart"][..],
        &["stop"][..],
    ] {
        let output = swarm.run(args);
        assert_ne!(code(&output), 0, "{args:?}");
        assert!(
            stderr(&output).contains("E_ORCHESTRATOR_STOPPED"),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            !stderr(&output).contains("end of file"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

fn control_socket(swarm: &Swarm) -> std::path::PathBuf {
    let sockets = swarm.state.path().join("runtime/sockets");
    wait_until("the control socket", || {
        std::fs::read_dir(&sockets)
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| path.extension().is_some_and(|ext| ext == "sock"))
    })
}

/// One request line to the control socket and its answer (the body of a
/// `failed` answer).
fn exchange(socket: &std::path::Path, request: &serde_json::Value) -> serde_json::Value {
    use std::io::Write;
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    writeln!(stream, "{request}").unwrap();
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap()
}

/// Issue 49 #5: with `--json`, a failing command's error is one JSON line
/// on stderr with a `code`, and nothing else is said: no `nothing was
/// started` after it, no report on stdout, no clap text for a bad flag.
#[test]
fn issue_49_with_json_every_failing_command_says_one_json_line_on_stderr() {
    let project = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let made = run_with_deadline(gdn_command(
        project.path(),
        state.path(),
        &["init", ".", "--no-git"],
    ));
    assert_eq!(code(&made), 0, "{}", stderr(&made));
    let broken = tempfile::tempdir().unwrap();
    std::fs::write(
        broken.path().join("goondan.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: a\nspec:\n  modelConfig:\n    modelRef: Model/nope\n",
    )
    .unwrap();
    let cases: [(&std::path::Path, &[&str], i32, &str); 6] = [
        (
            project.path(),
            &["init", ".", "--no-git", "--json"],
            3,
            "E_INIT_FILES_EXIST",
        ),
        (
            project.path(),
            &["init", "--json", "--bogus"],
            2,
            "E_CLI_ARGS",
        ),
        (
            broken.path(),
            &["run", "--json", "--input", "hi"],
            4,
            "E_CONFIG_REF_NOT_FOUND",
        ),
        (
            broken.path(),
            &["run", "--json", "--nonsense"],
            2,
            "E_CLI_ARGS",
        ),
        (
            project.path(),
            &["approve", "apv_0000000000000000", "--json"],
            1,
            "E_APPROVAL_NOT_FOUND",
        ),
        (
            project.path(),
            &["instance", "cancel", "nobody", "--json"],
            1,
            "E_NO_TURN_RUNNING",
        ),
    ];
    for (bundle, args, exit, expected) in cases {
        let output = run_with_deadline(gdn_command(bundle, state.path(), args));
        let (out, err) = (stdout(&output), stderr(&output));
        assert_eq!(code(&output), exit, "{args:?}: {err}");
        assert_eq!(out, "", "{args:?}: stdout holds no error");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        let line: serde_json::Value =
            serde_json::from_str(&err).unwrap_or_else(|error| panic!("{args:?}: {error}: {err}"));
        assert_eq!(line["error"]["code"], expected, "{args:?}: {err}");
        assert!(
            line["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{err}"
        );
        if expected == "E_CONFIG_REF_NOT_FOUND" {
            let diagnostics = line["error"]["diagnostics"].as_array().unwrap();
            assert_eq!(diagnostics[0]["line"], 7, "{err}");
        }
        if expected == "E_NO_TURN_RUNNING" {
            // The swarm that is not running is started in the background:
            // a plain `gdn run` would hold the terminal.
            let help = line["error"]["suggestion"].as_str().unwrap_or_default();
            assert!(help.contains("gdn run --detach"), "{err}");
        }
    }
    // `gdn validate` is the one whose errors are its result: the report,
    // on stdout as one JSON document, and nothing on stderr.
    let validated = run_with_deadline(gdn_command(
        broken.path(),
        state.path(),
        &["validate", "--json"],
    ));
    assert_eq!(code(&validated), 4);
    assert_eq!(stderr(&validated), "");
    let report: serde_json::Value = serde_json::from_str(&stdout(&validated)).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["errors"][0]["code"], "E_CONFIG_REF_NOT_FOUND");
}
