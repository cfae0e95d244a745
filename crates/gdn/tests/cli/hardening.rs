//! Issue 16 against the real `gdn` binary: what a hostile review found at
//! the edges of `gdn run` and its control socket. Two projects on one
//! System Root, a control socket under attack, unbounded input, a System
//! Root too deep for a socket, concurrent starts, and instance keys chosen
//! at the command line. Each test names the finding it covers.

use crate::mock_llm::{ChatRequest, Reply};
use crate::swarm::{
    code, conversation_of, finish, fixture, gdn_command, run_with_deadline, stderr, stdout, Swarm,
};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

/// Answers every user message with `NAME heard: TEXT`.
fn echo(name: &'static str) -> impl Fn(&ChatRequest) -> Reply + Send + Sync + 'static {
    move |request| Reply::text(format!("{name} heard: {}", request.last_user_text()))
}

/// Every instance folder `agent:key` under every workspace of `state`.
fn instance_dirs(state: &Path, agent: &str, key: &str) -> Vec<PathBuf> {
    let Ok(workspaces) = std::fs::read_dir(state.join("workspaces")) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = workspaces
        .filter_map(Result::ok)
        .map(|entry| {
            entry
                .path()
                .join("instances")
                .join(format!("{agent}:{key}"))
        })
        .filter(|dir| dir.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn user_texts(instance_dir: &Path) -> Vec<String> {
    conversation_of(instance_dir)
        .iter()
        .filter(|data| data["role"] == "user")
        .filter_map(|data| data["content"].as_str().map(str::to_string))
        .collect()
}

/// The one control socket under `state`.
fn control_socket(state: &Path) -> PathBuf {
    let sockets: Vec<PathBuf> = std::fs::read_dir(state.join("runtime/sockets"))
        .unwrap()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sock"))
        .collect();
    assert_eq!(sockets.len(), 1, "{sockets:?}");
    sockets[0].clone()
}

/// Writes `bytes` on a fresh connection (from another thread, so a server
/// that answers early never deadlocks us) and reads the answer line.
fn exchange(socket: &Path, bytes: Vec<u8>) -> Value {
    let stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(&bytes);
    });
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    let _ = sender.join();
    serde_json::from_str(&line).unwrap_or_else(|_| panic!("not a JSON answer: {line:?}"))
}

#[test]
fn issue_16_3_two_bundles_with_one_instance_key_keep_their_own_orchestrators_and_conversations() {
    let project_a = Swarm::pair(2, echo("A"));
    let project_b_mock = crate::mock_llm::MockLlm::start(echo("B"));
    let project_b = fixture(
        "pair",
        &[
            ("@ENDPOINT@", project_b_mock.endpoint()),
            ("@GRACE@", "2".to_string()),
        ],
    );
    let state = project_a.state.path();
    let resident_a = project_a.start_resident();

    // B runs while A's orchestrator serves the same instance key.
    let output = run_with_deadline(gdn_command(
        project_b.path(),
        state,
        &["run", "--input", "hello from B"],
    ));
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "B heard: hello from B\n");
    assert!(!stderr(&output).contains("attached"), "{}", stderr(&output));

    let output = project_a.run(&["run", "--input", "hello from A"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "A heard: hello from A\n");
    assert!(stderr(&output).contains("attached"), "{}", stderr(&output));

    let alphas = instance_dirs(state, "alpha", "default");
    assert_eq!(alphas.len(), 2, "one workspace per bundle: {alphas:?}");
    let mut conversations: Vec<Vec<String>> = alphas.iter().map(|dir| user_texts(dir)).collect();
    conversations.sort();
    assert_eq!(
        conversations,
        [
            vec!["hello from A".to_string()],
            vec!["hello from B".to_string()]
        ]
    );

    // The management commands of each bundle find its own orchestrator.
    let list_a = project_a.run(&["instance", "list", "--json"]);
    let rows_a: Value = serde_json::from_str(&stdout(&list_a)).unwrap();
    assert_eq!(rows_a["instances"].as_array().unwrap().len(), 1, "{rows_a}");
    assert!(rows_a["instances"][0]["pid"].is_i64(), "A runs: {rows_a}");
    let list_b = run_with_deadline(gdn_command(
        project_b.path(),
        state,
        &["instance", "list", "--json"],
    ));
    let rows_b: Value = serde_json::from_str(&stdout(&list_b)).unwrap();
    assert_eq!(rows_b["instances"].as_array().unwrap().len(), 1, "{rows_b}");
    assert!(
        rows_b["instances"][0]["pid"].is_null(),
        "B stopped: {rows_b}"
    );
    assert_ne!(
        rows_a["instances"][0]["workspace"],
        rows_b["instances"][0]["workspace"]
    );
    assert_eq!(resident_a.terminate(), 0);
}

#[test]
fn issue_16_6_the_control_socket_survives_idle_floods_huge_lines_and_bad_bytes() {
    let swarm = Swarm::pair(2, echo("A"));
    let resident = swarm.start_resident();
    let socket = control_socket(swarm.state.path());

    let socket_mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(socket_mode, 0o600, "socket mode {socket_mode:o}");
    let folder_mode = std::fs::metadata(socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(folder_mode, 0o700, "folder mode {folder_mode:o}");

    // 200 connections that never send a line do not lock out a real one.
    let idle: Vec<UnixStream> = (0..200)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    let status = exchange(&socket, b"{\"op\":\"status\"}\n".to_vec());
    assert_eq!(status["result"], "status", "{status}");
    let output = swarm.run(&["run", "--input", "through the flood"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "A heard: through the flood\n");

    let mut huge = vec![b'a'; 2 * 1024 * 1024];
    huge.push(b'\n');
    let refused = exchange(&socket, huge);
    assert_eq!(refused["result"], "failed", "{refused}");
    assert_eq!(refused["code"], "E_CONTROL_REQUEST_TOO_LARGE", "{refused}");

    let garbled = exchange(&socket, b"{\"op\":\"st\xffatus\"}\n".to_vec());
    assert_eq!(garbled["result"], "failed", "{garbled}");
    assert_eq!(garbled["code"], "E_CONTROL_BAD_REQUEST", "{garbled}");

    drop(idle);
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn issue_16_9_input_is_bounded_even_from_an_endless_device() {
    let swarm = Swarm::pair(2, echo("A"));
    let one_byte_over = swarm.bundle.path().join("big.txt");
    std::fs::write(&one_byte_over, vec![b'x'; 1024 * 1024 + 1]).unwrap();
    for source in [Path::new("/dev/zero"), one_byte_over.as_path()] {
        let output = swarm.run(&["run", "--input-file", source.to_str().unwrap()]);
        assert_eq!(code(&output), 2, "{}", stderr(&output));
        let text = stderr(&output);
        assert!(text.starts_with("error[E_INPUT_TOO_LARGE]: "), "{text}");
        assert!(text.contains("1048576-byte"), "{text}");
        assert!(text.contains("   = help: "), "{text}");
    }
    assert!(swarm.mock.requests().is_empty());
    assert!(!swarm.state.path().join("runtime").exists());
}

#[test]
fn issue_16_12_a_state_root_too_deep_for_a_socket_starts_nothing() {
    let swarm = Swarm::pair(2, echo("A"));
    let deep = swarm.state.path().join("d".repeat(40)).join("e".repeat(40));
    for args in [&["run", "--detach"][..], &["run", "--input", "x"][..]] {
        let output = run_with_deadline(gdn_command(swarm.bundle.path(), &deep, args));
        assert_eq!(code(&output), 3, "{}", stderr(&output));
        let text = stderr(&output);
        assert!(text.starts_with("error[E_STATE_ROOT_TOO_DEEP]: "), "{text}");
        assert!(
            text.contains("   = help: use a shorter System Root"),
            "{text}"
        );
    }
    assert!(!deep.join("runtime").exists(), "nothing was started");
    assert!(swarm.mock.requests().is_empty());
}

#[test]
fn issue_16_13_concurrent_runs_start_one_orchestrator_and_all_get_answers() {
    // Slow answers keep the first orchestrator busy while the others come
    // (alpha asks the mock one Turn at a time, so a blocking pause is fine).
    let swarm = Swarm::pair(2, |request| {
        std::thread::sleep(Duration::from_millis(300));
        Reply::text(format!("heard: {}", request.last_user_text()))
    });
    let children: Vec<(String, Child)> = (0..6)
        .map(|n| {
            let text = format!("message {n}");
            let child = swarm
                .command(&["run", "--input", &text])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (text, child)
        })
        .collect();
    let mut n_attached = 0;
    for (text, child) in children {
        let output = finish(child, &text);
        assert_eq!(code(&output), 0, "{text}: {}", stderr(&output));
        assert_eq!(stdout(&output), format!("heard: {text}\n"));
        n_attached += usize::from(stderr(&output).contains("attached to the orchestrator"));
    }
    assert_eq!(n_attached, 5, "exactly one of six started an orchestrator");
    let alphas = instance_dirs(swarm.state.path(), "alpha", "default");
    assert_eq!(alphas.len(), 1);
    let mut texts = user_texts(&alphas[0]);
    texts.sort();
    let expected: Vec<String> = (0..6).map(|n| format!("message {n}")).collect();
    assert_eq!(texts, expected);
}

#[test]
fn issue_16_14_instance_keys_from_the_command_line_keep_separate_conversations() {
    let swarm = Swarm::pair(2, echo("A"));
    let resident = swarm.start_resident();
    for (key, text) in [("k1", "one"), ("k2", "two"), ("k1", "three")] {
        let output = swarm.run(&["run", "--instance-key", key, "--input", text]);
        assert_eq!(code(&output), 0, "{}", stderr(&output));
        assert_eq!(stdout(&output), format!("A heard: {text}\n"));
    }
    assert_eq!(resident.terminate(), 0);
    // Without a running orchestrator the key travels the same way.
    let output = swarm.run(&["run", "--instance-key", "k2", "--input", "four"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));

    let state = swarm.state.path();
    let [k1] = &instance_dirs(state, "alpha", "k1")[..] else {
        panic!("one alpha:k1");
    };
    let [k2] = &instance_dirs(state, "alpha", "k2")[..] else {
        panic!("one alpha:k2");
    };
    assert_eq!(user_texts(k1), ["one", "three"]);
    assert_eq!(user_texts(k2), ["two", "four"]);
    assert!(instance_dirs(state, "alpha", "default").is_empty());
}

/// Issue 35.1, the registry's side: its `--token-file` took tokens of 16
/// characters, fewer than every other port's minimum of 24.
#[test]
fn issue_35_1_gdn_registry_serve_refuses_a_token_file_with_a_short_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        "# publishers\n0123456789abcdef0123456789abcdef\nsixteen-chars-xx\n",
    )
    .unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_gdn"));
    command
        .args(["registry", "serve", "--addr", "127.0.0.1:0", "--dir"])
        .arg(dir.path().join("store"))
        .arg("--token-file")
        .arg(&tokens)
        .stdin(Stdio::null());
    let output = run_with_deadline(command);
    let stderr = stderr(&output);
    assert_ne!(code(&output), 0, "{stderr}");
    assert!(stderr.contains("error[E_PKG_TOKEN_FILE]"), "{stderr}");
    assert!(stderr.contains("token 2"), "{stderr}");
    assert!(stderr.contains("at least 24"), "{stderr}");
}
