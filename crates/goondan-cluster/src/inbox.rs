//! The inbox: every instance's inputs in the `GDN_IN` work-queue stream.
//!
//! Owns the [`Envelope`] wire format, [`send`] (publish with a stable
//! `Nats-Msg-Id`, quorum PubAck), one shard's durable pull consumer
//! ([`ShardInbox`]) and the cursor read [`next_for_instance`]. It does not
//! own the cursor itself: the last `commit` of an instance's conversation
//! log records the inbox sequence it consumed (the journal's business).
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
//!   a crash between commit and ack): it is just acked
//!   ([`Delivery::consumed_by`]);
//! - a delivery whose Turn runs gets [`Delivery::progress`] every 3 s;
//! - after the Turn's `commit` (which records `seq` as the new cursor) it is
//!   [`Delivery::ack`]ed, and the work queue drops the message.

use crate::connect::Cluster;
use crate::error::ClusterError;
use crate::layout::{INBOX_STREAM, MAX_MESSAGE_BYTES};
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
    /// The stable event id; sent as `Nats-Msg-Id`, so a retried send within
    /// the duplicate window is stored once.
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

impl Envelope {
    /// The JSON body, refused when larger than
    /// [`MAX_MESSAGE_BYTES`](crate::layout::MAX_MESSAGE_BYTES).
    pub fn to_bytes(&self) -> Result<Vec<u8>, ClusterError> {
        let body = EnvelopeBody {
            v: ENVELOPE_VERSION,
            id: self.id.clone(),
            workspace_id: self.address.workspace_id.clone(),
            agent_name: self.address.agent_name.clone(),
            instance_key: self.address.instance_key.clone(),
            event: self.event.clone(),
            reply_to: self.reply_to.clone(),
        };
        let bytes = serde_json::to_vec(&body).map_err(|e| ClusterError::Request {
            what: format!("encode envelope {}", self.id),
            reason: e.to_string(),
        })?;
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(ClusterError::TooLarge {
                what: format!("envelope {} for {}", self.id, self.address.routing_key()),
                bytes: bytes.len(),
                limit: MAX_MESSAGE_BYTES,
            });
        }
        Ok(bytes)
    }

    /// Decodes a body read from `subject` at `seq`. The body must be of
    /// this version and name the instance whose inbox subject it came on.
    pub fn from_bytes(subject: &str, seq: u64, bytes: &[u8]) -> Result<Envelope, ClusterError> {
        let corrupt = |reason: String| ClusterError::Corrupt {
            what: format!("{INBOX_STREAM} seq {seq} ({subject})"),
            reason,
        };
        let body: EnvelopeBody =
            serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not an envelope: {e}")))?;
        if body.v != ENVELOPE_VERSION {
            return Err(corrupt(format!(
                "envelope version {}, this version reads {ENVELOPE_VERSION}",
                body.v
            )));
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
            return Err(corrupt(format!(
                "the envelope is for {expected}, not the subject it was stored on"
            )));
        }
        Ok(envelope)
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
pub async fn send(cluster: &Cluster, envelope: &Envelope) -> Result<Receipt, ClusterError> {
    let subject = envelope.address.inbox_subject();
    let bytes = envelope.to_bytes()?;
    let what = || format!("send {} to {subject}", envelope.id);
    let publish = PublishMessage::build()
        .payload(bytes.into())
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
        Ok(ack) => Ok(Receipt {
            seq: ack.sequence,
            duplicate: ack.duplicate,
        }),
        Err(error) if error.kind() == PublishErrorKind::TimedOut => Err(ClusterError::Timeout {
            what: what(),
            after: cluster.options().request_timeout,
        }),
        Err(error) => Err(ClusterError::Request {
            what: what(),
            reason: error.to_string(),
        }),
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
            ack_wait: Duration::from_secs(10),
            max_ack_pending: 10_000,
            batch: 64,
        }
    }
}

/// One shard's inbox: the durable pull consumer `shard-NNN` on
/// `gdn.in.NNN.>`, delivering [`Delivery`]s.
pub struct ShardInbox {
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
        let request_error = |what: &str, reason: String| ClusterError::Request {
            what: format!("{what} {INBOX_STREAM} consumer {name}"),
            reason,
        };
        let stream = cluster
            .jetstream()
            .get_stream_no_info(INBOX_STREAM)
            .await
            .map_err(|e| request_error("find the stream of", e.to_string()))?;
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
            .map_err(|e| request_error("create", e.to_string()))?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(options.batch.max(1))
            .messages()
            .await
            .map_err(|e| request_error("pull from", e.to_string()))?;
        Ok(ShardInbox {
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
        match Envelope::from_bytes(message.subject.as_str(), seq, &message.payload) {
            Ok(envelope) => Ok(Delivery {
                envelope,
                seq,
                delivered,
                acker,
            }),
            Err(error) => {
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
    /// redelivery, or a crash between commit and ack): the host just
    /// [`ack`](Self::ack)s it.
    pub fn consumed_by(&self, cursor: u64) -> bool {
        self.seq <= cursor
    }

    /// Acknowledges it and waits until the server confirmed (double ack);
    /// the work queue then drops the message. Call it after the Turn's
    /// commit, never before.
    pub async fn ack(self) -> Result<(), ClusterError> {
        let seq = self.seq;
        self.acker
            .double_ack()
            .await
            .map_err(|e| ack_error("ack", seq, e))
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
    let request_error = |reason: String| ClusterError::Request {
        what: format!("read {subject} after seq {after_seq}"),
        reason,
    };
    let stream = cluster
        .jetstream()
        .get_stream_no_info(INBOX_STREAM)
        .await
        .map_err(|e| request_error(e.to_string()))?;
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
                Err(error) => return Err(request_error(error.to_string())),
            }
        }
        Err(error) => return Err(request_error(error.to_string())),
    };
    found
        .map(|message| {
            Envelope::from_bytes(&subject, message.sequence, &message.payload)
                .map(|envelope| (message.sequence, envelope))
        })
        .transpose()
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

    #[test]
    fn envelopes_round_trip_and_check_their_subject() {
        let sent = envelope("hello");
        let bytes = sent.to_bytes().unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(body["v"], 1);
        let subject = sent.address.inbox_subject();
        assert_eq!(Envelope::from_bytes(&subject, 7, &bytes).unwrap(), sent);

        for (subject, bytes) in [
            ("gdn.in.000.ws.other.x", bytes.clone()),
            (subject.as_str(), b"not json".to_vec()),
            (
                subject.as_str(),
                String::from_utf8(bytes.clone())
                    .unwrap()
                    .replacen("\"v\":1", "\"v\":9", 1)
                    .into_bytes(),
            ),
        ] {
            let error = Envelope::from_bytes(subject, 7, &bytes).unwrap_err();
            assert_eq!(error.code(), "E_CLUSTER_CORRUPT", "{error}");
            assert!(error.to_string().contains("seq 7"), "{error}");
        }
    }

    #[test]
    fn a_body_over_the_limit_is_refused() {
        let error = envelope(&"x".repeat(MAX_MESSAGE_BYTES))
            .to_bytes()
            .unwrap_err();
        assert_eq!(error.code(), "E_CLUSTER_TOO_LARGE");
        assert!(error.to_string().contains("assistant:user:1"), "{error}");
    }
}
