//! The inbox: every instance's inputs in the `GDN_IN` work-queue stream.
//!
//! Owns the [`Envelope`] wire format, [`send`] (publish with a stable
//! `Nats-Msg-Id`, quorum PubAck), one shard's durable pull consumer
//! ([`ShardInbox`]) and the cursor read [`next_for_instance`]. It does not
//! own the cursor itself: the last `commit` of an instance's conversation
//! log records the inbox sequence it consumed (the journal's business),
//! and [`crate::cursor::last_commit`] reads it.
//!
//! A body over [`MAX_MESSAGE_BYTES`](crate::layout::MAX_MESSAGE_BYTES)
//! goes to the `gdn-blob` object store as `inbox/<id>` and the stream holds
//! a reference; readers fetch it transparently, and the ack deletes it.
//!
//! # Doorbell, queue, cursor
//!
//! Acks alone cannot give exactly-once: the server may accept an ack after
//! `ack_wait` while it already redelivered the message (nats-server#4786).
//! So a shard's consumer is only a *doorbell*: a [`Delivery`] says "instance
//! X has input". The host then takes X's inputs in acceptance order with
//! [`next_for_instance`]`(X, cursor)`, where `cursor` is the inbox sequence
//! of X's last committed Turn, and:
//!
//! - a delivery with `seq <= cursor` was consumed already (a redelivery, or
//!   a crash between commit and ack) ([`Delivery::consumed_by`]): the
//!   answer its Turn committed in the outbox is sent again, and it is
//!   acked without waking the agent;
//! - a delivery whose Turn runs gets [`Delivery::progress`] every 3 s;
//! - after the Turn's `commit` (which records `seq` as the new cursor) it is
//!   [`Delivery::ack`]ed, and the work queue drops the message.

use crate::connect::Cluster;
use crate::error::{request_error, ClusterError};
use crate::layout::{BLOB_STORE, INBOX_STREAM, MAX_MESSAGE_BYTES};
use crate::object;
use crate::subject::{shard_consumer_name, shard_inbox_filter, InstanceAddress};
use async_nats::jetstream::consumer::{pull, AckPolicy, Consumer};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::{Acker, PublishMessage, StreamMessage};
use async_nats::jetstream::stream::{DirectGetErrorKind, LastRawMessageErrorKind};
use async_nats::jetstream::AckKind;
use futures_util::StreamExt;
use goondan_types::AgentEvent;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The envelope format this version writes (`v` in the body).
pub const ENVELOPE_VERSION: u32 = 1;

/// One input for one instance, as it travels through `GDN_IN`.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The stable event id, or [`answer_message_id`] for a forwarded
    /// answer; sent as `Nats-Msg-Id`, so a retried send within the
    /// duplicate window is stored once.
    pub id: String,
    /// The instance the input is for.
    pub address: InstanceAddress,
    /// The input.
    pub event: AgentEvent,
    /// A core NATS subject to answer on (`gdn.reply.cli.<uuid>`), for
    /// callers outside the cluster such as `gdn run --input`.
    pub reply_to: Option<String>,
}

/// The JSON body of an [`Envelope`].
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvelopeBody {
    v: u32,
    id: String,
    workspace_id: String,
    agent_name: String,
    instance_key: String,
    event: AgentEvent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reply_to: Option<String>,
}

/// What stands in the stream for a body over
/// [`MAX_MESSAGE_BYTES`](crate::layout::MAX_MESSAGE_BYTES): where in
/// `gdn-blob` the body is.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlobReference {
    v: u32,
    id: String,
    blob: String,
    bytes: usize,
}

/// A message of `GDN_IN`: the body, or a reference to it.
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredBody {
    Blob(BlobReference),
    Inline(Box<EnvelopeBody>),
}

/// The largest envelope body [`send`] accepts; bodies over
/// [`MAX_MESSAGE_BYTES`](crate::layout::MAX_MESSAGE_BYTES) go through the
/// blob store, up to this.
pub const MAX_ENVELOPE_BYTES: usize = 64 * 1024 * 1024;

/// The id of the envelope carrying the answer to the request
/// `correlation_id` to its caller's inbox (`reply:<correlationId>`): the
/// host whose instance answered and a host that re-sends the answer from
/// the commit's outbox send the same id, so the inbox stores one copy.
pub fn answer_message_id(correlation_id: &str) -> String {
    format!("reply:{correlation_id}")
}

/// The `gdn-blob` object holding the body of envelope `id`.
fn blob_name(id: &str) -> String {
    format!("inbox/{id}")
}

impl Envelope {
    fn encode(&self) -> Result<Vec<u8>, ClusterError> {
        let body = EnvelopeBody {
            v: ENVELOPE_VERSION,
            id: self.id.clone(),
            workspace_id: self.address.workspace_id.clone(),
            agent_name: self.address.agent_name.clone(),
            instance_key: self.address.instance_key.clone(),
            event: self.event.clone(),
            reply_to: self.reply_to.clone(),
        };
        let bytes = serde_json::to_vec(&body)
            .map_err(|e| request_error(&format!("encode envelope {}", self.id), e))?;
        if bytes.len() > MAX_ENVELOPE_BYTES {
            return Err(ClusterError::TooLarge {
                what: format!("envelope {} for {}", self.id, self.address.routing_key()),
                bytes: bytes.len(),
                limit: MAX_ENVELOPE_BYTES,
            });
        }
        Ok(bytes)
    }

    /// The envelope of `body`, read from `subject` at `seq`: it must be of
    /// this version and name the instance whose inbox subject it came on.
    fn from_body(subject: &str, seq: u64, body: EnvelopeBody) -> Result<Envelope, ClusterError> {
        if body.v != ENVELOPE_VERSION {
            return Err(corrupt(
                subject,
                seq,
                format!(
                    "envelope version {}, this version reads {ENVELOPE_VERSION}",
                    body.v
                ),
            ));
        }
        let envelope = Envelope {
            id: body.id,
            address: InstanceAddress {
                workspace_id: body.workspace_id,
                agent_name: body.agent_name,
                instance_key: body.instance_key,
            },
            event: body.event,
            reply_to: body.reply_to,
        };
        let expected = envelope.address.inbox_subject();
        if expected != subject {
            return Err(corrupt(
                subject,
                seq,
                format!("the envelope is for {expected}, not the subject it was stored on"),
            ));
        }
        Ok(envelope)
    }
}

fn corrupt(subject: &str, seq: u64, reason: String) -> ClusterError {
    ClusterError::Corrupt {
        what: format!("{INBOX_STREAM} seq {seq} ({subject})"),
        reason,
    }
}

/// Decodes a message of `GDN_IN`, fetching its body from `gdn-blob` when
/// it is a reference; also returns the blob's name then.
async fn read_stored(
    cluster: &Cluster,
    subject: &str,
    seq: u64,
    payload: &[u8],
) -> Result<(Envelope, Option<String>), ClusterError> {
    let stored: StoredBody = serde_json::from_slice(payload)
        .map_err(|e| corrupt(subject, seq, format!("not an envelope: {e}")))?;
    let reference = match stored {
        StoredBody::Inline(body) => return Ok((Envelope::from_body(subject, seq, *body)?, None)),
        StoredBody::Blob(reference) => reference,
    };
    if reference.v != ENVELOPE_VERSION {
        return Err(corrupt(
            subject,
            seq,
            format!(
                "envelope version {}, this version reads {ENVELOPE_VERSION}",
                reference.v
            ),
        ));
    }
    let bytes = get_blob(cluster, &reference.blob).await?.ok_or_else(|| {
        corrupt(
            subject,
            seq,
            format!("its body {BLOB_STORE}/{} is missing", reference.blob),
        )
    })?;
    let body: EnvelopeBody = serde_json::from_slice(&bytes)
        .map_err(|e| corrupt(subject, seq, format!("its body is not an envelope: {e}")))?;
    let envelope = Envelope::from_body(subject, seq, body)?;
    if envelope.id != reference.id {
        return Err(corrupt(
            subject,
            seq,
            format!("its body is envelope {}, not {}", envelope.id, reference.id),
        ));
    }
    Ok((envelope, Some(reference.blob)))
}

/// A body's blob, `None` when it is gone (acked and deleted meanwhile).
async fn get_blob(cluster: &Cluster, name: &str) -> Result<Option<Vec<u8>>, ClusterError> {
    match object::read(cluster, BLOB_STORE, name).await {
        Ok(bytes) => Ok(Some(bytes)),
        Err(ClusterError::Missing { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

/// What the cluster answered to a [`send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// The message's sequence in `GDN_IN` (for a duplicate, the first
    /// copy's).
    pub seq: u64,
    /// The id was sent within the duplicate window already; nothing new
    /// was stored.
    pub duplicate: bool,
}

/// Publishes `envelope` to its instance's inbox and waits until a quorum
/// of servers stored it. Idempotent on `envelope.id` for
/// [`DUPLICATE_WINDOW`](crate::layout::DUPLICATE_WINDOW).
///
/// A body over [`MAX_MESSAGE_BYTES`](crate::layout::MAX_MESSAGE_BYTES) is
/// put in `gdn-blob` first and the stream holds a reference to it; the
/// blob is deleted when the delivery is acked. Over
/// [`MAX_ENVELOPE_BYTES`] it is refused ([`ClusterError::TooLarge`]).
pub async fn send(cluster: &Cluster, envelope: &Envelope) -> Result<Receipt, ClusterError> {
    let subject = envelope.address.inbox_subject();
    let what = || format!("send {} to {subject}", envelope.id);
    let mut payload = envelope.encode()?;
    let mut blob = None;
    if payload.len() > MAX_MESSAGE_BYTES {
        let name = blob_name(&envelope.id);
        object::put(cluster, BLOB_STORE, &name, Default::default(), &payload).await?;
        let reference = BlobReference {
            v: ENVELOPE_VERSION,
            id: envelope.id.clone(),
            blob: name.clone(),
            bytes: payload.len(),
        };
        payload = serde_json::to_vec(&reference).expect("a blob reference encodes");
        blob = Some(name);
    }
    let publish = PublishMessage::build()
        .payload(payload.into())
        .message_id(&envelope.id)
        .expected_stream(INBOX_STREAM);
    let answer = async {
        cluster
            .jetstream()
            .send_publish(subject.clone(), publish)
            .await?
            .await
    }
    .await;
    match answer {
        Ok(ack) => {
            if let (true, Some(name)) = (ack.duplicate, blob) {
                // The put above rewrote the first copy's blob. If that copy
                // was acked already, nothing will delete the blob again (asked
                // of the stream leader: a replica may still hold the copy).
                let stream = cluster.jetstream().get_stream_no_info(INBOX_STREAM).await;
                if let Ok(stream) = stream {
                    if let Err(error) = stream.get_raw_message(ack.sequence).await {
                        if matches!(error.kind(), LastRawMessageErrorKind::NoMessageFound) {
                            object::delete(cluster, BLOB_STORE, &name).await;
                        }
                    }
                }
            }
            Ok(Receipt {
                seq: ack.sequence,
                duplicate: ack.duplicate,
            })
        }
        Err(error) if error.kind() == PublishErrorKind::TimedOut => Err(ClusterError::Timeout {
            what: what(),
            after: cluster.options().request_timeout,
        }),
        Err(error) => Err(request_error(&what(), error)),
    }
}

/// How a shard's inbox consumer is set up when it is created.
#[derive(Debug, Clone)]
pub struct InboxOptions {
    /// How long a delivery may stay unacked (and without
    /// [`Delivery::progress`]) before the server delivers it again.
    pub ack_wait: Duration,
    /// How many deliveries of the shard may be unacked at once; the server
    /// stops delivering beyond it (backpressure).
    pub max_ack_pending: i64,
    /// How many messages one pull asks for. Messages pulled but not yet
    /// returned by [`ShardInbox::next`] count against `ack_wait`, so keep
    /// it small next to what a host handles in `ack_wait`.
    pub batch: usize,
}

impl Default for InboxOptions {
    fn default() -> Self {
        InboxOptions {
            // With a lease TTL of 5 s, a delivery held by a host that died
            // comes back about when its shard has a new owner.
            ack_wait: Duration::from_secs(6),
            max_ack_pending: 10_000,
            batch: 64,
        }
    }
}

/// One shard's inbox: the durable pull consumer `shard-NNN` on
/// `gdn.in.NNN.>`, delivering [`Delivery`]s.
pub struct ShardInbox {
    cluster: Cluster,
    shard: u16,
    messages: pull::Stream,
    ended: bool,
}

impl std::fmt::Debug for ShardInbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardInbox")
            .field("shard", &self.shard)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl ShardInbox {
    /// Opens shard `shard`'s inbox with the default [`InboxOptions`].
    pub async fn open(cluster: &Cluster, shard: u16) -> Result<ShardInbox, ClusterError> {
        ShardInbox::open_with(cluster, shard, &InboxOptions::default()).await
    }

    /// Opens shard `shard`'s inbox, creating its durable consumer with
    /// `options` if it does not exist (an existing consumer keeps its
    /// settings), and starts pulling.
    pub async fn open_with(
        cluster: &Cluster,
        shard: u16,
        options: &InboxOptions,
    ) -> Result<ShardInbox, ClusterError> {
        let name = shard_consumer_name(shard);
        let failed = |what: &str, error: String| {
            request_error(&format!("{what} {INBOX_STREAM} consumer {name}"), error)
        };
        let stream = cluster
            .jetstream()
            .get_stream_no_info(INBOX_STREAM)
            .await
            .map_err(|e| failed("find the stream of", e.to_string()))?;
        let consumer: Consumer<pull::Config> = stream
            .get_or_create_consumer(
                &name,
                pull::Config {
                    durable_name: Some(name.clone()),
                    filter_subject: shard_inbox_filter(shard),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: options.ack_wait,
                    max_ack_pending: options.max_ack_pending,
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| failed("create", e.to_string()))?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(options.batch.max(1))
            .messages()
            .await
            .map_err(|e| failed("pull from", e.to_string()))?;
        Ok(ShardInbox {
            cluster: cluster.clone(),
            shard,
            messages,
            ended: false,
        })
    }

    /// The shard.
    pub fn shard(&self) -> u16 {
        self.shard
    }

    /// The next delivery. `None` once the consumer is gone (deleted, or the
    /// connection closed for good). An error is reported once and the inbox
    /// goes on: [`ClusterError::Corrupt`] for a message that does not
    /// decode (already acked, so a poison message never loops, and logged
    /// with its sequence), [`ClusterError::Request`] for a missed heartbeat
    /// or a failed pull (the client pulls again by itself).
    pub async fn next(&mut self) -> Option<Result<Delivery, ClusterError>> {
        use async_nats::jetstream::consumer::pull::MessagesErrorKind;
        if self.ended {
            return None;
        }
        let message = match self.messages.next().await {
            None => {
                self.ended = true;
                return None;
            }
            Some(Ok(message)) => message,
            Some(Err(error)) => {
                if matches!(
                    error.kind(),
                    MessagesErrorKind::ConsumerDeleted | MessagesErrorKind::PushBasedConsumer
                ) {
                    self.ended = true;
                }
                return Some(Err(ClusterError::Request {
                    what: format!("pull {}", shard_consumer_name(self.shard)),
                    reason: error.to_string(),
                }));
            }
        };
        Some(self.decode(message).await)
    }

    async fn decode(
        &self,
        message: async_nats::jetstream::Message,
    ) -> Result<Delivery, ClusterError> {
        let (seq, delivered) = match message.info() {
            Ok(info) => (info.stream_sequence, info.delivered.max(1) as u64),
            Err(error) => {
                return Err(ClusterError::Corrupt {
                    what: format!("a delivery of {}", shard_consumer_name(self.shard)),
                    reason: format!("no JetStream metadata: {error}"),
                })
            }
        };
        let (message, acker) = message.split();
        let subject = message.subject.as_str();
        match read_stored(&self.cluster, subject, seq, &message.payload).await {
            Ok((envelope, blob)) => Ok(Delivery {
                envelope,
                seq,
                delivered,
                acker,
                blob,
                cluster: self.cluster.clone(),
            }),
            Err(error @ ClusterError::Corrupt { .. }) => {
                // A poison message must not come back forever: it is
                // acked, and the log keeps where it was.
                let acked = acker.double_ack().await;
                tracing::error!(
                    seq,
                    subject = message.subject.as_str(),
                    acked = acked.is_ok(),
                    "dropped an unreadable inbox message: {error}"
                );
                Err(error)
            }
            // The blob store did not answer: the message is fine, it comes
            // back at once.
            Err(error) => {
                if let Err(nak) = acker.ack_with(AckKind::Nak(None)).await {
                    tracing::warn!(seq, "could not NAK an inbox message: {nak}");
                }
                Err(error)
            }
        }
    }

    /// Stops pulling: deliveries the client already holds but
    /// [`next`](Self::next) did not return yet are NAKed for immediate
    /// redelivery (to the shard's next owner), and the count is returned.
    /// Messages the server is sending at this instant come back after
    /// `ack_wait`. Deliveries handed out before stay valid: ack them after
    /// their Turns commit.
    pub async fn close(self) -> usize {
        use futures_util::FutureExt;
        let mut messages = self.messages;
        let mut held = Vec::new();
        while let Some(Some(Ok(message))) = messages.next().now_or_never() {
            held.push(message);
        }
        // Unsubscribe before the NAKs: the server would otherwise redeliver
        // them at once to this inbox's still-open pull request.
        drop(messages);
        let mut n_nacked = 0;
        for message in held {
            if message.ack_with(AckKind::Nak(None)).await.is_ok() {
                n_nacked += 1;
            }
        }
        n_nacked
    }
}

/// One delivery of an inbox message. Dropping it without an answer leaves
/// the message to come back after `ack_wait`.
pub struct Delivery {
    /// The input.
    pub envelope: Envelope,
    /// Its sequence in `GDN_IN`; increases with acceptance order, per
    /// instance too.
    pub seq: u64,
    /// How many times it was delivered (1 = the first time).
    pub delivered: u64,
    acker: Acker,
    /// The `gdn-blob` object holding the body, for a large one.
    blob: Option<String>,
    cluster: Cluster,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("envelope", &self.envelope)
            .field("seq", &self.seq)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

impl Delivery {
    /// True when an instance whose last committed Turn consumed inbox
    /// sequence `cursor` has consumed this delivery already (a
    /// redelivery, or a crash between commit and ack): the host sends the
    /// committed answer again and [`ack`](Self::ack)s it (see
    /// [`crate::cursor`]).
    pub fn consumed_by(&self, cursor: u64) -> bool {
        self.seq <= cursor
    }

    /// Acknowledges it and waits until the server confirmed (double ack);
    /// the work queue then drops the message (and the blob of a large
    /// body). Call it after the Turn's commit, never before.
    pub async fn ack(self) -> Result<(), ClusterError> {
        let seq = self.seq;
        self.acker
            .double_ack()
            .await
            .map_err(|e| ack_error("ack", seq, e))?;
        if let Some(name) = &self.blob {
            object::delete(&self.cluster, BLOB_STORE, name).await;
        }
        Ok(())
    }

    /// Gives it back for immediate redelivery (to this host or the shard's
    /// next owner), and waits until the server confirmed.
    pub async fn nak(self) -> Result<(), ClusterError> {
        let seq = self.seq;
        self.acker
            .double_ack_with(AckKind::Nak(None))
            .await
            .map_err(|e| ack_error("nak", seq, e))
    }

    /// Tells the server the Turn is still running, so `ack_wait` starts
    /// over. The host calls it every 3 s while the Turn runs.
    pub async fn progress(&self) -> Result<(), ClusterError> {
        self.acker
            .ack_with(AckKind::Progress)
            .await
            .map_err(|e| ack_error("progress", self.seq, e))
    }
}

fn ack_error(what: &str, seq: u64, error: async_nats::Error) -> ClusterError {
    ClusterError::Request {
        what: format!("{what} {INBOX_STREAM} seq {seq}"),
        reason: error.to_string(),
    }
}

/// The first input of `address` stored after `after_seq` (its cursor),
/// with its sequence: how a host takes an instance's inputs in acceptance
/// order whatever order the doorbell rang in. `None` when there is none.
///
/// It reads with a direct get (any replica answers), and asks the stream
/// leader before answering `None`, since a replica may lag behind.
pub async fn next_for_instance(
    cluster: &Cluster,
    address: &InstanceAddress,
    after_seq: u64,
) -> Result<Option<(u64, Envelope)>, ClusterError> {
    let subject = address.inbox_subject();
    let what = format!("read {subject} after seq {after_seq}");
    let stream = cluster
        .jetstream()
        .get_stream_no_info(INBOX_STREAM)
        .await
        .map_err(|e| request_error(&what, e))?;
    let from = after_seq.saturating_add(1);
    let found: Option<StreamMessage> = match stream
        .direct_get_next_for_subject(subject.clone(), Some(from))
        .await
    {
        Ok(message) => Some(message),
        Err(error) if matches!(error.kind(), DirectGetErrorKind::NotFound) => {
            match stream
                .get_first_raw_message_by_subject(&subject, from)
                .await
            {
                Ok(message) => Some(message),
                Err(error) if matches!(error.kind(), LastRawMessageErrorKind::NoMessageFound) => {
                    None
                }
                Err(error) => return Err(request_error(&what, error)),
            }
        }
        Err(error) => return Err(request_error(&what, error)),
    };
    match found {
        None => Ok(None),
        Some(message) => {
            let (envelope, _) =
                read_stored(cluster, &subject, message.sequence, &message.payload).await?;
            Ok(Some((message.sequence, envelope)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::{EventSource, EventSourceKind};

    fn envelope(input: &str) -> Envelope {
        let mut event = AgentEvent::new(
            "user_message",
            EventSource::new(EventSourceKind::Connector, "cli"),
        );
        event.input = Some(input.to_string());
        Envelope {
            id: event.id.clone(),
            address: InstanceAddress::new("ws", "assistant", "user:1"),
            event,
            reply_to: Some("gdn.reply.cli.1".to_string()),
        }
    }

    fn stored(bytes: &[u8]) -> Result<EnvelopeBody, serde_json::Error> {
        match serde_json::from_slice(bytes)? {
            StoredBody::Inline(body) => Ok(*body),
            StoredBody::Blob(_) => panic!("an inline body read as a blob reference"),
        }
    }

    #[test]
    fn envelopes_round_trip_and_check_their_subject() {
        let sent = envelope("hello");
        let bytes = sent.encode().unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["v"], 1);
        let subject = sent.address.inbox_subject();
        let read = Envelope::from_body(&subject, 7, stored(&bytes).unwrap()).unwrap();
        assert_eq!(read, sent);

        let wrong_version = String::from_utf8(bytes.clone())
            .unwrap()
            .replacen("\"v\":1", "\"v\":9", 1)
            .into_bytes();
        for (subject, bytes) in [
            ("gdn.in.000.ws.other.x", bytes.clone()),
            (subject.as_str(), wrong_version),
        ] {
            let error = Envelope::from_body(subject, 7, stored(&bytes).unwrap()).unwrap_err();
            assert_eq!(error.code(), "E_CLUSTER_CORRUPT", "{error}");
            assert!(error.to_string().contains("seq 7"), "{error}");
        }
        assert!(stored(b"not json").is_err());
        let reference = serde_json::to_vec(&BlobReference {
            v: 1,
            id: "evt_1".into(),
            blob: blob_name("evt_1"),
            bytes: 300_000,
        })
        .unwrap();
        assert!(matches!(
            serde_json::from_slice(&reference).unwrap(),
            StoredBody::Blob(BlobReference { bytes: 300_000, .. })
        ));
    }

    #[test]
    fn a_body_over_the_envelope_limit_is_refused() {
        let error = envelope(&"x".repeat(MAX_ENVELOPE_BYTES))
            .encode()
            .unwrap_err();
        assert_eq!(error.code(), "E_CLUSTER_TOO_LARGE");
        assert!(error.to_string().contains("assistant:user:1"), "{error}");
    }
}
