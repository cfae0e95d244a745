//! Crash safety with real processes: the test binary re-executes itself as
//! a child that runs Turns through `FileJournal` and prints an
//! acknowledgement after each `record_event` and `commit_turn` returns;
//! the parent SIGKILLs it at random points, reopens the instance and checks
//! that the conversation is exactly what was acknowledged (plus, at most,
//! the one operation in flight at the kill): nothing lost, nothing twice.
//!
//! Each test is both parent and child: when `GOONDAN_STORE_CRASH_ROOT` is
//! set, it plays the child and never returns.

use goondan_store::{InstanceStore, StateRoot, StoreError, SyncPolicy, TurnJournal};
use goondan_types::{Message, MessageEvent, MessageSource, ModelMessage};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const ENV_ROOT: &str = "GOONDAN_STORE_CRASH_ROOT";
const ENV_SEED: &str = "GOONDAN_STORE_CRASH_SEED";
const ENV_MODE: &str = "GOONDAN_STORE_CRASH_MODE";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Mostly appends, with replaces, removes and rare truncates: both fold
    /// kinds, small files.
    Mixed,
    /// A few hundred large messages, then one replace per Turn: every
    /// commit is a long rewrite, so kills often land inside one.
    Rewrite,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Mixed => "mixed",
            Mode::Rewrite => "rewrite",
        }
    }
}

impl Mode {
    /// Mixed runs without fsync so kills spread over event writes too (a
    /// flush-bound commit otherwise catches most of them); rewrites run
    /// with the default policy.
    fn policy(self) -> SyncPolicy {
        match self {
            Mode::Mixed => SyncPolicy::ProcessCrash,
            Mode::Rewrite => SyncPolicy::TurnCommit,
        }
    }
}

fn store(root: &Path, mode: Mode) -> InstanceStore {
    InstanceStore::new(StateRoot::new(root).workspace("crash")).with_sync_policy(mode.policy())
}

fn apply(state: &mut Vec<Message>, event: &MessageEvent) {
    match event {
        MessageEvent::Append { message } => state.push(message.clone()),
        MessageEvent::Replace { target_id, message } => {
            if let Some(slot) = state.iter_mut().find(|m| &m.id == target_id) {
                *slot = message.clone();
            }
        }
        MessageEvent::Remove { target_id } => state.retain(|m| &m.id != target_id),
        MessageEvent::Truncate => state.clear(),
    }
}

fn text_message(rng: &mut StdRng, size: usize) -> Message {
    let letter = char::from(rng.random_range(b'a'..=b'z'));
    Message::new(
        ModelMessage::user(letter.to_string().repeat(size)),
        MessageSource::User,
    )
}

fn random_event(rng: &mut StdRng, state: &[Message], mode: Mode) -> MessageEvent {
    let size = match mode {
        Mode::Mixed => 40,
        Mode::Rewrite => 1000,
    };
    if mode == Mode::Rewrite && state.len() < 150 {
        return MessageEvent::Append {
            message: text_message(rng, size),
        };
    }
    let roll = rng.random_range(0..100);
    let target = (!state.is_empty()).then(|| state[rng.random_range(0..state.len())].id.clone());
    match (mode, roll, target) {
        (Mode::Rewrite, _, Some(target_id)) | (Mode::Mixed, 70..=84, Some(target_id)) => {
            MessageEvent::Replace {
                target_id,
                message: text_message(rng, size),
            }
        }
        (Mode::Mixed, 85..=97, Some(target_id)) => MessageEvent::Remove { target_id },
        (Mode::Mixed, 98..=99, Some(_)) => MessageEvent::Truncate,
        _ => MessageEvent::Append {
            message: text_message(rng, size),
        },
    }
}

/// The child: runs Turns until killed, acknowledging every durable step.
fn run_child(root: &Path, seed: u64, mode: Mode) -> ! {
    let mut out = std::io::stdout().lock();
    let mut instance = store(root, mode).open("agent", "k").expect("child open");
    let journal = instance.journal_mut();
    let loaded = journal.load().expect("child load");
    let mut state = loaded.base.clone();
    for event in &loaded.pending_events {
        apply(&mut state, event);
    }
    if !loaded.pending_events.is_empty() {
        let turn_id = loaded
            .pending_turn_id
            .clone()
            .unwrap_or_else(|| "recovered".to_string());
        journal
            .commit_turn(
                &turn_id,
                &loaded.pending_events,
                &state,
                &Default::default(),
            )
            .expect("child recovery commit");
    }
    writeln!(out, "@@ready").unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    for turn in 0..100_000u32 {
        let turn_id = format!("{seed}-{turn}");
        let mut events = Vec::new();
        for _ in 0..rng.random_range(1..=4) {
            let event = random_event(&mut rng, &state, mode);
            writeln!(out, "@@intent {}", serde_json::to_string(&event).unwrap()).unwrap();
            journal
                .record_event(&turn_id, &event)
                .expect("child record");
            writeln!(out, "@@ack").unwrap();
            apply(&mut state, &event);
            events.push(event);
        }
        writeln!(out, "@@commit").unwrap();
        journal
            .commit_turn(&turn_id, &events, &state, &Default::default())
            .expect("child commit");
        writeln!(out, "@@committed").unwrap();
    }
    std::process::exit(0);
}

fn child_from_env() -> Option<(std::path::PathBuf, u64, Mode)> {
    let root = std::env::var_os(ENV_ROOT)?;
    let seed = std::env::var(ENV_SEED).ok()?.parse().ok()?;
    let mode = match std::env::var(ENV_MODE).ok()?.as_str() {
        "rewrite" => Mode::Rewrite,
        _ => Mode::Mixed,
    };
    Some((root.into(), seed, mode))
}

/// The parent: `iterations` children, each killed at a random moment up to
/// `max_micros_before_kill` after it loaded the instance.
fn kill_repeatedly(test_name: &str, mode: Mode, iterations: u64, max_micros_before_kill: u64) {
    if let Some((root, seed, mode)) = child_from_env() {
        run_child(&root, seed, mode);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(0x5eed ^ iterations);
    let mut expected: Vec<Message> = Vec::new();
    let mut n_in_flight_landed = 0;
    // Kills that landed after the child announced a commit and before it
    // acknowledged it.
    let mut n_kills_while_committing = 0;
    for iteration in 0..iterations {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
            .env(ENV_ROOT, dir.path())
            .env(ENV_SEED, (iteration * 7919 + 1).to_string())
            .env(ENV_MODE, mode.name())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // A reader thread drains stdout so the child never waits on the
        // pipe; the kill then lands at a random moment of its work, most
        // often inside the slow part (a commit), not at a line boundary.
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest prints `test <name> ... ` before the test runs,
                // without a newline, so the first line of ours shares it.
                let Some(start) = line.find("@@") else {
                    continue;
                };
                if sender.send(line[start..].to_string()).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        for line in receiver.iter() {
            let ready = line == "@@ready";
            lines.push(line);
            if ready {
                break;
            }
        }
        if iteration == 0 {
            // While the child holds the instance, a second writer is refused.
            match store(dir.path(), mode).open("agent", "k") {
                Err(StoreError::InstanceLocked { holder_pid, .. }) => {
                    assert_eq!(holder_pid, Some(child.id()))
                }
                other => panic!("second writer was not refused: {other:?}"),
            }
        }
        std::thread::sleep(std::time::Duration::from_micros(
            rng.random_range(0..max_micros_before_kill),
        ));
        child.kill().unwrap();
        lines.extend(receiver.iter());
        reader.join().unwrap();

        let mut in_flight: Option<MessageEvent> = None;
        let mut committing = false;
        for line in &lines {
            if let Some(json) = line.strip_prefix("@@intent ") {
                // A line cut by the kill announced an event never recorded.
                in_flight = serde_json::from_str(json).ok();
            } else if line == "@@ack" {
                apply(
                    &mut expected,
                    &in_flight.take().expect("ack without intent"),
                );
            } else if line == "@@commit" || line == "@@committed" {
                committing = line == "@@commit";
            }
        }
        n_kills_while_committing += usize::from(committing);
        let status = child.wait().unwrap();
        assert!(
            !status.success(),
            "iteration {iteration}: child ended on its own: {status:?}"
        );

        let mut instance = store(dir.path(), mode).open("agent", "k").unwrap();
        let loaded = instance.journal_mut().load().unwrap();
        let mut actual = loaded.base.clone();
        for event in &loaded.pending_events {
            apply(&mut actual, event);
        }
        let mut with_in_flight = expected.clone();
        if let Some(event) = &in_flight {
            apply(&mut with_in_flight, event);
        }
        if actual != expected {
            assert!(
                in_flight.is_some() && actual == with_in_flight,
                "iteration {iteration}: reloaded {} messages, acknowledged {} (in flight: {in_flight:?}); warnings {:?}",
                actual.len(),
                expected.len(),
                loaded.warnings
            );
            n_in_flight_landed += 1;
        }
        let mut seen = std::collections::HashSet::new();
        assert!(
            actual.iter().all(|m| seen.insert(m.id.clone())),
            "iteration {iteration}: duplicate message ids"
        );
        let paths = instance.paths().clone();
        assert!(!paths.base_log().with_file_name("base.jsonl.tmp").exists());
        // The base on disk is whole: every line parses, none is torn.
        let base_text = std::fs::read_to_string(paths.base_log()).unwrap();
        assert!(base_text.is_empty() || base_text.ends_with('\n'));
        assert_eq!(base_text.lines().count(), loaded.base.len());
        expected = actual;
    }
    eprintln!(
        "{test_name}: {iterations} kills, {n_kills_while_committing} inside a commit, \
         {n_in_flight_landed} with the unacknowledged event landing"
    );
}

#[test]
fn sigkill_during_mixed_turns_loses_and_duplicates_nothing() {
    kill_repeatedly(
        "sigkill_during_mixed_turns_loses_and_duplicates_nothing",
        Mode::Mixed,
        40,
        20_000,
    );
}

#[test]
fn sigkill_during_rewrites_leaves_old_or_new_base_never_a_mix() {
    kill_repeatedly(
        "sigkill_during_rewrites_leaves_old_or_new_base_never_a_mix",
        Mode::Rewrite,
        25,
        30_000,
    );
}
