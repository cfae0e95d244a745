//! Outbox replay: what a shard puller does with a delivery the
//! instance's last commit already consumed (its host died between the
//! commit and the ack, or acked too late). [`answer_from_outbox`] sends
//! the answer that commit's outbox holds again, so the agent is not woken
//! and the model not called; [`Consumed`] tells the puller what is left
//! to do. It reads the commit ([`cursor::last_commit`]) and publishes,
//! nothing more: it neither acks nor wakes an agent (the puller's
//! business, in [`super::shard`]).

use goondan_cluster::cursor;
use goondan_cluster::inbox::{self, Delivery, Envelope};
use goondan_cluster::reply::{self, ClusterReply};
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::{Cluster, ClusterError};
use goondan_ipc::protocol;
use goondan_ipc::RoutingKey;

/// What the instance's last commit says about a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Consumed {
    /// Not consumed (or the commit could not be read): run its Turn.
    No,
    /// Consumed at the cursor, and what its Turn answered was sent again
    /// (or it wants no answer): only ack it.
    Answered,
    /// Below the cursor, or at it without its answer in the outbox: the
    /// agent, told it is a redelivered event, looks it up in its
    /// conversation (answers it from there, or resumes its Turn).
    Earlier,
}

/// When the instance's last commit consumed `delivery` already (its
/// Turn committed, and the host that ran it died before the ack, or
/// acked too late), sends the answer that Turn gave this input again
/// from the commit's outbox, so the agent is not woken and the model
/// not called. A commit that cannot be read leaves the delivery to the
/// agent, which recognises a consumed input in its conversation.
pub(super) async fn answer_from_outbox(
    cluster: &Cluster,
    workspace_id: &str,
    delivery: &Delivery,
) -> Result<Consumed, ClusterError> {
    let envelope = &delivery.envelope;
    let last = match cursor::last_commit(cluster, &envelope.address).await {
        Ok(last) => last,
        Err(error) => {
            tracing::warn!(
                seq = delivery.seq,
                code = error.code(),
                "reading the inbox cursor: {error}; the agent checks its conversation instead"
            );
            return Ok(Consumed::No);
        }
    };
    let Some((cursor, outbox)) = last.and_then(|last| {
        last.inbox_seq
            .filter(|cursor| delivery.consumed_by(*cursor))
            .map(|cursor| (cursor, last.outbox))
    }) else {
        return Ok(Consumed::No);
    };
    if delivery.seq < cursor {
        // Inputs are not taken in inbox order yet (one that came back
        // after `ack_wait` may follow a newer one a host took at once),
        // so a lower sequence may be a Turn that was interrupted, or
        // whose answer is in an earlier commit: the log tells.
        return Ok(Consumed::Earlier);
    }
    // The correlation id an answer to this input carries: the one the
    // orchestrator gives an input with a reply subject, or the calling
    // instance's; none for a send or an answer.
    let correlation_id = match (&envelope.reply_to, &envelope.event.reply_to) {
        (Some(_), _) => Some(protocol::correlation_id_for_id(&envelope.id)),
        (None, Some(reply_to)) if protocol::in_reply_to(&envelope.event).is_none() => {
            Some(reply_to.correlation_id.clone())
        }
        _ => None,
    };
    let Some(correlation_id) = correlation_id else {
        // Nothing to answer: the Turn's commit was all it owed.
        tracing::info!(
            seq = delivery.seq,
            instance = %envelope.address.routing_key(),
            "input already consumed by a committed Turn; acked"
        );
        return Ok(Consumed::Answered);
    };
    let answers: Vec<_> = outbox
        .into_iter()
        .filter(|message| protocol::in_reply_to(&message.event) == Some(correlation_id.as_str()))
        .collect();
    if answers.is_empty() {
        // The last commit is this input's cursor carried over by a fold
        // that answered nothing.
        return Ok(Consumed::Earlier);
    }
    let n_answers = answers.len();
    for message in answers {
        let mut answer = message.event;
        if envelope.reply_to.is_some() {
            answer
                .instance_key
                .get_or_insert_with(|| envelope.address.instance_key.clone());
            reply::send(cluster, envelope, &ClusterReply::answered(answer)).await;
            continue;
        }
        let Ok(caller) = RoutingKey::parse(&message.to, "") else {
            tracing::warn!(to = %message.to, "a committed answer names no instance; not sent again");
            continue;
        };
        let forwarded = Envelope {
            id: inbox::answer_message_id(&correlation_id),
            address: InstanceAddress::new(workspace_id, &caller.agent_name, &caller.instance_key),
            event: answer,
            reply_to: None,
        };
        inbox::send(cluster, &forwarded).await?;
    }
    tracing::info!(
        seq = delivery.seq,
        cursor,
        answers = n_answers,
        instance = %envelope.address.routing_key(),
        "input already consumed by a committed Turn; acked, its answer sent again from the outbox"
    );
    Ok(Consumed::Answered)
}
