//! End to end: `gdn run` fed by a pipe. Every line is an event (a JSON
//! object line names its instance), every answer is printed, and the end
//! of the input lets the Turns in flight finish before `gdn run` exits 0.

use crate::mock_llm::{MockLlm, Reply};
use crate::swarm::{code, find_instance, fixture, gdn_command, stderr, stdout, Swarm};
use serde_json::Value;
use std::io::Write;
use std::process::{Output, Stdio};

fn echo_swarm() -> Swarm {
    let mock = MockLlm::start(|request| Reply::text(format!("got: {}", request.last_user_text())));
    let bundle = fixture(
        "pair",
        &[
            ("@ENDPOINT@", mock.endpoint()),
            ("@GRACE@", "5".to_string()),
        ],
    );
    Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    }
}

/// `gdn run ARGS` with `input` piped to its standard input, to its exit.
fn pipe(swarm: &Swarm, args: &[&str], input: &[u8]) -> Output {
    let mut child = gdn_command(swarm.bundle.path(), swarm.state.path(), args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = crate::swarm::finish(child, "gdn run fed by a pipe");
    writer.join().unwrap();
    output
}

#[test]
fn every_piped_line_is_answered_and_the_end_of_input_exits_zero() {
    let swarm = echo_swarm();
    let input = concat!(
        "first question\n",
        "\n",
        "{\"text\": \"for ann\", \"instanceKey\": \"ann\"}\n",
        "{\"text\": \"for bob\", \"instanceKey\": \"bob\", \"properties\": {\"tier\": 2}}\n",
        "{\"text\": \"ann again\", \"instanceKey\": \"ann\"}\n",
        "last question",
    );
    let output = pipe(&swarm, &["run"], input.as_bytes());
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let printed = stdout(&output);
    let answers: Vec<&str> = printed.lines().collect();
    assert_eq!(answers.len(), 5, "{printed}");
    for expected in [
        "got: first question",
        "got: for ann",
        "got: for bob",
        "got: ann again",
        "got: last question",
    ] {
        assert!(
            answers.contains(&expected),
            "{expected:?} missing: {printed}"
        );
    }
    // Per instance, answers come in the order the lines came.
    let position = |text: &str| answers.iter().position(|line| *line == text).unwrap();
    assert!(position("got: for ann") < position("got: ann again"));
    assert!(position("got: first question") < position("got: last question"));

    // Each instance keeps its own conversation.
    let history = |key: &str| {
        let dir = find_instance(swarm.state.path(), "alpha", key).unwrap();
        crate::swarm::conversation_of(&dir)
            .iter()
            .map(|message| message["content"].to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let ann = history("ann");
    assert!(
        ann.contains("for ann") && ann.contains("ann again"),
        "{ann}"
    );
    assert!(!ann.contains("for bob") && !ann.contains("first question"));
    let bob = history("bob");
    assert!(bob.contains("for bob") && !bob.contains("ann"), "{bob}");
    let default = history("default");
    assert!(default.contains("first question") && default.contains("last question"));
}

#[test]
fn with_json_each_answer_is_a_line_with_its_instance_and_trace() {
    let swarm = echo_swarm();
    let input = "{\"text\": \"one\", \"instanceKey\": \"k1\"}\nplain\n";
    let output = pipe(&swarm, &["--json", "run"], input.as_bytes());
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", stdout(&output));
    let one = lines
        .iter()
        .find(|line| line["text"] == "got: one")
        .unwrap();
    assert_eq!(one["instanceKey"], "k1");
    assert!(one["traceId"]
        .as_str()
        .is_some_and(|trace| !trace.is_empty()));
    let plain = lines
        .iter()
        .find(|line| line["text"] == "got: plain")
        .unwrap();
    assert_eq!(plain["instanceKey"], "default");
    assert_ne!(
        plain["traceId"], one["traceId"],
        "each line is its own trace"
    );
}

#[test]
fn unusable_lines_are_skipped_with_an_error_and_the_rest_answered() {
    let swarm = echo_swarm();
    let mut input = b"before\n".to_vec();
    input.extend(std::iter::repeat_n(b'x', 2 * 1024 * 1024));
    input.extend(b"\n\xff\xfe\n{\"text\": 7}\nafter\n");
    let output = pipe(&swarm, &["run"], &input);
    assert_eq!(code(&output), 1, "a skipped line is a failure");
    let errors = stderr(&output);
    for expected in ["E_INPUT_TOO_LARGE", "E_INPUT_NOT_UTF8", "E_INPUT_INVALID"] {
        assert!(errors.contains(expected), "{expected} missing: {errors}");
    }
    let printed = stdout(&output);
    assert!(
        printed.contains("got: before") && printed.contains("got: after"),
        "{printed}"
    );
    assert_eq!(
        swarm.mock.requests().len(),
        2,
        "nothing else reached the model"
    );
}

#[test]
fn a_pipe_into_a_second_run_is_answered_by_the_running_orchestrator() {
    let swarm = echo_swarm();
    let resident = swarm.start_resident();
    let input = "{\"text\": \"via attach\", \"instanceKey\": \"att\"}\nplain attach\n";
    let output = pipe(&swarm, &["--json", "run"], input.as_bytes());
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stderr(&output).contains("attached to the orchestrator"));
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines[0]["text"], "got: via attach");
    assert_eq!(lines[0]["instanceKey"], "att");
    assert_eq!(lines[1]["text"], "got: plain attach");
    assert!(find_instance(swarm.state.path(), "alpha", "att").is_some());
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn a_terminal_session_is_a_chat_that_keeps_one_conversation_and_ends_with_ctrl_d() {
    let swarm = echo_swarm();
    let mut terminal = Terminal::start(&swarm, &["run"]);
    terminal.shows("type a message");
    terminal.types(b"hello there\n");
    terminal.shows("got: hello there");
    terminal.types(b"and again\n");
    terminal.shows("got: and again");
    // Ctrl-D at the start of a line is the end of the input.
    terminal.types(&[4]);
    let (output, screen) = terminal.finish("gdn run on a terminal");
    assert_eq!(code(&output), 0, "{screen}");
    let dir = find_instance(swarm.state.path(), "alpha", "default").unwrap();
    let history = crate::swarm::conversation_of(&dir);
    let users = history
        .iter()
        .filter(|message| message["role"] == "user")
        .count();
    assert_eq!(users, 2, "one conversation for the session: {history:?}");
}

#[test]
fn sigterm_stops_a_piped_run_gracefully() {
    use std::io::BufRead;
    let swarm = echo_swarm();
    let mut child = gdn_command(swarm.bundle.path(), swarm.state.path(), &["run"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The pipe stays open: only a signal ends this run.
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "first").unwrap();
    let mut answers = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut answer = String::new();
    answers.read_line(&mut answer).unwrap();
    assert_eq!(answer.trim(), "got: first");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = crate::swarm::finish(child, "gdn run after SIGTERM");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    drop(stdin);
}

#[test]
fn gdn_instance_on_a_terminal_lists_restarts_and_deletes_with_keys() {
    let swarm = echo_swarm();
    let resident = swarm.start_resident();
    let asked = swarm.run(&["run", "--input", "hello"]);
    assert_eq!(code(&asked), 0, "{}", stderr(&asked));

    // Not on a terminal: the plain list.
    let piped = swarm.run(&["instance"]);
    assert_eq!(code(&piped), 0, "{}", stderr(&piped));
    assert!(
        stdout(&piped).starts_with("SWARM") && stdout(&piped).contains("INSTANCE KEY"),
        "{}",
        stdout(&piped)
    );

    let mut terminal = Terminal::start(&swarm, &["instance"]);
    terminal.shows(">● alpha:default");
    terminal.shows("started=");
    let old_pid = swarm.pid_of("alpha").expect("alpha runs");
    terminal.shows(&format!("pid={old_pid}"));
    // Down to "exit" and back up with arrow keys, then restart.
    terminal.types(b"\x1b[B");
    terminal.shows(">  exit");
    terminal.types(b"\x1b[A");
    terminal.types(b"r");
    terminal.shows("restarted alpha:default");
    let new_pid = swarm.pid_of("alpha").expect("alpha runs again");
    assert_ne!(new_pid, old_pid);
    terminal.shows(&format!("pid={new_pid}"));
    // Delete asks first; `n` keeps it, `y` deletes it.
    terminal.types(b"d");
    terminal.shows("delete every message and extension state of alpha:default? [y/N]");
    terminal.types(b"n");
    terminal.shows("kept alpha:default");
    terminal.types(b"d");
    terminal.types(b"y");
    terminal.shows("deleted alpha:default");
    terminal.types(b"q");
    let (output, screen) = terminal.finish("gdn instance on a terminal");
    assert_eq!(code(&output), 0, "{screen}");
    assert!(find_instance(swarm.state.path(), "alpha", "default").is_none());
    drop(resident);
}

/// `gdn ARGS` of `swarm` on a pseudo-terminal: what it has shown so far,
/// and a keyboard.
pub(crate) struct Terminal {
    child: std::process::Child,
    master: std::fs::File,
    screen: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Terminal {
    pub(crate) fn start(swarm: &Swarm, args: &[&str]) -> Terminal {
        Terminal::start_command(gdn_command(swarm.bundle.path(), swarm.state.path(), args))
    }

    /// Runs `command` on a new pseudo-terminal that is its controlling
    /// terminal, in a session of its own: a Ctrl-C typed there is SIGINT
    /// to its foreground process group, as at a person's terminal.
    pub(crate) fn start_controlling(mut command: std::process::Command) -> Terminal {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if nix::libc::setsid() == -1
                    || nix::libc::ioctl(0, nix::libc::TIOCSCTTY as _, 0) == -1
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Terminal::start_command(command)
    }

    /// Runs `command` on a new pseudo-terminal.
    pub(crate) fn start_command(mut command: std::process::Command) -> Terminal {
        use std::io::Read;
        let pty = nix::pty::openpty(None, None).unwrap();
        let slave = |fd: &std::os::fd::OwnedFd| Stdio::from(fd.try_clone().unwrap());
        let child = command
            .stdin(slave(&pty.slave))
            .stdout(slave(&pty.slave))
            .stderr(slave(&pty.slave))
            .spawn()
            .unwrap();
        // The command holds its copies of the terminal until dropped.
        drop(command);
        drop(pty.slave);
        let master = std::fs::File::from(pty.master);
        let screen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let reader = {
            let screen = screen.clone();
            let mut master = master.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut buffer = [0u8; 4096];
                // Ends with EIO once the last holder of the terminal exits.
                while let Ok(read) = master.read(&mut buffer) {
                    if read == 0 {
                        break;
                    }
                    screen
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buffer[..read]));
                }
            })
        };
        Terminal {
            child,
            master,
            screen,
            reader,
        }
    }

    /// Waits until the screen has shown `text`.
    pub(crate) fn shows(&self, text: &str) {
        let screen = self.screen.clone();
        crate::swarm::wait_until(&format!("the terminal to show {text:?}"), move || {
            screen.lock().unwrap().contains(text).then_some(())
        })
    }

    /// What the screen has shown so far.
    pub(crate) fn shown(&self) -> String {
        self.screen.lock().unwrap().clone()
    }

    /// Types `keys`.
    pub(crate) fn types(&mut self, keys: &[u8]) {
        self.master.write_all(keys).unwrap();
    }

    /// Waits for the program to exit: its output and all it showed.
    pub(crate) fn finish(self, what: &str) -> (Output, String) {
        let output = crate::swarm::finish(self.child, what);
        drop(self.master);
        let _ = self.reader.join();
        let screen = self.screen.lock().unwrap().clone();
        (output, screen)
    }
}
