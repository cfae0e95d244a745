//! The inbox cursor and the outbox of an instance, as its last `commit`
//! in `GDN_CONV` records them, read by a host before it wakes an agent.
//!
//! Owns [`last_commit`], one read of the last record on the instance's
//! `<prefix>.commit` subject. It does not write commits (the journal's
//! business, [`crate::ClusterJournal`]), nor decide what to do with a
//! delivery (the host's, in `gdn`).
//!
//! # The transactional outbox
//!
//! A Turn's commit records `inboxSeq`, the `GDN_IN` sequence of the input
//! the Turn consumed, and `outbox`, the answers it sent, in the same
//! atomic write as its messages. A host that gets a delivery with
//! `seq <= inboxSeq` ([`Delivery::consumed_by`](crate::inbox::Delivery::consumed_by))
//! knows the Turn committed: the host before it died between the commit
//! and the ack, or its ack came too late. It then sends that Turn's answer
//! again from the outbox and acks, without waking the agent or calling
//! the model. A forwarded answer carries `Nats-Msg-Id` =
//! [`answer_message_id`](crate::inbox::answer_message_id), so a copy sent
//! by both hosts within the duplicate window is stored once; a later one
//! reaches a caller that no longer waits and is dropped there.

use crate::error::{request_error, ClusterError};
use crate::layout::{BLOB_STORE, CONVERSATION_STREAM};
use crate::object;
use crate::record::{blob_of, Record, RecordKind};
use crate::subject::InstanceAddress;
use crate::Cluster;
use async_nats::jetstream::stream::DirectGetErrorKind;
use goondan_store::OutboxMessage;

/// What an instance's last commit says about its inbox.
#[derive(Debug, Clone, PartialEq)]
pub struct LastCommit {
    /// The commit's sequence in `GDN_CONV`.
    pub seq: u64,
    /// The inbox cursor: every input up to this `GDN_IN` sequence was
    /// consumed by a committed Turn. `None` in commits written before
    /// cursors were, and before the instance consumed a sequenced input.
    pub inbox_seq: Option<u64>,
    /// The answers the committed Turn sent, each with the routing key it
    /// went to.
    pub outbox: Vec<OutboxMessage>,
}

/// The last commit of the instance at `address`, or `None` when it has
/// none (a new instance).
///
/// It is one direct get, which any replica answers: a replica behind its
/// leader may return an earlier commit (or none), whose cursor is then
/// lower than the truth. That errs on the safe side: the delivery goes to
/// the agent, which finds the answer in its conversation.
pub async fn last_commit(
    cluster: &Cluster,
    address: &InstanceAddress,
) -> Result<Option<LastCommit>, ClusterError> {
    let subject = RecordKind::Commit.subject(&address.conversation_prefix(), None);
    let stream = cluster
        .jetstream()
        .get_stream_no_info(CONVERSATION_STREAM)
        .await
        .map_err(|e| request_error(CONVERSATION_STREAM, e))?;
    let message = match stream.direct_get_last_for_subject(subject.as_str()).await {
        Ok(message) => message,
        Err(error) if matches!(error.kind(), DirectGetErrorKind::NotFound) => return Ok(None),
        Err(error) => return Err(request_error(&format!("the last {subject}"), error)),
    };
    let body = match blob_of(&message.payload) {
        Some(reference) => object::read(cluster, BLOB_STORE, &reference.blob).await?,
        None => message.payload.to_vec(),
    };
    let corrupt = |reason: String| ClusterError::Corrupt {
        what: format!("{CONVERSATION_STREAM} #{} ({subject})", message.sequence),
        reason,
    };
    match RecordKind::Commit.decode(&body).map_err(corrupt)? {
        Record::Commit(commit) => Ok(Some(LastCommit {
            seq: message.sequence,
            inbox_seq: commit.inbox_seq,
            outbox: commit.outbox.into_iter().map(OutboxMessage::from).collect(),
        })),
        other => Err(corrupt(format!("not a commit: {other:?}"))),
    }
}
