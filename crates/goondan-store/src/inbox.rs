//! [`InboxStore`]: the durable inbox of every instance of a workspace on
//! one host. An input the orchestrator accepts (from a connector, the CLI,
//! the control socket or another agent) is appended here, flushed per the
//! [`SyncPolicy`], before it is acknowledged, and leaves only when the Turn
//! that consumed it has committed (the process reports `TurnFinished`
//! after its fold) or when it was answered for good without one (refused,
//! cancelled, given up after crashes). An orchestrator that starts, and an
//! instance whose process is started again, take every pending entry
//! first, in acceptance order.
//!
//! One file per instance, `<workspace>/inbox/<agent:key>.jsonl`, written
//! only by the orchestrator (which holds the workspace's start lock), of
//! JSON lines:
//!
//! * `{"accepted": {"from": "<sender>", "event": <AgentEvent>}}`: an
//!   input accepted (`from` is a routing key or `orchestrator`);
//! * `{"consumed": "<eventId>"}`: it left;
//! * `{"withdrawn": "<eventId>"}`: it was refused after all (a full
//!   queue), so a retry of it is not a duplicate;
//! * `{"seen": ["<eventId>", ...]}`: the ids consumed before a compaction,
//!   kept so a replay of one is still refused.
//!
//! The ids consumed last (at most [`SEEN_WINDOW`] per instance) are
//! remembered across restarts, so an input whose id the instance already
//! holds or held recently is refused as a duplicate ([`Accepted::Duplicate`])
//! rather than run twice. A torn last line (the process died while
//! writing it) was never acknowledged and is dropped.
//!
//! Only instances with something pending are kept in memory (with their
//! file open): one that has nothing pending is read again from its file
//! (at most [`COMPACT_AFTER_BYTES`] and a little) at its next input, so an
//! orchestrator with thousands of quiet instances holds no window and no
//! descriptor for them.

use crate::durability::{
    create_dir_all, open_append, sync_dir, sync_file, write_file_atomically, SyncPolicy,
};
use crate::jsonl::read_jsonl_repairing;
use crate::paths::{decode_path_component, WorkspacePaths};
use crate::StoreError;
use goondan_types::AgentEvent;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// How many consumed event ids an instance remembers, to refuse a replay.
pub const SEEN_WINDOW: usize = 1024;
/// A file past this size with nothing pending is compacted to its `seen`
/// window.
const COMPACT_AFTER_BYTES: u64 = 64 * 1024;

/// What became of an input handed to [`InboxStore::accept`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// It is stored; acknowledge it.
    New,
    /// The instance holds it already, or consumed it recently: it must not
    /// run again.
    Duplicate,
}

/// An input waiting in an inbox, with who sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingInput {
    /// The sender, as the wire's `from` spells it (a routing key, or
    /// `orchestrator`).
    pub from: String,
    /// The input.
    pub event: AgentEvent,
}

/// One line of an inbox file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Record {
    Accepted(Box<PendingInput>),
    Consumed(String),
    Withdrawn(String),
    Seen(Vec<String>),
}

/// One instance's inbox, as folded from its file.
#[derive(Default)]
struct Inbox {
    /// Accepted and not consumed, in acceptance order.
    pending: VecDeque<PendingInput>,
    /// Ids consumed most recently, oldest first.
    seen: VecDeque<String>,
    seen_set: HashSet<String>,
    /// The open file, once something was written.
    file: Option<File>,
    /// Its size.
    bytes: u64,
}

impl Inbox {
    fn holds(&self, event_id: &str) -> bool {
        self.seen_set.contains(event_id)
            || self
                .pending
                .iter()
                .any(|pending| pending.event.id == event_id)
    }

    fn position(&self, event_id: &str) -> Option<usize> {
        self.pending
            .iter()
            .position(|pending| pending.event.id == event_id)
    }

    fn remember(&mut self, event_id: String) {
        if self.seen_set.insert(event_id.clone()) {
            self.seen.push_back(event_id);
        }
        while self.seen.len() > SEEN_WINDOW {
            if let Some(oldest) = self.seen.pop_front() {
                self.seen_set.remove(&oldest);
            }
        }
    }
}

/// The durable inboxes of one workspace's instances.
pub struct InboxStore {
    workspace: WorkspacePaths,
    policy: SyncPolicy,
    inboxes: Mutex<HashMap<(String, String), Inbox>>,
}

impl std::fmt::Debug for InboxStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InboxStore")
            .field("workspace", &self.workspace.workspace_id())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl InboxStore {
    /// The inboxes of `workspace`, flushed per `policy` (every acceptance
    /// is flushed unless the policy is `process-crash`).
    pub fn new(workspace: WorkspacePaths, policy: SyncPolicy) -> InboxStore {
        InboxStore {
            workspace,
            policy,
            inboxes: Mutex::new(HashMap::new()),
        }
    }

    /// Stores `event` for the instance `agent:instance_key` before it is
    /// acknowledged; [`Accepted::Duplicate`] (nothing written) when the
    /// instance holds its id already or consumed it recently.
    pub fn accept(
        &self,
        agent: &str,
        instance_key: &str,
        from: &str,
        event: &AgentEvent,
    ) -> Result<Accepted, StoreError> {
        let accepted = self.with(agent, instance_key, |inbox, path, policy| {
            if inbox.holds(&event.id) {
                return Ok(Accepted::Duplicate);
            }
            let input = PendingInput {
                from: from.to_string(),
                event: event.clone(),
            };
            append(
                inbox,
                path,
                &Record::Accepted(Box::new(input.clone())),
                policy,
            )?;
            inbox.pending.push_back(input);
            Ok(Accepted::New)
        })?;
        if accepted == Accepted::Duplicate {
            self.forget_if_idle(agent, instance_key);
        }
        Ok(accepted)
    }

    /// The input `event_id` of `agent:instance_key` was refused after it
    /// was stored (its queue was full): it leaves without being
    /// remembered, so the sender's retry is accepted.
    pub fn withdraw(
        &self,
        agent: &str,
        instance_key: &str,
        event_id: &str,
    ) -> Result<(), StoreError> {
        self.with(agent, instance_key, |inbox, path, _| {
            let Some(at) = inbox.position(event_id) else {
                return Ok(());
            };
            append(
                inbox,
                path,
                &Record::Withdrawn(event_id.to_string()),
                SyncPolicy::ProcessCrash,
            )?;
            inbox.pending.remove(at);
            Ok(())
        })?;
        self.forget_if_idle(agent, instance_key);
        Ok(())
    }

    /// The input `event_id` of `agent:instance_key` left the instance (its
    /// Turn committed, or it was answered for good without one). Unknown
    /// ids are ignored.
    pub fn consumed(
        &self,
        agent: &str,
        instance_key: &str,
        event_id: &str,
    ) -> Result<(), StoreError> {
        self.with(agent, instance_key, |inbox, path, policy| {
            let Some(at) = inbox.position(event_id) else {
                return Ok(());
            };
            // Not flushed: losing this line to a power cut only makes the
            // input pending again, and its redelivery is answered from the
            // conversation, where the Turn committed.
            append(
                inbox,
                path,
                &Record::Consumed(event_id.to_string()),
                SyncPolicy::ProcessCrash,
            )?;
            inbox.pending.remove(at);
            inbox.remember(event_id.to_string());
            if inbox.pending.is_empty() && inbox.bytes > COMPACT_AFTER_BYTES {
                compact(inbox, path, policy)?;
            }
            Ok(())
        })?;
        self.forget_if_idle(agent, instance_key);
        Ok(())
    }

    /// Drops the in-memory copy (and the open file) of an inbox with
    /// nothing pending; its file has everything.
    fn forget_if_idle(&self, agent: &str, instance_key: &str) {
        let mut inboxes = self
            .inboxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = (agent.to_string(), instance_key.to_string());
        if inboxes
            .get(&key)
            .is_some_and(|inbox| inbox.pending.is_empty())
        {
            inboxes.remove(&key);
        }
    }

    /// What `agent:instance_key` holds that no Turn consumed yet, in
    /// acceptance order.
    pub fn pending(
        &self,
        agent: &str,
        instance_key: &str,
    ) -> Result<Vec<PendingInput>, StoreError> {
        let pending = self.with(agent, instance_key, |inbox, _, _| {
            Ok(inbox.pending.iter().cloned().collect())
        })?;
        self.forget_if_idle(agent, instance_key);
        Ok(pending)
    }

    /// Every instance that has an inbox file, as `(agent, instance key)`:
    /// where a starting orchestrator looks for pending inputs.
    pub fn instances(&self) -> Result<Vec<(String, String)>, StoreError> {
        let dir = self.workspace.inbox_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::io("listing", &dir, source)),
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(stem) = name.to_str().and_then(|name| name.strip_suffix(".jsonl")) else {
                continue;
            };
            let key = decode_path_component(stem)
                .and_then(|key| goondan_types::RoutingKey::split_whole(&key))
                .map(|key| (key.agent_name, key.instance_key));
            if let Some(key) = key {
                found.push(key);
            }
        }
        found.sort();
        Ok(found)
    }

    /// Runs `act` on the instance's inbox, loading it from its file first.
    fn with<T>(
        &self,
        agent: &str,
        instance_key: &str,
        act: impl FnOnce(&mut Inbox, &Path, SyncPolicy) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let path = self.workspace.inbox_file(agent, instance_key);
        let mut inboxes = self
            .inboxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let key = (agent.to_string(), instance_key.to_string());
        let inbox = match inboxes.entry(key) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => entry.insert(load(&path)?),
        };
        act(inbox, &path, self.policy)
    }
}

/// Folds an inbox file (missing means empty), dropping a torn last line.
fn load(path: &Path) -> Result<Inbox, StoreError> {
    // A torn tail is repaired (dropped) on the way: it was never
    // acknowledged.
    let content = read_jsonl_repairing(path)?;
    let mut inbox = Inbox {
        bytes: content.valid_len,
        ..Inbox::default()
    };
    for line in content.lines {
        let record: Record =
            serde_json::from_str(&line.text).map_err(|error| StoreError::CorruptLog {
                path: path.to_path_buf(),
                line: line.number,
                reason: error.to_string(),
            })?;
        match record {
            Record::Accepted(input) => inbox.pending.push_back(*input),
            Record::Consumed(event_id) => {
                inbox.pending.retain(|pending| pending.event.id != event_id);
                inbox.remember(event_id);
            }
            Record::Withdrawn(event_id) => {
                inbox.pending.retain(|pending| pending.event.id != event_id);
            }
            Record::Seen(ids) => {
                for id in ids {
                    inbox.remember(id);
                }
            }
        }
    }
    Ok(inbox)
}

/// Appends `record` to the inbox file, flushed per `policy`.
fn append(
    inbox: &mut Inbox,
    path: &Path,
    record: &Record,
    policy: SyncPolicy,
) -> Result<(), StoreError> {
    let mut line = serde_json::to_vec(record).map_err(|source| StoreError::Encode {
        what: "an inbox record",
        source,
    })?;
    line.push(b'\n');
    if inbox.file.is_none() {
        if let Some(dir) = path.parent() {
            create_dir_all(dir)?;
        }
        let created = !path.exists();
        inbox.file = Some(open_append(path)?);
        if created {
            if let Some(dir) = path.parent() {
                sync_dir(dir, policy.syncs_commits())?;
            }
        }
    }
    let file = inbox.file.as_mut().expect("opened above");
    file.write_all(&line)
        .map_err(|source| StoreError::io("appending to", path, source))?;
    sync_file(file, path, policy.syncs_commits())?;
    inbox.bytes += line.len() as u64;
    Ok(())
}

/// Replaces an inbox with nothing pending by its `seen` window alone.
fn compact(inbox: &mut Inbox, path: &Path, policy: SyncPolicy) -> Result<(), StoreError> {
    let seen: Vec<String> = inbox.seen.iter().cloned().collect();
    let mut bytes =
        serde_json::to_vec(&Record::Seen(seen)).map_err(|source| StoreError::Encode {
            what: "an inbox record",
            source,
        })?;
    bytes.push(b'\n');
    write_file_atomically(path, &bytes, policy)?;
    inbox.file = None;
    inbox.bytes = bytes.len() as u64;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StateRoot;

    fn event(id: &str) -> AgentEvent {
        let source =
            goondan_types::EventSource::new(goondan_types::EventSourceKind::Connector, "cli");
        AgentEvent {
            id: id.into(),
            input: Some(format!("input {id}")),
            ..AgentEvent::new("user.message", source)
        }
    }

    fn store(dir: &std::path::Path) -> InboxStore {
        let workspace = StateRoot::new(dir).workspace("default");
        InboxStore::new(workspace, SyncPolicy::TurnCommit)
    }

    fn ids(pending: Vec<PendingInput>) -> Vec<String> {
        pending
            .into_iter()
            .map(|pending| pending.event.id)
            .collect()
    }

    #[test]
    fn what_was_accepted_and_not_consumed_is_pending_after_a_restart_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = store(dir.path());
        for id in ["e1", "e2", "e3"] {
            assert_eq!(
                inbox.accept("a", "k", "orchestrator", &event(id)).unwrap(),
                Accepted::New
            );
        }
        inbox.consumed("a", "k", "e2").unwrap();
        drop(inbox);
        let reopened = store(dir.path());
        assert_eq!(ids(reopened.pending("a", "k").unwrap()), ["e1", "e3"]);
        assert_eq!(reopened.instances().unwrap(), [("a".into(), "k".into())]);
        assert!(reopened.pending("a", "other").unwrap().is_empty());
    }

    #[test]
    fn an_id_held_or_consumed_recently_is_a_duplicate_even_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = store(dir.path());
        inbox
            .accept("a", "k", "orchestrator", &event("e1"))
            .unwrap();
        assert_eq!(
            inbox
                .accept("a", "k", "orchestrator", &event("e1"))
                .unwrap(),
            Accepted::Duplicate
        );
        inbox.consumed("a", "k", "e1").unwrap();
        assert_eq!(
            inbox
                .accept("a", "k", "orchestrator", &event("e1"))
                .unwrap(),
            Accepted::Duplicate
        );
        drop(inbox);
        let reopened = store(dir.path());
        assert_eq!(
            reopened
                .accept("a", "k", "orchestrator", &event("e1"))
                .unwrap(),
            Accepted::Duplicate
        );
        // Another instance may hold the same id.
        assert_eq!(
            reopened
                .accept("b", "k", "orchestrator", &event("e1"))
                .unwrap(),
            Accepted::New
        );
    }

    #[test]
    fn a_torn_last_line_was_never_acknowledged_and_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = store(dir.path());
        inbox
            .accept("a", "k", "orchestrator", &event("e1"))
            .unwrap();
        let path = StateRoot::new(dir.path())
            .workspace("default")
            .inbox_file("a", "k");
        drop(inbox);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(br#"{"accepted":{"from":"orchestrator","event":{"id":"e2","#)
            .unwrap();
        let reopened = store(dir.path());
        assert_eq!(ids(reopened.pending("a", "k").unwrap()), ["e1"]);
        reopened
            .accept("a", "k", "orchestrator", &event("e3"))
            .unwrap();
        drop(reopened);
        assert_eq!(
            ids(store(dir.path()).pending("a", "k").unwrap()),
            ["e1", "e3"]
        );
    }

    #[test]
    fn a_long_inbox_with_nothing_pending_is_compacted_to_its_seen_window() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = store(dir.path());
        let body = "x".repeat(4096);
        let mut n = 0;
        let path = StateRoot::new(dir.path())
            .workspace("default")
            .inbox_file("a", "k");
        while std::fs::metadata(&path).map_or(0, |m| m.len()) <= COMPACT_AFTER_BYTES {
            let mut big = event(&format!("e{n}"));
            big.input = Some(body.clone());
            inbox.accept("a", "k", "orchestrator", &big).unwrap();
            n += 1;
        }
        for i in 0..n {
            inbox.consumed("a", "k", &format!("e{i}")).unwrap();
        }
        assert!(std::fs::metadata(&path).unwrap().len() < COMPACT_AFTER_BYTES / 4);
        drop(inbox);
        let reopened = store(dir.path());
        assert!(reopened.pending("a", "k").unwrap().is_empty());
        assert_eq!(
            reopened
                .accept("a", "k", "orchestrator", &event("e0"))
                .unwrap(),
            Accepted::Duplicate
        );
    }

    #[test]
    fn a_withdrawn_input_is_not_a_duplicate_of_its_retry() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = store(dir.path());
        inbox
            .accept("a", "k", "orchestrator", &event("e1"))
            .unwrap();
        inbox.withdraw("a", "k", "e1").unwrap();
        assert!(inbox.pending("a", "k").unwrap().is_empty());
        drop(inbox);
        let reopened = store(dir.path());
        assert!(reopened.pending("a", "k").unwrap().is_empty());
        assert_eq!(
            reopened
                .accept("a", "k", "orchestrator", &event("e1"))
                .unwrap(),
            Accepted::New
        );
    }

    #[test]
    fn an_inbox_with_nothing_pending_is_not_kept_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = store(dir.path());
        inbox
            .accept("a", "k", "orchestrator", &event("e1"))
            .unwrap();
        assert_eq!(inbox.inboxes.lock().unwrap().len(), 1);
        inbox.consumed("a", "k", "e1").unwrap();
        assert!(inbox.inboxes.lock().unwrap().is_empty());
        // The window is read back from the file.
        assert_eq!(
            inbox
                .accept("a", "k", "orchestrator", &event("e1"))
                .unwrap(),
            Accepted::Duplicate
        );
        assert!(inbox.inboxes.lock().unwrap().is_empty());
    }

    #[test]
    fn the_seen_window_forgets_the_oldest_ids() {
        let mut inbox = Inbox::default();
        for n in 0..SEEN_WINDOW + 10 {
            inbox.remember(format!("e{n}"));
        }
        assert!(!inbox.holds("e0"));
        assert!(inbox.holds(&format!("e{}", SEEN_WINDOW + 9)));
        assert_eq!(inbox.seen.len(), SEEN_WINDOW);
    }
}
