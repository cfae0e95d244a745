//! `runtime-events.jsonl` after writes cut short (issue 16 #16): by a full
//! disk, stood in for by a file-size limit (`RLIMIT_FSIZE`) in a child
//! process, and by a crash. The next event must start on a line of its
//! own, never glued to the fragment.

use goondan_store::{
    read_runtime_events, InstanceStore, RuntimeEventFilter, RuntimeEventLog, StateRoot,
};
use goondan_types::{RuntimeEvent, RuntimeEventBase};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::signal::{signal, SigHandler, Signal};
use std::path::Path;
use std::process::Command;

/// Set in the child: the System Root it writes to.
const CHILD_ROOT_ENV: &str = "GOONDAN_STORE_TEST_FULL_DISK_ROOT";

fn store(root: &Path) -> InstanceStore {
    InstanceStore::new(StateRoot::new(root).workspace("main:prod"))
}

fn turn_started(turn_id: &str) -> RuntimeEvent {
    RuntimeEvent::TurnStarted {
        base: RuntimeEventBase {
            timestamp: goondan_types::now_iso(),
            agent_name: "coder".to_string(),
            instance_key: "k".to_string(),
            trace_id: "0".repeat(32),
            span_id: "0123456789abcdef".to_string(),
            parent_span_id: None,
        },
        turn_id: turn_id.to_string(),
        source: None,
    }
}

/// The turn ids of the log's events, and how many lines were unreadable.
fn turn_ids(log: &Path) -> (Vec<String>, usize) {
    let page = read_runtime_events(log, &RuntimeEventFilter::default()).unwrap();
    let ids = page
        .records
        .iter()
        .map(|record| match &record.event {
            RuntimeEvent::TurnStarted { turn_id, .. } => turn_id.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    (ids, page.n_unreadable)
}

/// The child: one event, then a limit that lets only part of the next one
/// through (the disk fills), then the limit lifted (space freed) and one
/// more event.
fn fill_the_disk_in_child(root: &Path) -> ! {
    // Past the limit the kernel sends SIGXFSZ, whose default kills; a full
    // disk only fails the write, so the signal is ignored.
    // SAFETY: ignoring a signal installs no handler code.
    unsafe { signal(Signal::SIGXFSZ, SigHandler::SigIgn) }.unwrap();
    let instance = store(root).open("coder", "k").unwrap();
    let log: &RuntimeEventLog = instance.runtime_events();
    log.append(&turn_started("before")).unwrap();
    let size = std::fs::metadata(log.path()).unwrap().len();
    let (soft, hard) = getrlimit(Resource::RLIMIT_FSIZE).unwrap();
    setrlimit(Resource::RLIMIT_FSIZE, size + 20, hard).unwrap();
    let error = log.append(&turn_started("cut-short")).unwrap_err();
    assert_eq!(error.code(), "E_STORE_IO");
    setrlimit(Resource::RLIMIT_FSIZE, soft, hard).unwrap();
    log.append(&turn_started("after")).unwrap();
    std::process::exit(0);
}

#[test]
fn issue_16_16_a_write_cut_short_by_a_full_disk_is_not_glued_to_the_next() {
    if let Some(root) = std::env::var_os(CHILD_ROOT_ENV) {
        fill_the_disk_in_child(Path::new(&root));
    }
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "issue_16_16_a_write_cut_short_by_a_full_disk_is_not_glued_to_the_next",
            "--nocapture",
        ])
        .env(CHILD_ROOT_ENV, dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "the child failed: {status}");
    let log = store(dir.path())
        .workspace()
        .instance("coder", "k")
        .runtime_events_log();
    assert_eq!(turn_ids(&log), (vec!["before".into(), "after".into()], 0));
    assert!(std::fs::read(&log).unwrap().ends_with(b"\n"));
}

#[test]
fn issue_16_16_a_torn_line_left_by_a_crash_is_repaired_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let path = {
        let instance = store.open("coder", "k").unwrap();
        instance
            .runtime_events()
            .append(&turn_started("before"))
            .unwrap();
        instance.runtime_events().path().to_path_buf()
    };
    // A process killed in the middle of its write.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, b"{\"type\":\"turn.sta").unwrap();
    let instance = store.open("coder", "k").unwrap();
    instance
        .runtime_events()
        .append(&turn_started("after"))
        .unwrap();
    assert_eq!(turn_ids(&path), (vec!["before".into(), "after".into()], 0));
}
