//! [`ClusterJournal`], [`ClusterExtensionState`] and [`ClusterApprovals`]:
//! the store traits of `goondan-store` on one instance's log in
//! `GDN_CONV`, for an AgentProcess whose instance lives in the cluster.
//!
//! The traits are synchronous and the agent calls them from inside its
//! tokio runtime (possibly a current-thread one), so the NATS client never
//! runs on the caller's runtime: each journal has a thread of its own with
//! a current-thread runtime, and a call sends a command there and waits on
//! a plain channel for the answer. Blocking the calling thread this way is
//! what the file store's synchronous writes do too; no runtime is ever
//! entered twice.
//!
//! Semantics follow [`goondan_store::FileJournal`]: `record_event` returns
//! once the event is on a quorum; `commit_turn` publishes the Turn's
//! commit, the atomic commit point (an `append` commit when the Turn only
//! appended after an intact base, a `rewrite` carrying the whole base
//! otherwise); everything after the last commit is pending on the next
//! open, and only the latest Turn's events are. Unlike the file journal,
//! the commit also keeps the [`goondan_store::CommitContext`]: the inbox
//! cursor (carried over by a commit whose Turn consumed no sequenced input)
//! and the Turn's outbox, which [`crate::cursor::last_commit`] reads back
//! for the host. Every
//! [`ClusterJournal::with_snapshot_every`] commits, and after every
//! rewrite, the base goes to `gdn-snap` and older records are purged.
//!
//! Opening publishes a `claim`, which fences every earlier writer of the
//! instance: their next write fails `E_STORE_FENCED`, writes nothing, and
//! so does everything they try after it.
//!
//! The instance's requests for a person's decision are records of the
//! same log (`<prefix>.apv.<id>`, each the whole state of one request),
//! written under the same claim: a request asked on one host is found by
//! the Turn that resumes on the next, and a decision is recorded only by
//! the instance's current owner. A snapshot does not hold them; before
//! its purge the writer writes the open ones again (see
//! [`crate::record`]).

use crate::conversation::{appended_by, ConversationLog, Replay, SnapshotState};
use crate::error::ClusterError;
use crate::record::{
    ApprovalBody, ClaimBody, CommitMode, EventBody, ExtensionBody, OutboxBody, RecordKind,
    RECORD_VERSION,
};
use crate::subject::InstanceAddress;
use crate::{Cluster, ClusterOptions, ClusterUrls};
use goondan_store::{
    ApprovalLog, CommitContext, Decided, ExtensionStateStore, LoadedConversation, OpenApproval,
    OpenApprovals, StoreError, TurnJournal,
};
use goondan_types::{ApprovalDecision, ApprovalRequest, JsonValue, Message, MessageEvent};
use std::collections::BTreeMap;
use std::sync::mpsc as std_mpsc;
use tokio::sync::mpsc;

/// Commits between two snapshots unless told otherwise.
pub const DEFAULT_SNAPSHOT_EVERY: u64 = 64;

/// How many times `open` reads and claims again when another claim wins
/// the race.
const CLAIM_ATTEMPTS: usize = 20;

type Reply<T> = std_mpsc::SyncSender<Result<T, StoreError>>;

/// What the worker thread is asked to do.
enum Command {
    Load(Reply<LoadedConversation>),
    Record {
        turn_id: String,
        event: Box<MessageEvent>,
        reply: Reply<()>,
    },
    Commit {
        turn_id: String,
        all_appends: bool,
        next_messages: Vec<Message>,
        context: CommitContext,
        reply: Reply<()>,
    },
    LoadExtension {
        name: String,
        reply: Reply<Option<JsonValue>>,
    },
    SaveExtension {
        name: String,
        value: JsonValue,
        reply: Reply<()>,
    },
    ConfirmWriter(Reply<()>),
    ApprovalByKey {
        key: String,
        reply: Reply<Option<OpenApproval>>,
    },
    ApprovalAboutCall {
        call_id: String,
        reply: Reply<bool>,
    },
    Ask {
        request: Box<ApprovalRequest>,
        reply: Reply<()>,
    },
    Decide {
        decision: Box<ApprovalDecision>,
        reply: Reply<Decided>,
    },
    ApprovalsOfEvent {
        event_id: String,
        reply: Reply<Vec<OpenApproval>>,
    },
    CloseApproval {
        id: String,
        reply: Reply<()>,
    },
    Observe(Vec<u8>),
    SnapshotEvery(u64),
}

/// The sending side shared by a journal and its extension state.
#[derive(Debug, Clone)]
struct WorkerHandle {
    commands: mpsc::UnboundedSender<Command>,
}

impl WorkerHandle {
    fn call<T>(&self, command: impl FnOnce(Reply<T>) -> Command) -> Result<T, StoreError> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        let stopped = || {
            StoreError::from(ClusterError::Request {
                what: "the journal's cluster thread".to_string(),
                reason: "it stopped".to_string(),
            })
        };
        self.commands.send(command(reply)).map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }
}

/// One instance's conversation log in the cluster, as a
/// [`goondan_store::TurnJournal`].
#[derive(Debug)]
pub struct ClusterJournal {
    worker: WorkerHandle,
    prefix: String,
}

/// Publishes an instance's runtime events to `GDN_OBS`, for `gdn logs
/// --cluster` (see [`crate::directory::observations`]).
#[derive(Debug, Clone)]
pub struct ClusterObserver {
    worker: WorkerHandle,
}

impl ClusterObserver {
    /// Publishes one runtime event (its JSON line) without waiting.
    pub fn publish(&self, line: Vec<u8>) {
        // After the journal's thread stopped there is no one to tell.
        let _ = self.worker.commands.send(Command::Observe(line));
    }
}

/// The extension state of the instance of a [`ClusterJournal`], fenced by
/// the same claim.
#[derive(Debug, Clone)]
pub struct ClusterExtensionState {
    worker: WorkerHandle,
}

/// The requests for a person's decision of the instance of a
/// [`ClusterJournal`], in its log under the same claim.
#[derive(Debug, Clone)]
pub struct ClusterApprovals {
    worker: WorkerHandle,
}

impl ClusterJournal {
    /// Connects to `urls`, claims the instance at `address` for `owner`
    /// (fencing every earlier writer) and reads its log. Blocks the calling
    /// thread until done; safe to call from inside any runtime. The
    /// cluster's layout must exist ([`crate::layout::ensure`]).
    pub fn open(
        urls: &ClusterUrls,
        options: ClusterOptions,
        address: InstanceAddress,
        owner: &str,
    ) -> Result<ClusterJournal, ClusterError> {
        let (commands, receiver) = mpsc::unbounded_channel();
        let (opened, opened_answer) = std_mpsc::sync_channel(1);
        let urls = urls.clone();
        let owner = owner.to_string();
        let prefix = address.conversation_prefix();
        std::thread::Builder::new()
            .name("gdn-journal".to_string())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        let _ = opened.send(Err(ClusterError::Request {
                            what: "a runtime for the journal".to_string(),
                            reason: error.to_string(),
                        }));
                        return;
                    }
                };
                runtime.block_on(async move {
                    match Writer::open(&urls, options, &address, &owner).await {
                        Ok(writer) => {
                            let _ = opened.send(Ok(()));
                            writer.serve(receiver).await;
                        }
                        Err(error) => {
                            let _ = opened.send(Err(error));
                        }
                    }
                });
            })
            .map_err(|error| ClusterError::Request {
                what: "a thread for the journal".to_string(),
                reason: error.to_string(),
            })?;
        opened_answer.recv().map_err(|_| ClusterError::Request {
            what: "opening the journal".to_string(),
            reason: "its thread stopped".to_string(),
        })??;
        Ok(ClusterJournal {
            worker: WorkerHandle { commands },
            prefix,
        })
    }

    /// Snapshots after every `every` commits instead of
    /// [`DEFAULT_SNAPSHOT_EVERY`] (at least 1).
    pub fn with_snapshot_every(self, every: u64) -> Self {
        // A send fails only when the thread is gone; the next call reports it.
        let _ = self
            .worker
            .commands
            .send(Command::SnapshotEvery(every.max(1)));
        self
    }

    /// The extension state of the same instance, under the same claim.
    pub fn extension_state(&self) -> ClusterExtensionState {
        ClusterExtensionState {
            worker: self.worker.clone(),
        }
    }

    /// The requests for a person's decision of the same instance, under
    /// the same claim.
    pub fn approvals(&self) -> ClusterApprovals {
        ClusterApprovals {
            worker: self.worker.clone(),
        }
    }

    /// Where the instance's runtime events go, on the same connection.
    pub fn observer(&self) -> ClusterObserver {
        ClusterObserver {
            worker: self.worker.clone(),
        }
    }

    /// The instance's subject prefix in `GDN_CONV`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl TurnJournal for ClusterJournal {
    fn load(&mut self) -> Result<LoadedConversation, StoreError> {
        self.worker.call(Command::Load)
    }

    fn record_event(&mut self, turn_id: &str, event: &MessageEvent) -> Result<(), StoreError> {
        self.worker.call(|reply| Command::Record {
            turn_id: turn_id.to_string(),
            event: Box::new(event.clone()),
            reply,
        })
    }

    fn commit_turn(
        &mut self,
        turn_id: &str,
        events: &[MessageEvent],
        next_messages: &[Message],
        context: &CommitContext,
    ) -> Result<(), StoreError> {
        self.worker.call(|reply| Command::Commit {
            turn_id: turn_id.to_string(),
            all_appends: events.iter().all(MessageEvent::is_append),
            next_messages: next_messages.to_vec(),
            context: context.clone(),
            reply,
        })
    }

    /// One read of the instance's last sequence: anything but this
    /// writer's own last write means another owner claimed the log.
    fn confirm_writer(&mut self) -> Result<(), StoreError> {
        self.worker.call(Command::ConfirmWriter)
    }
}

impl ExtensionStateStore for ClusterExtensionState {
    fn load(&mut self, extension_name: &str) -> Result<Option<JsonValue>, StoreError> {
        self.worker.call(|reply| Command::LoadExtension {
            name: extension_name.to_string(),
            reply,
        })
    }

    fn save(&mut self, extension_name: &str, value: &JsonValue) -> Result<(), StoreError> {
        self.worker.call(|reply| Command::SaveExtension {
            name: extension_name.to_string(),
            value: value.clone(),
            reply,
        })
    }
}

impl ApprovalLog for ClusterApprovals {
    fn by_key(&self, key: &str) -> Result<Option<OpenApproval>, StoreError> {
        self.worker.call(|reply| Command::ApprovalByKey {
            key: key.to_string(),
            reply,
        })
    }

    fn about_call(&self, call_id: &str) -> Result<bool, StoreError> {
        self.worker.call(|reply| Command::ApprovalAboutCall {
            call_id: call_id.to_string(),
            reply,
        })
    }

    fn request(&self, request: &ApprovalRequest) -> Result<(), StoreError> {
        self.worker.call(|reply| Command::Ask {
            request: Box::new(request.clone()),
            reply,
        })
    }

    fn decide(&self, decision: &ApprovalDecision) -> Result<Decided, StoreError> {
        self.worker.call(|reply| Command::Decide {
            decision: Box::new(decision.clone()),
            reply,
        })
    }

    fn of_event(&self, event_id: &str) -> Result<Vec<OpenApproval>, StoreError> {
        self.worker.call(|reply| Command::ApprovalsOfEvent {
            event_id: event_id.to_string(),
            reply,
        })
    }

    fn close(&self, id: &str) -> Result<(), StoreError> {
        self.worker.call(|reply| Command::CloseApproval {
            id: id.to_string(),
            reply,
        })
    }
}

impl From<ClusterError> for StoreError {
    /// A fenced write becomes `E_STORE_FENCED`; anything else keeps the
    /// cluster's code.
    fn from(error: ClusterError) -> Self {
        match error {
            ClusterError::Fenced { ref instance, .. } => StoreError::Fenced {
                instance: instance.clone(),
                reason: error.to_string(),
            },
            other => StoreError::Backend {
                code: other.code(),
                message: other.to_string(),
                suggestion: other.suggestion(),
            },
        }
    }
}

/// A claim by `owner`, now.
fn claim_by(owner: &str) -> ClaimBody {
    ClaimBody {
        v: RECORD_VERSION,
        owner: owner.to_string(),
        at: goondan_types::now_iso(),
    }
}

/// Records in `gdn-instances` that `owner` claimed `address`; only `gdn
/// instance list --cluster` reads it, so a failure is logged, not fatal.
async fn record_in_directory(cluster: &Cluster, address: &InstanceAddress, owner: &str) {
    if let Err(error) = crate::directory::record_claim(cluster, address, owner).await {
        tracing::warn!(
            code = error.code(),
            "the instance directory was not updated: {error}"
        );
    }
}

/// One instance's log for its single writer: the journal's state on its
/// thread, and what a fork or a rewind writes with ([`crate::history`]).
pub(crate) struct Writer {
    cluster: Cluster,
    /// Where this instance's runtime events go (`GDN_OBS`).
    observation_subject: String,
    log: ConversationLog,
    /// Events after the last commit, with their Turns.
    uncommitted: Vec<(String, MessageEvent)>,
    base_len: usize,
    last_base_id: Option<String>,
    /// The inbox cursor of the last commit, written again by a commit
    /// whose Turn consumed no sequenced input, so the last commit always
    /// holds it.
    inbox_seq: Option<u64>,
    extensions: BTreeMap<String, JsonValue>,
    /// The requests for a person's decision not closed yet.
    approvals: OpenApprovals,
    commits_since_snapshot: u64,
    snapshot_every: u64,
    snapshot_object: Option<String>,
    /// What the open read, handed out by the first `load`.
    opened: Option<LoadedConversation>,
}

impl Writer {
    async fn open(
        urls: &ClusterUrls,
        options: ClusterOptions,
        address: &InstanceAddress,
        owner: &str,
    ) -> Result<Writer, ClusterError> {
        let cluster = Cluster::connect(urls, options).await?;
        Writer::open_on(cluster, address, owner).await
    }

    /// Claims the instance at `address` for `owner` on `cluster` (fencing
    /// every earlier writer, again after any claim that lands between its
    /// read and ours) and reads its log.
    pub(crate) async fn open_on(
        cluster: Cluster,
        address: &InstanceAddress,
        owner: &str,
    ) -> Result<Writer, ClusterError> {
        let mut log = ConversationLog::attach(&cluster, address).await?;
        let claim = claim_by(owner);
        let mut attempt = 0;
        let claimed = loop {
            attempt += 1;
            log.read_last_seq().await?;
            match log.publish(RecordKind::Claim, None, &claim).await {
                Ok(seq) => break seq,
                // Another claim landed between the read and ours: read again.
                Err(ClusterError::Fenced { .. }) if attempt < CLAIM_ATTEMPTS => {
                    log = ConversationLog::attach(&cluster, address).await?;
                }
                Err(error) => return Err(error),
            }
        };
        record_in_directory(&cluster, address, owner).await;
        let replay = log.replay(claimed).await?;
        let mut writer = Writer::new(cluster, address, log);
        writer.adopt(replay);
        Ok(writer)
    }

    /// Claims the instance at `address` for `owner` only if its log holds
    /// nothing yet: the first writer of a new instance (a fork).
    /// [`ClusterError::InstanceExists`] when it holds anything, or when
    /// another writer's first record lands before ours.
    pub(crate) async fn create_on(
        cluster: Cluster,
        address: &InstanceAddress,
        owner: &str,
    ) -> Result<Writer, ClusterError> {
        let exists = || ClusterError::InstanceExists {
            instance: address.routing_key(),
        };
        let mut log = ConversationLog::attach(&cluster, address).await?;
        if log.read_last_seq().await? != 0 {
            return Err(exists());
        }
        match log.publish(RecordKind::Claim, None, &claim_by(owner)).await {
            Ok(_) => {}
            Err(ClusterError::Fenced { .. }) => return Err(exists()),
            Err(error) => return Err(error),
        }
        record_in_directory(&cluster, address, owner).await;
        let mut writer = Writer::new(cluster, address, log);
        writer.opened = Some(LoadedConversation::default());
        Ok(writer)
    }

    fn new(cluster: Cluster, address: &InstanceAddress, log: ConversationLog) -> Writer {
        Writer {
            observation_subject: address.observation_subject(),
            cluster,
            log,
            uncommitted: Vec::new(),
            base_len: 0,
            last_base_id: None,
            inbox_seq: None,
            extensions: BTreeMap::new(),
            approvals: OpenApprovals::default(),
            commits_since_snapshot: 0,
            snapshot_every: DEFAULT_SNAPSHOT_EVERY,
            snapshot_object: None,
            opened: None,
        }
    }

    fn adopt(&mut self, replay: Replay) {
        let conversation = replay.conversation();
        self.base_len = replay.base.len();
        self.last_base_id = replay.base.last().map(|m| m.id.clone());
        self.uncommitted = replay.uncommitted;
        self.inbox_seq = replay.inbox_seq;
        self.extensions = replay.extensions;
        self.approvals = replay.approvals;
        self.commits_since_snapshot = replay.commits_since_snapshot;
        self.snapshot_object = replay.snapshot_object;
        self.opened = Some(conversation);
    }

    async fn serve(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        while let Some(command) = commands.recv().await {
            match command {
                Command::Load(reply) => {
                    let _ = reply.send(self.load().await.map_err(StoreError::from));
                }
                Command::Record {
                    turn_id,
                    event,
                    reply,
                } => {
                    let _ = reply.send(self.record(turn_id, *event).await.map_err(Into::into));
                }
                Command::Commit {
                    turn_id,
                    all_appends,
                    next_messages,
                    context,
                    reply,
                } => {
                    let committed = self
                        .commit(turn_id, all_appends, next_messages, context)
                        .await;
                    let _ = reply.send(committed.map_err(Into::into));
                }
                Command::LoadExtension { name, reply } => {
                    let loaded = self
                        .log
                        .check_not_fenced()
                        .map(|()| self.extensions.get(&name).cloned());
                    let _ = reply.send(loaded.map_err(Into::into));
                }
                Command::SaveExtension { name, value, reply } => {
                    let saved = self.save_extension(name, value).await;
                    let _ = reply.send(saved.map_err(Into::into));
                }
                Command::ConfirmWriter(reply) => {
                    let confirmed = self.log.confirm_writer().await;
                    let _ = reply.send(confirmed.map_err(Into::into));
                }
                Command::ApprovalByKey { key, reply } => {
                    let _ = reply.send(Ok(self.approvals.by_key(&key).cloned()));
                }
                Command::ApprovalAboutCall { call_id, reply } => {
                    let _ = reply.send(Ok(self.approvals.about_call(&call_id)));
                }
                Command::ApprovalsOfEvent { event_id, reply } => {
                    let open = self.approvals.of_event(&event_id).cloned().collect();
                    let _ = reply.send(Ok(open));
                }
                Command::Ask { request, reply } => {
                    let asked = self.ask(*request).await;
                    let _ = reply.send(asked.map_err(Into::into));
                }
                Command::Decide { decision, reply } => {
                    let decided = self.decide(*decision).await;
                    let _ = reply.send(decided.map_err(Into::into));
                }
                Command::CloseApproval { id, reply } => {
                    let closed = self.close_approval(&id).await;
                    let _ = reply.send(closed.map_err(Into::into));
                }
                Command::Observe(line) => {
                    // Core NATS into the stream: no ack waited for, as a
                    // runtime event must never slow a Turn down.
                    let subject = self.observation_subject.clone();
                    if let Err(error) = self.cluster.client().publish(subject, line.into()).await {
                        tracing::debug!("a runtime event was not published: {error}");
                    }
                }
                Command::SnapshotEvery(every) => self.snapshot_every = every,
            }
        }
    }

    /// The conversation as the journal's `load` gives it.
    pub(crate) async fn load(&mut self) -> Result<LoadedConversation, ClusterError> {
        self.log.check_not_fenced()?;
        if let Some(conversation) = self.opened.take() {
            return Ok(conversation);
        }
        let replay = self.log.replay(self.log.last_seq()).await?;
        self.adopt(replay);
        Ok(self.opened.take().unwrap_or_default())
    }

    async fn record(&mut self, turn_id: String, event: MessageEvent) -> Result<(), ClusterError> {
        let body = EventBody {
            v: RECORD_VERSION,
            turn_id,
            event,
        };
        self.log.publish(RecordKind::Event, None, &body).await?;
        self.uncommitted.push((body.turn_id, body.event));
        Ok(())
    }

    /// The mode of a commit of `turn_id` to `next_messages`: an append when
    /// the Turn recorded only appends and `next_messages` is the base plus
    /// exactly their messages.
    fn mode_of(&self, turn_id: &str, all_appends: bool, next_messages: &[Message]) -> CommitMode {
        let prefix_intact = next_messages.len() >= self.base_len
            && match self.base_len.checked_sub(1) {
                None => true,
                Some(last) => self.last_base_id.as_deref() == Some(next_messages[last].id.as_str()),
            };
        let appended = appended_by(turn_id, &self.uncommitted);
        match appended {
            Some(appended)
                if all_appends
                    && prefix_intact
                    && appended.len() == next_messages.len() - self.base_len
                    && appended
                        .iter()
                        .zip(&next_messages[self.base_len..])
                        .all(|(recorded, next)| *recorded == next) =>
            {
                CommitMode::Append
            }
            _ => CommitMode::Rewrite,
        }
    }

    /// Commits `next_messages` as the base after Turn `turn_id` (see
    /// [`goondan_store::TurnJournal::commit_turn`]).
    pub(crate) async fn commit(
        &mut self,
        turn_id: String,
        all_appends: bool,
        next_messages: Vec<Message>,
        context: CommitContext,
    ) -> Result<(), ClusterError> {
        /// [`CommitBody`](crate::record::CommitBody) without copying the
        /// messages.
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct CommitOut<'a> {
            v: u32,
            turn_id: &'a str,
            mode: CommitMode,
            #[serde(skip_serializing_if = "Option::is_none")]
            messages: Option<&'a [Message]>,
            #[serde(skip_serializing_if = "Option::is_none")]
            inbox_seq: Option<u64>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            outbox: Vec<OutboxBody>,
        }
        let mode = self.mode_of(&turn_id, all_appends, &next_messages);
        let inbox_seq = context.inbox_seq.or(self.inbox_seq);
        let body = CommitOut {
            v: RECORD_VERSION,
            turn_id: &turn_id,
            mode,
            messages: (mode == CommitMode::Rewrite).then_some(next_messages.as_slice()),
            inbox_seq,
            outbox: context.outbox.iter().map(OutboxBody::from).collect(),
        };
        let seq = self.log.publish(RecordKind::Commit, None, &body).await?;
        self.inbox_seq = inbox_seq;
        self.uncommitted.clear();
        self.base_len = next_messages.len();
        self.last_base_id = next_messages.last().map(|m| m.id.clone());
        self.commits_since_snapshot += 1;
        if mode == CommitMode::Rewrite || self.commits_since_snapshot >= self.snapshot_every {
            // The commit is durable whatever happens here: a failed snapshot
            // only means a longer replay, and the next commit tries again.
            let state = SnapshotState {
                messages: &next_messages,
                extensions: &self.extensions,
                inbox_seq,
                approvals: &self.approvals,
            };
            match self
                .log
                .snapshot(seq, state, self.snapshot_object.as_deref())
                .await
            {
                Ok(object) => {
                    self.snapshot_object = Some(object);
                    self.commits_since_snapshot = 0;
                }
                Err(error) => {
                    tracing::warn!(%error, code = error.code(), "snapshot of {} failed; the log is replayed in full until one succeeds", self.log.prefix());
                }
            }
        }
        Ok(())
    }

    /// Records `request` as asked.
    async fn ask(&mut self, request: ApprovalRequest) -> Result<(), ClusterError> {
        let open = OpenApproval {
            request,
            decision: None,
        };
        self.publish_approval(&open, false).await?;
        self.approvals.set(open);
        Ok(())
    }

    /// Records `decision` on the open request it names, when one waits
    /// for it.
    async fn decide(&mut self, decision: ApprovalDecision) -> Result<Decided, ClusterError> {
        self.log.check_not_fenced()?;
        let Some(open) = self.approvals.undecided(&decision.id) else {
            return Ok(self.approvals.would_decide(&decision.id));
        };
        let decided = OpenApproval {
            request: open.request.clone(),
            decision: Some(decision),
        };
        self.publish_approval(&decided, false).await?;
        self.approvals.set(decided);
        Ok(Decided::Recorded)
    }

    /// Closes the open request `id`.
    async fn close_approval(&mut self, id: &str) -> Result<(), ClusterError> {
        let Some(open) = self.approvals.by_id(id).cloned() else {
            return Ok(());
        };
        self.publish_approval(&open, true).await?;
        self.approvals.closed(id);
        Ok(())
    }

    async fn publish_approval(
        &mut self,
        open: &OpenApproval,
        closed: bool,
    ) -> Result<(), ClusterError> {
        let body = ApprovalBody::of(open, closed);
        self.log
            .publish(RecordKind::Approval, Some(&open.request.id), &body)
            .await
            .map(drop)
    }

    /// Records `value` as the state of the extension `name`.
    pub(crate) async fn save_extension(
        &mut self,
        name: String,
        value: JsonValue,
    ) -> Result<(), ClusterError> {
        self.log.check_not_fenced()?;
        if self.extensions.get(&name) == Some(&value) {
            return Ok(());
        }
        let body = ExtensionBody {
            v: RECORD_VERSION,
            name,
            value,
            removed: false,
        };
        self.log
            .publish(RecordKind::Extension, Some(&body.name), &body)
            .await?;
        self.extensions.insert(body.name, body.value);
        Ok(())
    }

    /// Records that the extension `name` has no state any more (a rewind
    /// to a Turn before its first).
    pub(crate) async fn remove_extension(&mut self, name: String) -> Result<(), ClusterError> {
        self.log.check_not_fenced()?;
        if !self.extensions.contains_key(&name) {
            return Ok(());
        }
        let body = ExtensionBody {
            v: RECORD_VERSION,
            name,
            value: JsonValue::Null,
            removed: true,
        };
        self.log
            .publish(RecordKind::Extension, Some(&body.name), &body)
            .await?;
        self.extensions.remove(&body.name);
        Ok(())
    }

    /// The latest state of each extension.
    pub(crate) fn extensions(&self) -> &BTreeMap<String, JsonValue> {
        &self.extensions
    }

    /// The events after the last commit, with their Turns.
    pub(crate) fn uncommitted(&self) -> &[(String, MessageEvent)] {
        &self.uncommitted
    }

    /// The log this writer writes.
    pub(crate) fn log_mut(&mut self) -> &mut ConversationLog {
        &mut self.log
    }
}
