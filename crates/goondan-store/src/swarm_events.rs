//! `runtime/logs/<workspaceId>/swarm-events.jsonl`: the
//! [`SwarmEvent`]s of a workspace (each reload of its bundle and each
//! reload refused), appended by whoever reloaded and read back by
//! `gdn logs`.
//!
//! Reloads are rare (one line per edit or restart), so the log is opened
//! per append and read whole (from its end, each line under the tail
//! reader's cap); a torn last line is repaired before the
//! next append and skipped by readers, as in the runtime event log.

use crate::durability::{create_dir_all, open_append};
use crate::jsonl::repair_torn_tail;
use crate::paths::WorkspacePaths;
use crate::tail::{scan_backwards, TailLimits};
use crate::StoreError;
use goondan_types::SwarmEvent;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// The swarm event log of `workspace`.
pub fn swarm_events_log(workspace: &WorkspacePaths) -> PathBuf {
    workspace.runtime_logs_dir().join("swarm-events.jsonl")
}

/// Appends `event` to the swarm event log of `workspace` as one line.
pub fn append_swarm_event(
    workspace: &WorkspacePaths,
    event: &SwarmEvent,
) -> Result<(), StoreError> {
    let path = swarm_events_log(workspace);
    if let Some(parent) = path.parent() {
        create_dir_all(parent)?;
    }
    repair_torn_tail(&path)?;
    let mut line = serde_json::to_vec(event).map_err(|e| StoreError::encode("a swarm event", e))?;
    line.push(b'\n');
    // One `write_all` on an `O_APPEND` file: a concurrent reader sees whole
    // lines or a torn last line, which it skips.
    open_append(&path)?
        .write_all(&line)
        .map_err(|source| StoreError::io("appending to", &path, source))
}

/// One stored swarm event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwarmEventRecord {
    /// The line as stored, for verbatim output.
    pub line: String,
    /// The parsed event.
    pub event: SwarmEvent,
}

/// Every swarm event of `path`, oldest first (a missing log is empty).
/// Lines this version cannot read, a torn last line, and a line over the
/// default cap of [`crate::tail`] are skipped.
pub fn read_swarm_events(path: &Path) -> Result<Vec<SwarmEventRecord>, StoreError> {
    read_swarm_events_to(path).map(|(records, _)| records)
}

/// [`read_swarm_events`], and where a follower of the log goes on from
/// ([`crate::follow::FollowFrom::Offsets`]): the start of a line a writer
/// was in the middle of, else the log's end when it was read.
pub fn read_swarm_events_to(path: &Path) -> Result<(Vec<SwarmEventRecord>, u64), StoreError> {
    let mut newest_first = Vec::new();
    let mut torn_start = None;
    let report = scan_backwards(path, TailLimits::default(), |line| {
        if !line.terminated {
            torn_start = Some(line.start);
            return ControlFlow::Continue(());
        }
        if let Ok(event) = serde_json::from_slice(line.bytes) {
            newest_first.push(SwarmEventRecord {
                line: String::from_utf8_lossy(line.bytes).into_owned(),
                event,
            });
        }
        ControlFlow::Continue(())
    })?;
    newest_first.reverse();
    Ok((newest_first, torn_start.unwrap_or(report.end)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::StateRoot;
    use goondan_types::{ReloadTrigger, SwarmEventBase};

    fn event(duration: u64) -> SwarmEvent {
        SwarmEvent::Reloaded {
            base: SwarmEventBase {
                timestamp: goondan_types::now_iso(),
                swarm_name: "s".into(),
                instance_key: "s".into(),
                trigger: ReloadTrigger::Watch,
                reason: None,
            },
            changed: vec!["Agent/a".into()],
            restarted: vec!["a:s".into()],
            not_ready: Vec::new(),
            duration,
        }
    }

    #[test]
    fn appends_and_reads_back_skipping_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = StateRoot::new(dir.path()).workspace("s");
        let path = swarm_events_log(&workspace);
        assert!(read_swarm_events(&path).unwrap().is_empty());
        append_swarm_event(&workspace, &event(1)).unwrap();
        // A writer killed mid-line.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(br#"{"type":"swarm.rel"#)
            .unwrap();
        assert_eq!(read_swarm_events(&path).unwrap().len(), 1);
        append_swarm_event(&workspace, &event(2)).unwrap();
        let records = read_swarm_events(&path).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].event, event_with_timestamp(&records[1].event, 2));
        assert!(records[0].line.starts_with(r#"{"type":"swarm.reloaded""#));
    }

    fn event_with_timestamp(stored: &SwarmEvent, duration: u64) -> SwarmEvent {
        let mut expected = event(duration);
        if let SwarmEvent::Reloaded { base, .. } = &mut expected {
            base.timestamp = stored.base().timestamp.clone();
        }
        expected
    }
}
