//! [`ConversationLog`]: reads and fenced writes of one instance's records
//! in `GDN_CONV`, blobs and snapshots included, and [`Replay`], the fold of
//! those records into a conversation. The Turn bookkeeping on top (what a
//! commit folds, when to snapshot) is [`crate::journal`]'s.
//!
//! Every write is a compare-and-append: `Nats-Expected-Last-Subject-Sequence`
//! is the last sequence this writer wrote or read under `<prefix>.>`, so the
//! stream's Raft leader refuses it (10071, wrong last sequence) once anyone
//! else wrote there. Each record carries a `Nats-Msg-Id` fixed before its
//! first attempt. A publish retried after a lost acknowledgement never
//! lands twice: the server refuses the retry's stale expected sequence
//! (it checks that before its duplicate window), and the writer then finds
//! its own message id on the record right after the sequence it expected,
//! so the refusal is not taken for a takeover.

use crate::error::{request_error, ClusterError};
use crate::layout::{
    is_stream_not_found, BLOB_STORE, CONVERSATION_STREAM, MAX_MESSAGE_BYTES, SNAPSHOT_STORE,
};
use crate::object;
use crate::record::{
    blob_of, ApprovalBody, BlobRef, CommitBody, CommitMode, ExtensionBody, Record, RecordKind,
    SnapshotBody, SnapshotRef, RECORD_VERSION,
};
use crate::retry::{retrying, RETRY_DEADLINE, RETRY_PAUSE};
use crate::subject::InstanceAddress;
use crate::Cluster;
use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use futures_util::StreamExt;
use goondan_store::{ExtensionStateSource, LoadedConversation, OpenApprovals};
use goondan_types::{JsonValue, Message, MessageEvent};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// The header that makes the expected sequence apply to every subject of
/// the instance (async-nats has a builder method for the sequence only).
const EXPECTED_SUBJECT_HEADER: &str = "Nats-Expected-Last-Subject-Sequence-Subject";

/// Room left for headers when deciding whether a body fits in a message.
const HEADER_ROOM: usize = 4 * 1024;

/// The records of one instance, read and written by one writer.
#[derive(Debug)]
pub(crate) struct ConversationLog {
    cluster: Cluster,
    stream: Stream,
    prefix: String,
    /// Makes this writer's `Nats-Msg-Id`s unique.
    nonce: String,
    n_written: u64,
    /// The last sequence under `<prefix>.>` this writer wrote or read.
    last_seq: u64,
    /// Set once a write was refused because someone else wrote.
    fenced: Option<(u64, String)>,
    /// Blobs of records this writer knows of, by record sequence, to delete
    /// once a snapshot covers their records.
    blobs: Vec<(u64, String)>,
}

impl ConversationLog {
    /// The log of `address` (the layout must exist).
    pub(crate) async fn attach(
        cluster: &Cluster,
        address: &InstanceAddress,
    ) -> Result<Self, ClusterError> {
        let jetstream = cluster.jetstream();
        let stream = retrying(CONVERSATION_STREAM, || async move {
            match jetstream.get_stream(CONVERSATION_STREAM).await {
                Ok(stream) => Ok(Ok(stream)),
                // Not a passing state: no host has made the layout.
                Err(error) if is_stream_not_found(&error) => Ok(Err(ClusterError::NotStarted {
                    missing: format!("stream {CONVERSATION_STREAM}"),
                })),
                Err(error) => Err(request_error(CONVERSATION_STREAM, error)),
            }
        })
        .await??;
        Ok(ConversationLog {
            cluster: cluster.clone(),
            stream,
            prefix: address.conversation_prefix(),
            nonce: goondan_types::trace::random_hex(8),
            n_written: 0,
            last_seq: 0,
            fenced: None,
            blobs: Vec::new(),
        })
    }

    /// The instance's subject prefix.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The last sequence this writer wrote or read.
    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    fn filter(&self) -> String {
        format!("{}.>", self.prefix)
    }

    /// Fails when an earlier write was fenced.
    pub(crate) fn check_not_fenced(&self) -> Result<(), ClusterError> {
        match &self.fenced {
            Some((expected, actual)) => Err(ClusterError::Fenced {
                instance: self.prefix.clone(),
                expected: *expected,
                actual: actual.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Fails, and fences this writer for good, when the instance's last
    /// record is not the last one this writer wrote or read: another owner
    /// has claimed the log since.
    pub(crate) async fn confirm_writer(&mut self) -> Result<(), ClusterError> {
        self.check_not_fenced()?;
        let mine = self.last_seq;
        let last = self.read_last_seq().await?;
        if last != mine {
            self.last_seq = mine;
            self.fenced = Some((mine, last.to_string()));
        }
        self.check_not_fenced()
    }

    /// The sequence of the instance's last record (0 when it has none),
    /// read from the stream leader; it becomes what the next write expects.
    pub(crate) async fn read_last_seq(&mut self) -> Result<u64, ClusterError> {
        let filter = self.filter();
        let (stream, filter) = (&self.stream, filter.as_str());
        let last = retrying(filter, || async move {
            match stream.get_last_raw_message_by_subject(filter).await {
                Ok(message) => Ok(message.sequence),
                Err(error) if matches!(error.kind(), LastRawMessageErrorKind::NoMessageFound) => {
                    Ok(0)
                }
                Err(error) => Err(request_error(filter, error)),
            }
        })
        .await?;
        self.last_seq = last;
        Ok(last)
    }

    /// Publishes `body` as a record of `kind` (`name`: see
    /// [`RecordKind::subject`]) with a CAS on the last sequence, and
    /// returns its sequence once a quorum stored it. A refusal because
    /// someone else wrote fences this writer for good.
    pub(crate) async fn publish(
        &mut self,
        kind: RecordKind,
        name: Option<&str>,
        body: &impl Serialize,
    ) -> Result<u64, ClusterError> {
        self.check_not_fenced()?;
        let subject = kind.subject(&self.prefix, name);
        let mut bytes = serde_json::to_vec(body).map_err(|e| ClusterError::Corrupt {
            what: subject.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        self.n_written += 1;
        let message_id = format!("{}-{}", self.nonce, self.n_written);
        let mut blob = None;
        if bytes.len() + HEADER_ROOM > MAX_MESSAGE_BYTES {
            let name = format!("{}.{message_id}", self.prefix);
            object::put(&self.cluster, BLOB_STORE, &name, HashMap::new(), &bytes).await?;
            bytes = serde_json::to_vec(&BlobRef {
                v: RECORD_VERSION,
                blob: name.clone(),
                bytes: bytes.len() as u64,
            })
            .map_err(|e| ClusterError::Corrupt {
                what: subject.clone(),
                reason: e.to_string(),
            })?;
            blob = Some(name);
        }
        match self.send(&subject, &message_id, bytes).await {
            Ok(seq) => {
                if let Some(name) = blob {
                    self.blobs.push((seq, name));
                }
                Ok(seq)
            }
            Err(error) => {
                // A refused record references nothing; after a timeout it
                // may have landed, so its blob stays.
                if let Some(name) = blob.filter(|_| !matches!(error, ClusterError::Timeout { .. }))
                {
                    object::delete(&self.cluster, BLOB_STORE, &name).await;
                }
                Err(error)
            }
        }
    }

    /// Sends one record (CAS on the last sequence), again with the same
    /// message id after a timeout or a lost connection, until
    /// [`RETRY_DEADLINE`].
    async fn send(
        &mut self,
        subject: &str,
        message_id: &str,
        payload: Vec<u8>,
    ) -> Result<u64, ClusterError> {
        let deadline = Instant::now() + RETRY_DEADLINE;
        loop {
            let message = PublishMessage::build()
                .payload(payload.clone().into())
                .message_id(message_id)
                .expected_last_subject_sequence(self.last_seq)
                .header(EXPECTED_SUBJECT_HEADER, self.filter().as_str());
            let attempt = async {
                self.cluster
                    .jetstream()
                    .send_publish(subject.to_string(), message)
                    .await?
                    .await
            };
            match attempt.await {
                Ok(ack) => {
                    self.last_seq = ack.sequence;
                    return Ok(ack.sequence);
                }
                Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => {
                    // The server checks the expected sequence before the
                    // duplicate window, so a retry whose first attempt
                    // landed (its acknowledgement lost) is refused too:
                    // then the record right after the expected sequence
                    // is this one.
                    if let Some(seq) = self.landed(message_id).await {
                        self.last_seq = seq;
                        return Ok(seq);
                    }
                    self.fenced = Some((self.last_seq, error.to_string()));
                    return Err(ClusterError::Fenced {
                        instance: self.prefix.clone(),
                        expected: self.last_seq,
                        actual: error.to_string(),
                    });
                }
                Err(error)
                    if matches!(
                        error.kind(),
                        PublishErrorKind::WrongLastMessageId | PublishErrorKind::MaxPayloadExceeded
                    ) =>
                {
                    return Err(request_error(subject, error));
                }
                // Timeouts, no responders and broken connections happen
                // while a leader is elected: the same record (same
                // message id) is sent again until the deadline.
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(%error, "publishing {subject}; retrying");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(error) => {
                    tracing::warn!(%error, "publishing {subject} failed until the deadline");
                    return Err(ClusterError::Timeout {
                        what: format!("a write to {subject}"),
                        after: RETRY_DEADLINE,
                    });
                }
            }
        }
    }

    /// The sequence of the record with `message_id`, when it is the first
    /// record after the sequence this writer expects.
    async fn landed(&self, message_id: &str) -> Option<u64> {
        let next = self
            .stream
            .raw_message_builder()
            .next_by_subject(self.filter())
            .sequence(self.last_seq + 1)
            .send()
            .await
            .ok()?;
        let id = next.headers.get(async_nats::header::NATS_MESSAGE_ID)?;
        (id.as_str() == message_id).then_some(next.sequence)
    }

    /// Reads every record up to `upto` and folds them, starting from the
    /// latest snapshot. The sequence read becomes what the next write
    /// expects.
    pub(crate) async fn replay(&mut self, upto: u64) -> Result<Replay, ClusterError> {
        let records = read_records(&self.cluster, &self.stream, &self.prefix, upto).await?;
        let mut replay = Replay::default();
        let mut as_of = 0;
        if let Some((object, body)) = self.latest_snapshot(&records).await? {
            as_of = body.as_of;
            replay.inbox_seq = body.inbox_seq;
            replay.base = body.messages;
            replay.extensions = body.extensions;
            replay.snapshot_object = Some(object);
        }
        for raw in &records {
            // The snapshot holds what the records up to it made, except
            // the approvals: those are read wherever they still are (a
            // writer writes the open ones again before it purges).
            if raw.seq <= as_of && raw.kind != RecordKind::Approval {
                continue;
            }
            match self.decode(raw).await? {
                Record::Claim | Record::Snapshot(_) => {}
                Record::Approval(body) => replay.approval(*body),
                Record::Event(body) => replay.uncommitted.push((body.turn_id, body.event)),
                Record::Extension(body) => body.apply_to(&mut replay.extensions),
                Record::Commit(body) => {
                    replay.apply_commit(body);
                }
            }
        }
        if let Some(last) = records.last() {
            self.last_seq = self.last_seq.max(last.seq);
        }
        Ok(replay)
    }

    /// The latest snapshot `records` point to, with its object's name.
    async fn latest_snapshot(
        &mut self,
        records: &[RawRecord],
    ) -> Result<Option<(String, SnapshotBody)>, ClusterError> {
        let Some(raw) = records
            .iter()
            .rev()
            .find(|raw| raw.kind == RecordKind::Snapshot)
        else {
            return Ok(None);
        };
        let Record::Snapshot(reference) = self.decode(raw).await? else {
            unreachable!("a snapshot record decodes as one");
        };
        let bytes = object::read(&self.cluster, SNAPSHOT_STORE, &reference.object).await?;
        let body: SnapshotBody =
            serde_json::from_slice(&bytes).map_err(|e| ClusterError::Corrupt {
                what: format!("{SNAPSHOT_STORE}/{}", reference.object),
                reason: e.to_string(),
            })?;
        if body.v != RECORD_VERSION {
            return Err(ClusterError::Corrupt {
                what: format!("{SNAPSHOT_STORE}/{}", reference.object),
                reason: format!(
                    "snapshot version {}; this version of gdn reads version {RECORD_VERSION}",
                    body.v
                ),
            });
        }
        Ok(Some((reference.object, body)))
    }

    /// Where each Turn's commit is and which extension states were
    /// recorded since the latest snapshot, up to `upto`: what a fork or a
    /// rewind needs to give an instance the extension state one of its
    /// Turns ended with.
    pub(crate) async fn extension_history(
        &mut self,
        upto: u64,
    ) -> Result<ExtensionHistory, ClusterError> {
        let records = read_records(&self.cluster, &self.stream, &self.prefix, upto).await?;
        let mut history = ExtensionHistory::default();
        if let Some((_, body)) = self.latest_snapshot(&records).await? {
            history.as_of = body.as_of;
            history.at_snapshot = body.extensions;
        }
        // The commit at the snapshot's sequence stays in the log, and
        // names the Turn whose state the snapshot holds.
        for raw in records.iter().filter(|raw| raw.seq >= history.as_of) {
            let wanted = raw.kind == RecordKind::Commit
                || (raw.kind == RecordKind::Extension && raw.seq > history.as_of);
            if !wanted {
                continue;
            }
            match self.decode(raw).await? {
                Record::Commit(body) => history.commits.push((raw.seq, body.turn_id)),
                Record::Extension(body) => history.changes.push((raw.seq, body)),
                _ => {}
            }
        }
        Ok(history)
    }

    /// Decodes a record, following a blob reference.
    async fn decode(&mut self, raw: &RawRecord) -> Result<Record, ClusterError> {
        let corrupt = |reason: String| ClusterError::Corrupt {
            what: format!("{CONVERSATION_STREAM} #{} ({})", raw.seq, raw.subject),
            reason,
        };
        let decoded = match blob_of(&raw.payload) {
            Some(reference) => {
                let bytes = object::read(&self.cluster, BLOB_STORE, &reference.blob).await?;
                self.blobs.push((raw.seq, reference.blob));
                raw.kind.decode(&bytes)
            }
            None => raw.kind.decode(&raw.payload),
        };
        decoded.map_err(corrupt)
    }

    /// Stores `state`'s messages and extensions as the state as of
    /// `as_of` (the sequence of a commit this writer just made), points
    /// the log at it, writes `state`'s open approvals again after it, then
    /// purges the records before `as_of` and what they referenced. The
    /// purge comes last, so a crash at any step leaves a log that replays
    /// to the same conversation and the same open approvals. Returns the
    /// new object's name.
    pub(crate) async fn snapshot(
        &mut self,
        as_of: u64,
        state: SnapshotState<'_>,
        previous: Option<&str>,
    ) -> Result<String, ClusterError> {
        let object = self
            .upload_snapshot(as_of, state.messages, state.extensions, state.inbox_seq)
            .await?;
        self.point_to_snapshot(&object, as_of).await?;
        self.carry_approvals(state.approvals).await?;
        self.compact(as_of, previous.filter(|previous| *previous != object))
            .await?;
        Ok(object)
    }

    /// Step 2b: each open approval written again, after the snapshot, so
    /// the purge leaves its latest state in the log (a snapshot does not
    /// hold approvals: their last record per subject is what every
    /// instance's reader lists).
    async fn carry_approvals(&mut self, open: &OpenApprovals) -> Result<(), ClusterError> {
        for approval in open.iter() {
            let body = ApprovalBody::of(approval, false);
            self.publish(RecordKind::Approval, Some(&body.request.id), &body)
                .await?;
        }
        Ok(())
    }

    /// Step 1: the snapshot object. Until step 2 nothing refers to it.
    async fn upload_snapshot(
        &self,
        as_of: u64,
        messages: &[Message],
        extensions: &BTreeMap<String, JsonValue>,
        inbox_seq: Option<u64>,
    ) -> Result<String, ClusterError> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct SnapshotOut<'a> {
            v: u32,
            as_of: u64,
            messages: &'a [Message],
            extensions: &'a BTreeMap<String, JsonValue>,
            #[serde(skip_serializing_if = "Option::is_none")]
            inbox_seq: Option<u64>,
        }
        self.check_not_fenced()?;
        // Named by sequence: a stale writer can never overwrite the
        // snapshot a newer owner's log points to.
        let object = format!("{}@{as_of}", self.prefix);
        let bytes = serde_json::to_vec(&SnapshotOut {
            v: RECORD_VERSION,
            as_of,
            messages,
            extensions,
            inbox_seq,
        })
        .map_err(|e| ClusterError::Corrupt {
            what: object.clone(),
            reason: format!("cannot encode: {e}"),
        })?;
        let metadata = HashMap::from([
            ("asOf".to_string(), as_of.to_string()),
            ("instance".to_string(), self.prefix.clone()),
        ]);
        object::put(&self.cluster, SNAPSHOT_STORE, &object, metadata, &bytes).await?;
        Ok(object)
    }

    /// Step 2: the `snap` record, fenced like every write. From here a
    /// replay starts at the snapshot and skips the records it covers.
    async fn point_to_snapshot(&mut self, object: &str, as_of: u64) -> Result<u64, ClusterError> {
        let reference = SnapshotRef {
            v: RECORD_VERSION,
            object: object.to_string(),
            as_of,
        };
        self.publish(RecordKind::Snapshot, None, &reference).await
    }

    /// Step 3: the records before `as_of` go (the commit at `as_of` stays,
    /// so the next compare-and-append still finds its sequence), then the
    /// previous snapshot and the blobs of purged records.
    async fn compact(&mut self, as_of: u64, previous: Option<&str>) -> Result<(), ClusterError> {
        self.stream
            .purge()
            .filter(self.filter())
            .sequence(as_of)
            .await
            .map_err(|e| request_error(&format!("purge of {}", self.filter()), e))?;
        if let Some(previous) = previous {
            object::delete(&self.cluster, SNAPSHOT_STORE, previous).await;
        }
        let (covered, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.blobs)
            .into_iter()
            .partition(|(seq, _)| *seq < as_of);
        self.blobs = kept;
        for (_, name) in covered {
            object::delete(&self.cluster, BLOB_STORE, &name).await;
        }
        Ok(())
    }
}

/// What a snapshot keeps of an instance, as of the commit it follows.
pub(crate) struct SnapshotState<'a> {
    pub(crate) messages: &'a [Message],
    pub(crate) extensions: &'a BTreeMap<String, JsonValue>,
    pub(crate) inbox_seq: Option<u64>,
    /// Written again after the snapshot rather than into it.
    pub(crate) approvals: &'a OpenApprovals,
}

/// One record as read, before decoding.
struct RawRecord {
    seq: u64,
    subject: String,
    kind: RecordKind,
    payload: Vec<u8>,
}

/// The instance's records up to sequence `upto`, in order. A read that
/// fails (a consumer cannot be made while the servers elect a leader) is
/// started again until [`RETRY_DEADLINE`].
async fn read_records(
    cluster: &Cluster,
    stream: &Stream,
    prefix: &str,
    upto: u64,
) -> Result<Vec<RawRecord>, ClusterError> {
    if upto == 0 {
        return Ok(Vec::new());
    }
    let what = format!("a read of {prefix}.>");
    let attempt_limit = cluster.options().request_timeout * 6;
    let what = what.as_str();
    retrying(what, || async move {
        match tokio::time::timeout(attempt_limit, read_once(stream, prefix, upto)).await {
            Ok(Ok(records)) => Ok(records),
            Ok(Err(reason)) => Err(request_error(what, reason)),
            Err(_) => Err(ClusterError::Timeout {
                what: what.to_string(),
                after: attempt_limit,
            }),
        }
    })
    .await
}

/// One pass of an ordered consumer over the instance's records.
async fn read_once(stream: &Stream, prefix: &str, upto: u64) -> Result<Vec<RawRecord>, String> {
    let text = |e: &dyn std::fmt::Display| e.to_string();
    let mut records = Vec::new();
    let consumer = stream
        .create_consumer(pull::OrderedConfig {
            filter_subject: format!("{prefix}.>"),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| text(&e))?;
    let mut messages = consumer.messages().await.map_err(|e| text(&e))?;
    while let Some(message) = messages.next().await {
        let message = message.map_err(|e| text(&e))?;
        let info = message.info().map_err(|e| text(&e))?;
        let (seq, pending) = (info.stream_sequence, info.pending);
        if seq > upto {
            break;
        }
        let subject = message.subject.to_string();
        // Subjects under the prefix that this version does not write are
        // skipped, so a newer writer's extra records do not stop an older
        // reader.
        if let Some(kind) = RecordKind::of_subject(prefix, &subject) {
            records.push(RawRecord {
                seq,
                subject,
                kind,
                payload: message.payload.to_vec(),
            });
        }
        if seq >= upto || pending == 0 {
            break;
        }
    }
    Ok(records)
}

/// The commits and extension records of a log since its latest snapshot
/// ([`ConversationLog::extension_history`]).
#[derive(Debug, Default)]
pub(crate) struct ExtensionHistory {
    /// The sequence the snapshot is as of (0 without one).
    as_of: u64,
    /// The extension states the snapshot holds.
    at_snapshot: BTreeMap<String, JsonValue>,
    /// Every commit from the snapshot's on: its sequence and Turn.
    commits: Vec<(u64, String)>,
    /// Every extension record after the snapshot, in order.
    changes: Vec<(u64, ExtensionBody)>,
}

impl ExtensionHistory {
    /// The extension states Turn `turn_id` ended with, and where they
    /// came from, given the log's `current` ones.
    ///
    /// A Turn's extension records follow its commit (the runtime flushes
    /// them after committing), so its state is the snapshot's with every
    /// record before the next commit applied. That is exact when the
    /// Turn's commit is still in the log; one a snapshot's purge took
    /// leaves the current state, said so.
    pub(crate) fn state_after(
        &self,
        turn_id: Option<&str>,
        current: &BTreeMap<String, JsonValue>,
    ) -> (BTreeMap<String, JsonValue>, ExtensionStateSource) {
        let commit = turn_id.and_then(|turn_id| {
            self.commits
                .iter()
                .rev()
                .find(|(_, committed)| committed == turn_id)
                .map(|(seq, _)| *seq)
        });
        let Some(commit) = commit else {
            return (current.clone(), ExtensionStateSource::CurrentFallback);
        };
        let next_commit = self
            .commits
            .iter()
            .map(|(seq, _)| *seq)
            .find(|seq| *seq > commit)
            .unwrap_or(u64::MAX);
        let mut state = self.at_snapshot.clone();
        for (_, change) in self.changes.iter().filter(|(seq, _)| *seq < next_commit) {
            change.clone().apply_to(&mut state);
        }
        let source = if &state == current {
            ExtensionStateSource::Unchanged
        } else {
            ExtensionStateSource::Snapshot
        };
        (state, source)
    }
}

/// The fold of an instance's records.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// The committed messages.
    pub(crate) base: Vec<Message>,
    /// Every event after the last commit, with its Turn.
    pub(crate) uncommitted: Vec<(String, MessageEvent)>,
    /// The latest state of each extension.
    pub(crate) extensions: BTreeMap<String, JsonValue>,
    /// The inbox cursor of the last commit (or of the snapshot, when no
    /// commit follows it).
    pub(crate) inbox_seq: Option<u64>,
    /// Commits after the snapshot the replay started from.
    pub(crate) commits_since_snapshot: u64,
    /// That snapshot's object.
    pub(crate) snapshot_object: Option<String>,
    /// The requests for a person's decision not closed yet.
    pub(crate) approvals: OpenApprovals,
}

impl Replay {
    /// Where one request stands now, as its latest record says.
    fn approval(&mut self, body: ApprovalBody) {
        let (id, closed) = (body.request.id.clone(), body.closed);
        // Set first even when closed, so the fold sees who decided it
        // (a request closed by a cancel is remembered as such).
        self.approvals.set(body.state());
        if closed {
            self.approvals.closed(&id);
        }
    }

    fn apply_commit(&mut self, commit: CommitBody) {
        // A record written before cursors has none: the last known one
        // still holds.
        self.inbox_seq = commit.inbox_seq.or(self.inbox_seq);
        match (commit.mode, commit.messages) {
            (CommitMode::Rewrite, Some(messages)) => self.base = messages,
            (CommitMode::Rewrite, None) => self.base.clear(),
            (CommitMode::Append, _) => {
                let appended = appended_by(&commit.turn_id, &self.uncommitted)
                    .unwrap_or_default()
                    .into_iter()
                    .cloned();
                self.base.extend(appended);
            }
        }
        self.uncommitted.clear();
        self.commits_since_snapshot += 1;
    }

    /// The conversation as [`goondan_store::TurnJournal::load`] returns it:
    /// only the latest Turn's uncommitted events are pending; events of an
    /// earlier Turn under them were abandoned (`journal.rs`'s rule) and are
    /// reported in a warning.
    pub(crate) fn conversation(&self) -> LoadedConversation {
        let pending_turn_id = self.uncommitted.last().map(|(turn_id, _)| turn_id.clone());
        let mut pending_events = Vec::new();
        let mut abandoned: Vec<&str> = Vec::new();
        let mut n_abandoned = 0;
        for (turn_id, event) in &self.uncommitted {
            if Some(turn_id) == pending_turn_id.as_ref() {
                pending_events.push(event.clone());
            } else {
                n_abandoned += 1;
                if !abandoned.contains(&turn_id.as_str()) {
                    abandoned.push(turn_id);
                }
            }
        }
        let mut warnings = Vec::new();
        if n_abandoned > 0 {
            warnings.push(format!(
                "{n_abandoned} event(s) of abandoned Turn(s) {} were not replayed; they stay in the cluster log until the next snapshot",
                abandoned.join(", ")
            ));
        }
        LoadedConversation {
            base: self.base.clone(),
            pending_events,
            pending_turn_id,
            warnings,
        }
    }
}

/// The messages the `append` events of `turn_id` add, or `None` when the
/// Turn recorded another kind of event.
pub(crate) fn appended_by<'a>(
    turn_id: &str,
    uncommitted: &'a [(String, MessageEvent)],
) -> Option<Vec<&'a Message>> {
    uncommitted
        .iter()
        .filter(|(turn, _)| turn == turn_id)
        .map(|(_, event)| match event {
            MessageEvent::Append { message } => Some(message),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CommitBody, EventBody};
    use crate::testing::NatsCluster;
    use goondan_types::{MessageSource, ModelMessage};

    async fn log_on(nats: &NatsCluster, key: &str) -> (Cluster, ConversationLog) {
        let cluster = nats.connect().await;
        crate::layout::ensure(&cluster).await.unwrap();
        let address = InstanceAddress::new("ws", "coder", key);
        let mut log = ConversationLog::attach(&cluster, &address).await.unwrap();
        log.read_last_seq().await.unwrap();
        (cluster, log)
    }

    /// Records one Turn of a single append and commits it; the commit's
    /// sequence.
    async fn turn(log: &mut ConversationLog, turn_id: &str, text: &str) -> (Message, u64) {
        let message = Message::new(ModelMessage::user(text), MessageSource::User);
        let event = EventBody {
            v: RECORD_VERSION,
            turn_id: turn_id.to_string(),
            event: MessageEvent::Append {
                message: message.clone(),
            },
        };
        log.publish(RecordKind::Event, None, &event).await.unwrap();
        let commit = CommitBody {
            v: RECORD_VERSION,
            turn_id: turn_id.to_string(),
            mode: CommitMode::Append,
            messages: None,
            inbox_seq: None,
            outbox: Vec::new(),
        };
        let seq = log
            .publish(RecordKind::Commit, None, &commit)
            .await
            .unwrap();
        (message, seq)
    }

    async fn replayed_base(cluster: &Cluster, key: &str) -> Vec<Message> {
        let address = InstanceAddress::new("ws", "coder", key);
        let mut reader = ConversationLog::attach(cluster, &address).await.unwrap();
        let last = reader.read_last_seq().await.unwrap();
        reader.replay(last).await.unwrap().base
    }

    #[tokio::test]
    async fn a_retried_publish_whose_first_attempt_landed_is_not_taken_for_a_fence() {
        let Some(nats) = NatsCluster::start(1).await else {
            return;
        };
        let (_cluster, mut log) = log_on(&nats, "retry").await;
        let body = crate::record::ClaimBody {
            v: RECORD_VERSION,
            owner: "a".to_string(),
            at: goondan_types::now_iso(),
        };
        let before = log.last_seq();
        let first = log.publish(RecordKind::Claim, None, &body).await.unwrap();
        // As if the acknowledgement had been lost: the same record (same
        // message id) sent again with the sequence expected before it.
        log.last_seq = before;
        log.n_written -= 1;
        let again = log.publish(RecordKind::Claim, None, &body).await.unwrap();
        assert_eq!(again, first);
        assert!(log.check_not_fenced().is_ok());
        // Someone else's record after it still fences.
        log.last_seq = before;
        let error = log
            .publish(RecordKind::Claim, None, &body)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "E_CLUSTER_FENCED");
    }

    #[tokio::test]
    async fn a_crash_at_any_step_of_a_snapshot_leaves_the_same_conversation() {
        let Some(nats) = NatsCluster::start(1).await else {
            return;
        };
        let (cluster, mut log) = log_on(&nats, "snap-steps").await;
        let (first, _) = turn(&mut log, "t-1", "one").await;
        let (second, as_of) = turn(&mut log, "t-2", "two").await;
        let base = vec![first, second];
        let extensions = BTreeMap::new();

        // Crash after the upload: nothing refers to the object yet.
        let object = log
            .upload_snapshot(as_of, &base, &extensions, None)
            .await
            .unwrap();
        assert_eq!(replayed_base(&cluster, "snap-steps").await, base);

        // Crash after the snap record, before the purge: the replay starts
        // at the snapshot and skips the records it covers.
        log.point_to_snapshot(&object, as_of).await.unwrap();
        assert_eq!(replayed_base(&cluster, "snap-steps").await, base);

        // The purge, then one more Turn on top.
        log.compact(as_of, None).await.unwrap();
        assert_eq!(replayed_base(&cluster, "snap-steps").await, base);
        let (third, _) = turn(&mut log, "t-3", "three").await;
        let mut expected = base.clone();
        expected.push(third);
        assert_eq!(replayed_base(&cluster, "snap-steps").await, expected);
    }
}
