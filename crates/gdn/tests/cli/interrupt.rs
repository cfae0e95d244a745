//! Issue 49 #3, Ctrl-C as a person means it: at a real controlling
//! terminal, the first Ctrl-C during a chat's Turn cancels that Turn and
//! the chat goes on (no agent process dies: they are not in the
//! terminal's foreground group), a second within a second quits; an
//! interrupted `gdn run --input` cancels its Turn, which the next start
//! does not run again.

use crate::mock_llm::{ChatRequest, Reply};
use crate::stdin::Terminal;
use crate::swarm::{code, stdout, wait_until, Swarm};

/// `hang` never gets an answer from the model; anything else is echoed.
fn hang_or_echo(request: &ChatRequest) -> Reply {
    let text = request.last_user_text();
    if text.contains("hang") {
        return Reply::Hang;
    }
    Reply::text(format!("echo: {text}"))
}

/// How many model requests asked about `text`.
fn asked_about(swarm: &Swarm, text: &str) -> usize {
    swarm
        .mock
        .requests()
        .iter()
        .filter(|request| request.last_user_text().contains(text))
        .count()
}

#[test]
fn ctrl_c_in_a_chat_cancels_the_turn_and_a_second_one_quits() {
    let swarm = Swarm::pair(5, hang_or_echo);
    let mut terminal = Terminal::start_controlling(swarm.command(&["run"]));
    terminal.shows("type a message");
    terminal.types(b"please hang\n");
    wait_until("the model asked", || {
        (asked_about(&swarm, "please hang") > 0).then_some(())
    });
    terminal.types(&[3]);
    terminal.shows("cancelling the Turn");
    terminal.shows("E_TURN_CANCELLED");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    terminal.types(b"still here?\n");
    terminal.shows("echo: still here?");
    // A lone Ctrl-C at the prompt only says how to quit.
    terminal.types(&[3]);
    terminal.shows("quits the chat");
    std::thread::sleep(std::time::Duration::from_millis(1200));
    terminal.types(&[3]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    terminal.types(&[3]);
    let (output, screen) = terminal.finish("a chat quit by two Ctrl-C");
    assert_eq!(code(&output), 130, "{screen}");
    assert!(!screen.contains("crashed"), "{screen}");
    assert!(!screen.contains("Some("), "{screen}");
    let log = swarm.state.path().join("runtime").join("logs");
    let logged = read_all(&log);
    assert!(
        logged.contains("agent process"),
        "no process log read at {log:?}"
    );
    assert!(
        !logged.contains("crashed"),
        "an agent process died: {logged}"
    );
    assert!(!logged.contains("Some("), "a Rust debug value was logged");
    assert_eq!(asked_about(&swarm, "please hang"), 1);
}

#[test]
fn an_interrupted_input_is_cancelled_and_not_run_again_by_the_next_start() {
    let swarm = Swarm::pair(5, hang_or_echo);
    let mut terminal = Terminal::start_controlling(swarm.command(&["run", "--input", "hang on"]));
    wait_until("the model asked", || {
        (asked_about(&swarm, "hang on") > 0).then_some(())
    });
    terminal.types(&[3]);
    let (output, screen) = terminal.finish("an interrupted gdn run --input");
    assert_eq!(code(&output), 130, "{screen}");

    let next = swarm.run(&["run", "--input", "and now"]);
    assert_eq!(code(&next), 0, "{}", crate::swarm::stderr(&next));
    assert_eq!(stdout(&next).trim(), "echo: and now");
    assert_eq!(
        asked_about(&swarm, "hang on"),
        1,
        "the interrupted input ran again"
    );
}

#[test]
fn ctrl_c_in_a_chat_attached_to_a_running_swarm_cancels_its_turn() {
    let swarm = Swarm::pair(5, hang_or_echo);
    let resident = swarm.start_resident();
    let mut terminal = Terminal::start_controlling(swarm.command(&["run"]));
    terminal.shows("attached to the orchestrator");
    terminal.types(b"please hang\n");
    wait_until("the model asked", || {
        (asked_about(&swarm, "please hang") > 0).then_some(())
    });
    terminal.types(&[3]);
    terminal.shows("cancelled the Turn");
    // The same instance answers next: the hung Turn no longer holds it.
    terminal.types(b"after\n");
    terminal.shows("echo: after");
    terminal.types(&[4]);
    let (output, screen) = terminal.finish("an attached chat");
    assert_eq!(code(&output), 0, "{screen}");
    assert_eq!(resident.terminate(), 0);
    assert_eq!(asked_about(&swarm, "please hang"), 1);
}

/// Every log file under `dir`, joined.
fn read_all(dir: &std::path::Path) -> String {
    let mut all = String::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return all;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            all.push_str(&read_all(&path));
        } else if let Ok(text) = std::fs::read_to_string(&path) {
            all.push_str(&text);
        }
    }
    all
}
