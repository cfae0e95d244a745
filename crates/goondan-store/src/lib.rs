//! Durable state of Goondan instances under the System Root: event-sourced
//! message logs, instance metadata and extension state
//! (`docs/specs/workspace.md` of the original; seed 004 A-2, A-3).
//!
//! The execution core talks to storage through two small traits,
//! [`TurnJournal`] and [`ExtensionStateStore`], each with an in-memory
//! implementation (tests, benchmarks, embedding) and an on-disk one. An
//! instance's requests for a person's decision sit behind a third,
//! [`ApprovalLog`] (on disk, [`ApprovalStore`]). A cluster implements all
//! three on its own log (`goondan-cluster`). This crate knows nothing
//! about pipelines or models.
//!
//! On disk, everything starts from the System Root ([`StateRootSources`],
//! [`StateRoot`]) and a workspace ([`WorkspacePaths`]). An AgentProcess
//! opens its instance with [`InstanceStore::open`], which takes the
//! instance's single-writer lock and hands out a [`FileJournal`], a
//! [`FileExtensionState`], a [`RuntimeEventLog`] and the
//! [`MetadataFile`]:
//!
//! ```no_run
//! use goondan_store::{InstanceStore, StateRootSources, TurnJournal};
//!
//! let root = StateRootSources::from_process_env(None).resolve()?;
//! let store = InstanceStore::new(root.workspace("main:prod"));
//! let mut instance = store.open("coder", "user:123")?;
//! let conversation = instance.journal_mut().load()?;
//! # Ok::<(), goondan_store::StoreError>(())
//! ```
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod active;
mod approval_messages;
mod approvals;
#[cfg(feature = "conformance")]
pub mod conformance;
mod durability;
mod edit;
pub mod error;
mod extension_snapshots;
mod extension_state;
pub mod fault;
pub mod follow;
mod fork_rewind;
mod inbox;
mod instance;
mod journal;
mod jsonl;
mod lock;
pub mod memory;
mod metadata;
pub mod owner_only;
pub mod paths;
mod runtime_events;
mod swarm_events;
pub mod tail;
mod turns;
mod usage;

pub use active::{ActiveSwarm, WorkspaceIdentity};
pub use approval_messages::{ApprovalMessages, PostedApproval};
pub use approvals::{
    closed_by_cancel, undecided_approvals, workspace_approvals, ApprovalLog, ApprovalStore,
    Decided, OpenApproval, OpenApprovals, WorkspaceApprovals, CANCELLED_BY, MAX_REMEMBERED_CANCELS,
};
pub use durability::SyncPolicy;
pub use edit::{edited_message, EditRecord, EditReport, EditTarget, EDIT_METADATA_KEY};
pub use error::StoreError;
pub use extension_state::{encode_state, extension_state_files, FileExtensionState};
pub use fork_rewind::{
    fork_key, new_archive_id, ArchiveSummary, ArchivedTurns, ExtensionStateSource, ForkReport,
    RewindManifest, RewindReport, TurnPoint,
};
pub use inbox::{Accepted, InboxStore, PendingInput, SEEN_WINDOW};
pub use instance::{Instance, InstanceParts, InstanceStore, InstanceSummary, MetadataFile};
pub use journal::{encode_event_line, encode_messages, FileJournal};
pub use memory::{MemoryExtensionState, MemoryJournal};
pub use metadata::{InstanceMetadata, InstanceStatus};
pub use paths::{InstancePaths, StateRoot, StateRootSources, WorkspacePaths};
pub use runtime_events::{
    read_runtime_events, read_runtime_events_within, RuntimeEventFilter, RuntimeEventLog,
    RuntimeEventPage, RuntimeEventRecord,
};
pub use swarm_events::{
    append_swarm_event, read_swarm_events, read_swarm_events_to, swarm_events_log, SwarmEventRecord,
};
pub use turns::{
    read_turn_history, turn_starts, TurnHistory, TurnOutcome, TurnRecord, TurnRef, TurnStart,
    MAX_INPUT_CHARS,
};
pub use usage::{SwarmUsage, SwarmUsageTally, UsageTotals};

use goondan_types::{AgentEvent, JsonValue, Message, MessageEvent};

/// Where a conversation's messages live between and during Turns.
///
/// Call order for one Turn: [`TurnJournal::load`] once when the instance
/// starts, then for each Turn any number of [`TurnJournal::record_event`]
/// calls (one per emitted event, in emission order), then exactly one
/// [`TurnJournal::commit_turn`] after every turn middleware has returned.
/// A Turn that fails calls nothing more: its recorded events stay pending
/// and come back from the next `load`.
///
/// When `load` returns pending events, fold them before the next Turn
/// records anything, by calling `commit_turn(pending_turn_id, pending,
/// base + SUM(pending))` (or by re-running that Turn under the same turn
/// id). A later Turn recording on top of uncommitted events of an earlier
/// one abandons them: a store may set them aside rather than replay two
/// Turns' events together.
pub trait TurnJournal: Send {
    /// The committed base plus the pending events of an interrupted Turn,
    /// in emission order.
    fn load(&mut self) -> Result<LoadedConversation, StoreError>;

    /// Makes one emitted event durable before the Turn goes on.
    fn record_event(&mut self, turn_id: &str, event: &MessageEvent) -> Result<(), StoreError>;

    /// Folds the Turn's events into the base. `next_messages` is
    /// `base + SUM(events)`; `events` lets the store choose between a delta
    /// append (only appends) and an atomic rewrite. `context` is what the
    /// Turn consumed and answered: a store that can keep it in the same
    /// atomic commit does (see [`CommitContext`]); a fold of recovered
    /// events passes `CommitContext::default()`.
    fn commit_turn(
        &mut self,
        turn_id: &str,
        events: &[MessageEvent],
        next_messages: &[Message],
        context: &CommitContext,
    ) -> Result<(), StoreError>;

    /// Confirms, before a Turn starts, that no other writer has written to
    /// the instance since this one loaded it. A store whose single writer
    /// is held by a lock for the journal's whole life (the file journal)
    /// always can; one that fences earlier writers instead (the cluster's
    /// log) answers with an error once it was taken over, and the process
    /// must then stop instead of running the Turn on a stale history.
    fn confirm_writer(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}

/// What a Turn's commit records besides its messages: which input it
/// consumed and what it answered, so that whoever finds the commit without
/// the input's acknowledgement can finish the delivery without running the
/// Turn again (the transactional outbox of cluster mode).
///
/// Only a store whose inputs come from a sequenced inbox has a use for it
/// (the cluster's log). On a single host the orchestrator hands an input
/// over again only to a new process of the same instance, which finds the
/// answer by the event's id in the conversation itself, so the file and
/// memory journals keep neither field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommitContext {
    /// The inbox sequence of the input the Turn consumed (its
    /// `AgentEvent::inbox_seq`); `None` when the input had none.
    pub inbox_seq: Option<u64>,
    /// The answers the Turn sent, in the order it sent them.
    pub outbox: Vec<OutboxMessage>,
}

/// One answer a Turn sent: the event, and the routing key it went to
/// (`orchestrator` for the orchestrator's own requests).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    /// Where the answer went.
    pub to: String,
    /// The answer, as sent.
    pub event: AgentEvent,
}

/// A conversation as read back from storage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadedConversation {
    /// The committed messages.
    pub base: Vec<Message>,
    /// Events of a Turn that did not commit, to replay on top of `base`.
    pub pending_events: Vec<MessageEvent>,
    /// The Turn those pending events belong to.
    pub pending_turn_id: Option<String>,
    /// Problems recovered from (a torn last line, for example).
    pub warnings: Vec<String>,
}

/// JSON state per extension of one instance.
pub trait ExtensionStateStore: Send {
    /// The saved state of `extension_name`, if any.
    fn load(&mut self, extension_name: &str) -> Result<Option<JsonValue>, StoreError>;

    /// Persists `value` atomically as the state of `extension_name`.
    fn save(&mut self, extension_name: &str, value: &JsonValue) -> Result<(), StoreError>;

    /// Called once after the saves of Turn `turn_id` (also a failed or
    /// cancelled one): a store that keeps per-Turn snapshots of extension
    /// state records one here when a save of this Turn changed something
    /// (the file store's `extensions/snapshots.jsonl`, read by fork and
    /// rewind). Unchanged state costs nothing; the default keeps none.
    fn end_turn(&mut self, turn_id: &str) -> Result<(), StoreError> {
        let _ = turn_id;
        Ok(())
    }
}
