//! The requests for a person's decision an instance holds, behind one
//! seam ([`ApprovalLog`]) with two homes: [`ApprovalStore`], the
//! instance's `approvals.jsonl` in its folder on one host, and the
//! instance's log in a cluster (`goondan-cluster`'s `ClusterApprovals`),
//! so a pending request outlives every process (a kill -9 of the agent or
//! the orchestrator, `gdn stop` and `gdn run`) and, in a cluster, the
//! instance's move to another host. [`OpenApprovals`] is the in-memory
//! fold both keep.
//!
//! The file is written only by the instance's single writer (the
//! AgentProcess holding its lock), one JSON line per record, each flushed
//! per the [`SyncPolicy`] before anything acts on it:
//!
//! * `{"requested": <ApprovalRequest>}`: a Turn waits for a decision;
//! * `{"decided": <ApprovalDecision>}`: it was decided (the Turn may not
//!   have acted on it yet);
//! * `{"closed": "<id>"}`: the Turn acted on it (the tool ran, or its
//!   refusal was recorded as the call's result), so a resumed Turn never
//!   asks or acts twice.
//!
//! A request whose Turn was cancelled is decided by [`CANCELLED_BY`] (a
//! refusal saying so) and closed at once: it is listed no more, and a
//! decision on it is told [`Decided::Closed`] for as long as the fold
//! remembers it ([`MAX_REMEMBERED_CANCELS`] per instance, and until the
//! file is emptied).
//!
//! Readers other than the writer ([`undecided_approvals`], or
//! [`workspace_approvals`] for every instance of a workspace) read at most
//! [`MAX_READ_BYTES`] and skip a torn last line. Once nothing is open and
//! the file passed [`COMPACT_AFTER_BYTES`], it is emptied: the decisions
//! themselves stay in the conversation (the tool result of each gated
//! call records who decided what) and in the runtime events.

use crate::durability::{create_dir_all, open_append, sync_dir, sync_file, SyncPolicy};
use crate::paths::{InstancePaths, WorkspacePaths};
use crate::StoreError;
use goondan_types::{ApprovalDecision, ApprovalRequest};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The most a reader takes of an approvals file.
const MAX_READ_BYTES: u64 = 4 * 1024 * 1024;
/// A file past this size with nothing open is emptied.
const COMPACT_AFTER_BYTES: u64 = 64 * 1024;
/// How many requests closed by a cancel an instance's fold remembers, so
/// a late decision on one is told so rather than "not found".
pub const MAX_REMEMBERED_CANCELS: usize = 256;

/// Who decided a request whose Turn was cancelled (as `timeout` decides
/// one whose deadline passed): the decision is a refusal, recorded and
/// closed at once.
pub const CANCELLED_BY: &str = "cancel";

/// What a decision on the request `id`, closed when its Turn was
/// cancelled, is told (`E_APPROVAL_CLOSED`), wherever it was made.
pub fn closed_by_cancel(id: &str) -> goondan_types::ErrorBody {
    goondan_types::ErrorBody {
        code: "E_APPROVAL_CLOSED".into(),
        message: format!("approval {id} was closed: its Turn was cancelled"),
        suggestion: Some(
            "nothing waits for this decision; send the input again to start a new Turn".into(),
        ),
    }
}

/// What recording a decision did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decided {
    /// It is the request's decision now.
    Recorded,
    /// No open request has its id, or it was decided already (the first
    /// decision stands).
    NotWaiting,
    /// The request was closed when its Turn was cancelled: nothing waits
    /// for a decision on it.
    Cancelled,
}

/// One line of an approvals file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Record {
    Requested(Box<ApprovalRequest>),
    Decided(Box<ApprovalDecision>),
    Closed(String),
}

/// A request not closed yet, with its decision once there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenApproval {
    /// What was asked.
    pub request: ApprovalRequest,
    /// What was decided, if anything yet.
    pub decision: Option<ApprovalDecision>,
}

/// Where an instance's requests for a person's decision are kept, for
/// its single writer: the agent's side of asking a person uses nothing
/// else, on one host ([`ApprovalStore`]) or in a cluster (the instance's
/// log, fenced by its owner's claim like every other write to it).
///
/// Every write is durable when it returns, and nothing acts on a record
/// before it is. A request is open from [`ApprovalLog::request`] until
/// [`ApprovalLog::close`]; it is decided at most once in between.
pub trait ApprovalLog: Send + Sync + std::fmt::Debug {
    /// The open request about `key`, with its decision once there is one.
    fn by_key(&self, key: &str) -> Result<Option<OpenApproval>, StoreError>;

    /// True when an open request is about the tool call `call_id`: its
    /// gate's, or a question asked from inside it.
    fn about_call(&self, call_id: &str) -> Result<bool, StoreError>;

    /// Records `request` as asked.
    fn request(&self, request: &ApprovalRequest) -> Result<(), StoreError>;

    /// Records `decision` on the open request with its id, and says
    /// whether it did ([`Decided`]).
    fn decide(&self, decision: &ApprovalDecision) -> Result<Decided, StoreError>;

    /// The open requests asked while consuming the input `event_id`, in
    /// the order asked.
    fn of_event(&self, event_id: &str) -> Result<Vec<OpenApproval>, StoreError>;

    /// Closes the request `id`: its Turn acts on the decision now, and a
    /// crash from here on must not make it act again. Closing a request
    /// that is not open does nothing.
    fn close(&self, id: &str) -> Result<(), StoreError>;
}

/// The requests of one instance not closed yet, in the order asked: what
/// every [`ApprovalLog`] folds its records into.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpenApprovals {
    open: Vec<OpenApproval>,
    /// The ids of the latest requests closed by a cancel, oldest first.
    cancelled: std::collections::VecDeque<String>,
}

impl OpenApprovals {
    /// True when an open request is about the tool call `call_id` (see
    /// [`goondan_types::approval::is_about_call`]).
    pub fn about_call(&self, call_id: &str) -> bool {
        self.open
            .iter()
            .any(|open| goondan_types::approval::is_about_call(&open.request.key, call_id))
    }

    /// The open request about `key`.
    pub fn by_key(&self, key: &str) -> Option<&OpenApproval> {
        self.open.iter().find(|open| open.request.key == key)
    }

    /// The open request `id` when it is not decided yet: the one a
    /// decision with that id decides.
    pub fn undecided(&self, id: &str) -> Option<&OpenApproval> {
        self.open
            .iter()
            .find(|open| open.request.id == id && open.decision.is_none())
    }

    /// The open request `id`.
    pub fn by_id(&self, id: &str) -> Option<&OpenApproval> {
        self.open.iter().find(|open| open.request.id == id)
    }

    /// `request` was asked.
    pub fn asked(&mut self, request: ApprovalRequest) {
        self.open.push(OpenApproval {
            request,
            decision: None,
        });
    }

    /// What a decision on `id` would do now.
    pub fn would_decide(&self, id: &str) -> Decided {
        if self.undecided(id).is_some() {
            Decided::Recorded
        } else if self.cancelled.iter().any(|cancelled| cancelled == id) {
            Decided::Cancelled
        } else {
            Decided::NotWaiting
        }
    }

    /// The open requests asked while consuming the input `event_id`.
    pub fn of_event<'a>(&'a self, event_id: &'a str) -> impl Iterator<Item = &'a OpenApproval> {
        self.open
            .iter()
            .filter(move |open| open.request.event_id == event_id)
    }

    /// `decision` was recorded; false when it decided nothing (see
    /// [`OpenApprovals::undecided`]).
    pub fn decided(&mut self, decision: ApprovalDecision) -> bool {
        match self
            .open
            .iter_mut()
            .find(|open| open.request.id == decision.id && open.decision.is_none())
        {
            Some(open) => {
                open.decision = Some(decision);
                true
            }
            None => false,
        }
    }

    /// `state` is what a request stands at now: it replaces what was known
    /// of the request with its id, or joins the end when none was.
    pub fn set(&mut self, state: OpenApproval) {
        match self
            .open
            .iter_mut()
            .find(|open| open.request.id == state.request.id)
        {
            Some(open) => *open = state,
            None => self.open.push(state),
        }
    }

    /// The request `id` was closed; one [`CANCELLED_BY`] decided is
    /// remembered as cancelled.
    pub fn closed(&mut self, id: &str) {
        let Some(at) = self.open.iter().position(|open| open.request.id == id) else {
            return;
        };
        let closed = self.open.remove(at);
        if closed
            .decision
            .is_some_and(|decision| decision.by == CANCELLED_BY)
        {
            if self.cancelled.len() == MAX_REMEMBERED_CANCELS {
                self.cancelled.pop_front();
            }
            self.cancelled.push_back(closed.request.id);
        }
    }

    /// The ids of the latest requests closed by a cancel, oldest first.
    pub fn cancelled(&self) -> impl Iterator<Item = &str> {
        self.cancelled.iter().map(String::as_str)
    }

    /// Every open request, in the order asked.
    pub fn iter(&self) -> impl Iterator<Item = &OpenApproval> {
        self.open.iter()
    }

    /// True when no request is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// The approvals of one instance, for its single writer.
#[derive(Debug)]
pub struct ApprovalStore {
    path: PathBuf,
    policy: SyncPolicy,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    open: OpenApprovals,
    file: Option<File>,
    bytes: u64,
}

impl ApprovalStore {
    /// The approvals of the instance at `paths`, read once now (a torn
    /// last line, never acted on, is dropped).
    pub fn open(paths: &InstancePaths, policy: SyncPolicy) -> Result<ApprovalStore, StoreError> {
        let path = paths.approvals_file();
        let (open, bytes) = read_open(&path)?;
        Ok(ApprovalStore {
            path,
            policy,
            state: Mutex::new(State {
                open,
                file: None,
                bytes,
            }),
        })
    }

    /// Every request not closed, in the order asked.
    pub fn open_approvals(&self) -> Vec<OpenApproval> {
        self.lock().open.iter().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic mid-append leaves at worst a torn line, which readers
        // drop; the in-memory list is updated only after the write.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn append(&self, state: &mut State, record: &Record) -> Result<(), StoreError> {
        let mut line = serde_json::to_vec(record).map_err(|source| StoreError::Encode {
            what: "an approval record",
            source,
        })?;
        line.push(b'\n');
        if state.file.is_none() {
            if let Some(dir) = self.path.parent() {
                create_dir_all(dir)?;
            }
            let created = !self.path.exists();
            state.file = Some(open_append(&self.path)?);
            if created {
                if let Some(dir) = self.path.parent() {
                    sync_dir(dir, self.policy.syncs_commits())?;
                }
            }
        }
        let file = state.file.as_mut().expect("opened above");
        file.write_all(&line)
            .map_err(|source| StoreError::io("appending to", &self.path, source))?;
        sync_file(file, &self.path, self.policy.syncs_commits())?;
        state.bytes += line.len() as u64;
        Ok(())
    }
}

impl ApprovalLog for ApprovalStore {
    fn by_key(&self, key: &str) -> Result<Option<OpenApproval>, StoreError> {
        Ok(self.lock().open.by_key(key).cloned())
    }

    fn about_call(&self, call_id: &str) -> Result<bool, StoreError> {
        Ok(self.lock().open.about_call(call_id))
    }

    fn request(&self, request: &ApprovalRequest) -> Result<(), StoreError> {
        let mut state = self.lock();
        self.append(&mut state, &Record::Requested(Box::new(request.clone())))?;
        state.open.asked(request.clone());
        Ok(())
    }

    fn decide(&self, decision: &ApprovalDecision) -> Result<Decided, StoreError> {
        let mut state = self.lock();
        let outcome = state.open.would_decide(&decision.id);
        if outcome == Decided::Recorded {
            self.append(&mut state, &Record::Decided(Box::new(decision.clone())))?;
            state.open.decided(decision.clone());
        }
        Ok(outcome)
    }

    fn of_event(&self, event_id: &str) -> Result<Vec<OpenApproval>, StoreError> {
        Ok(self.lock().open.of_event(event_id).cloned().collect())
    }

    fn close(&self, id: &str) -> Result<(), StoreError> {
        let mut state = self.lock();
        if state.open.by_id(id).is_none() {
            return Ok(());
        }
        self.append(&mut state, &Record::Closed(id.to_string()))?;
        state.open.closed(id);
        if state.open.is_empty() && state.bytes > COMPACT_AFTER_BYTES {
            state.file = None;
            crate::durability::write_file_atomically(&self.path, b"", self.policy)?;
            state.bytes = 0;
        }
        Ok(())
    }
}

/// The requests of the instance at `paths` that wait for a decision, in
/// the order asked, for a reader that is not its writer (`gdn approvals`,
/// the chat, MCP progress, the Studio): at most [`MAX_READ_BYTES`] read, a
/// torn last line skipped.
pub fn undecided_approvals(paths: &InstancePaths) -> Result<Vec<ApprovalRequest>, StoreError> {
    let (open, _) = read_open(&paths.approvals_file())?;
    Ok(undecided(&open))
}

fn undecided(open: &OpenApprovals) -> Vec<ApprovalRequest> {
    open.iter()
        .filter(|open| open.decision.is_none())
        .map(|open| open.request.clone())
        .collect()
}

/// The requests that wait for a decision across one workspace, and the
/// approvals files that could not be read.
#[derive(Debug, Default)]
pub struct WorkspaceApprovals {
    /// Every undecided request, oldest first.
    pub requests: Vec<ApprovalRequest>,
    /// The ids of the requests closed by a cancel that the files still
    /// remember (see [`MAX_REMEMBERED_CANCELS`]), so a decision on one is
    /// told why nothing waits for it.
    pub cancelled: Vec<String>,
    /// One error per instance whose file could not be read: a reader
    /// decides whether one bad file fails it (`gdn approvals`) or is only
    /// reported (a chat connector posting what waits).
    pub unreadable: Vec<StoreError>,
}

/// The undecided requests of every instance of `workspace` that holds an
/// approvals file, oldest first (see [`undecided_approvals`]). Only a
/// missing or unreadable `instances/` folder fails the whole read.
pub fn workspace_approvals(workspace: &WorkspacePaths) -> Result<WorkspaceApprovals, StoreError> {
    let instances = workspace.instances_dir();
    let entries = match std::fs::read_dir(&instances) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(WorkspaceApprovals::default())
        }
        Err(source) => return Err(StoreError::io("listing", &instances, source)),
    };
    let mut found = WorkspaceApprovals::default();
    for entry in entries.filter_map(Result::ok) {
        let paths = InstancePaths::from_dir(entry.path());
        if !paths.approvals_file().exists() {
            continue;
        }
        match read_open(&paths.approvals_file()) {
            Ok((open, _)) => {
                found.requests.extend(undecided(&open));
                found.cancelled.extend(open.cancelled().map(str::to_string));
            }
            Err(error) => found.unreadable.push(error),
        }
    }
    found
        .requests
        .sort_by(|a, b| a.requested_at.cmp(&b.requested_at));
    Ok(found)
}

fn read_open(path: &Path) -> Result<(OpenApprovals, u64), StoreError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok((OpenApprovals::default(), 0))
        }
        Err(source) => return Err(StoreError::io("opening", path, source)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|source| StoreError::io("reading", path, source))?;
    let size = bytes.len() as u64;
    let mut open = OpenApprovals::default();
    // Only newline-terminated lines count: a torn last line was never
    // acted on.
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    for (index, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record: Record =
            serde_json::from_slice(line).map_err(|error| StoreError::CorruptLog {
                path: path.to_path_buf(),
                line: index + 1,
                reason: error.to_string(),
            })?;
        match record {
            Record::Requested(request) => open.asked(*request),
            Record::Decided(decision) => {
                open.decided(*decision);
            }
            Record::Closed(id) => open.closed(&id),
        }
    }
    Ok((open, size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::Verdict;
    use serde_json::json;

    fn request(id: &str, key: &str) -> ApprovalRequest {
        ApprovalRequest {
            id: id.into(),
            key: key.into(),
            agent: "coder".into(),
            instance_key: "default".into(),
            tool: Some("bash__exec".into()),
            arguments: json!({"command": "ls"}),
            question: None,
            turn_id: "turn_1".into(),
            event_id: "evt_1".into(),
            requested_at: "2026-11-27T00:00:00.000Z".into(),
            deadline: None,
            on_timeout: Verdict::Deny,
            deciders: vec!["operator".into()],
        }
    }

    fn decision(id: &str, verdict: Verdict) -> ApprovalDecision {
        ApprovalDecision {
            id: id.into(),
            verdict,
            arguments: None,
            reason: Some("looks fine".into()),
            by: "cli:test".into(),
            decided_at: "2026-11-27T00:00:01.000Z".into(),
        }
    }

    #[test]
    fn requests_and_decisions_survive_a_reopen_and_close_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let paths = InstancePaths::from_dir(dir.path());
        let store = ApprovalStore::open(&paths, SyncPolicy::TurnCommit).unwrap();
        store.request(&request("apv_1", "call_1")).unwrap();
        store.request(&request("apv_2", "call_2")).unwrap();
        let decided = |id, verdict| store.decide(&decision(id, verdict)).unwrap();
        assert_eq!(decided("apv_1", Verdict::Approve), Decided::Recorded);
        // The first decision stands; an unknown id decides nothing.
        assert_eq!(decided("apv_1", Verdict::Deny), Decided::NotWaiting);
        assert_eq!(decided("apv_9", Verdict::Deny), Decided::NotWaiting);
        drop(store);

        let store = ApprovalStore::open(&paths, SyncPolicy::TurnCommit).unwrap();
        let open = store.open_approvals();
        assert_eq!(open.len(), 2);
        assert_eq!(
            open[0].decision.as_ref().map(|decision| decision.verdict),
            Some(Verdict::Approve)
        );
        assert_eq!(open[1].decision, None);
        assert_eq!(store.by_key("call_2").unwrap().unwrap().request.id, "apv_2");
        store.close("apv_1").unwrap();
        assert_eq!(undecided_approvals(&paths).unwrap().len(), 1);
        assert!(store.by_key("call_1").unwrap().is_none());
    }

    #[test]
    fn a_torn_last_line_is_dropped_and_a_corrupt_one_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let paths = InstancePaths::from_dir(dir.path());
        let store = ApprovalStore::open(&paths, SyncPolicy::ProcessCrash).unwrap();
        store.request(&request("apv_1", "call_1")).unwrap();
        drop(store);
        let file = paths.approvals_file();
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.extend_from_slice(b"{\"closed\":\"apv_");
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(undecided_approvals(&paths).unwrap().len(), 1);

        std::fs::write(&file, b"not json\n").unwrap();
        let error = undecided_approvals(&paths).unwrap_err();
        assert!(error.to_string().contains("line 1"), "{error}");
    }

    #[test]
    fn a_large_file_with_nothing_open_is_emptied() {
        let dir = tempfile::tempdir().unwrap();
        let paths = InstancePaths::from_dir(dir.path());
        let store = ApprovalStore::open(&paths, SyncPolicy::ProcessCrash).unwrap();
        let size = || std::fs::metadata(paths.approvals_file()).map_or(0, |m| m.len());
        let mut emptied = false;
        for n in 0..400 {
            store
                .request(&request(&format!("apv_{n}"), "call"))
                .unwrap();
            let before = size();
            store.close(&format!("apv_{n}")).unwrap();
            if size() == 0 {
                assert!(
                    before > COMPACT_AFTER_BYTES - 1024,
                    "emptied early at {before}"
                );
                emptied = true;
            }
        }
        assert!(emptied, "never emptied");
        store.request(&request("apv_last", "call")).unwrap();
        assert_eq!(undecided_approvals(&paths).unwrap().len(), 1);
    }
    #[test]
    fn a_workspace_lists_what_waits_oldest_first_and_reports_a_bad_file() {
        let root = tempfile::tempdir().unwrap();
        let workspace = crate::StateRoot::new(root.path()).workspace("default");
        assert!(workspace_approvals(&workspace).unwrap().requests.is_empty());
        let later = workspace.instance("coder", "b");
        let store = ApprovalStore::open(&later, SyncPolicy::ProcessCrash).unwrap();
        let mut second = request("apv_2", "call_2");
        second.requested_at = "2026-11-27T00:00:09.000Z".into();
        store.request(&second).unwrap();
        let earlier = workspace.instance("coder", "a");
        let store = ApprovalStore::open(&earlier, SyncPolicy::ProcessCrash).unwrap();
        store.request(&request("apv_1", "call_1")).unwrap();
        store.request(&request("apv_3", "call_3")).unwrap();
        assert_eq!(
            store.decide(&decision("apv_3", Verdict::Deny)).unwrap(),
            Decided::Recorded
        );
        let broken = workspace.instance("coder", "c");
        std::fs::create_dir_all(broken.dir()).unwrap();
        std::fs::write(broken.approvals_file(), b"not json\n").unwrap();

        let found = workspace_approvals(&workspace).unwrap();
        let ids: Vec<&str> = found.requests.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["apv_1", "apv_2"]);
        assert_eq!(found.unreadable.len(), 1);
        assert_eq!(found.unreadable[0].code(), "E_STORE_CORRUPT_LOG");
    }

    #[test]
    fn a_request_closed_by_a_cancel_is_remembered_as_cancelled() {
        let root = tempfile::tempdir().unwrap();
        let workspace = crate::StateRoot::new(root.path()).workspace("default");
        let paths = workspace.instance("coder", "a");
        let store = ApprovalStore::open(&paths, SyncPolicy::ProcessCrash).unwrap();
        store.request(&request("apv_1", "call_1")).unwrap();
        let mut other = request("apv_2", "call_2");
        other.event_id = "evt_2".into();
        store.request(&other).unwrap();
        let of_event: Vec<String> = store
            .of_event("evt_1")
            .unwrap()
            .into_iter()
            .map(|open| open.request.id)
            .collect();
        assert_eq!(of_event, ["apv_1"]);
        let mut cancel = decision("apv_1", Verdict::Deny);
        cancel.by = CANCELLED_BY.into();
        assert_eq!(store.decide(&cancel).unwrap(), Decided::Recorded);
        store.close("apv_1").unwrap();
        // A closed request decided by anyone else is simply gone.
        store.decide(&decision("apv_2", Verdict::Approve)).unwrap();
        store.close("apv_2").unwrap();
        drop(store);

        let store = ApprovalStore::open(&paths, SyncPolicy::ProcessCrash).unwrap();
        let decided = |id| store.decide(&decision(id, Verdict::Approve)).unwrap();
        assert_eq!(decided("apv_1"), Decided::Cancelled);
        assert_eq!(decided("apv_2"), Decided::NotWaiting);
        let found = workspace_approvals(&workspace).unwrap();
        assert!(found.requests.is_empty());
        assert_eq!(found.cancelled, ["apv_1"]);
    }

    #[test]
    fn only_the_latest_cancels_are_remembered() {
        let mut open = OpenApprovals::default();
        for n in 0..=MAX_REMEMBERED_CANCELS {
            let id = format!("apv_{n}");
            open.asked(request(&id, &format!("call_{n}")));
            let mut cancel = decision(&id, Verdict::Deny);
            cancel.by = CANCELLED_BY.into();
            assert!(open.decided(cancel));
            open.closed(&id);
        }
        assert_eq!(open.cancelled().count(), MAX_REMEMBERED_CANCELS);
        assert_eq!(open.would_decide("apv_0"), Decided::NotWaiting);
        assert_eq!(open.would_decide("apv_1"), Decided::Cancelled);
    }
}
