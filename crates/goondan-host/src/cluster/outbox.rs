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

#[cfg(test)]
mod tests {
    //! Outbox replay against a real nats-server: the delivery is taken
    //! from a shard's inbox and the commit written as an agent writes it,
    //! so the sequences and the commit's record are the real ones.

    use super::*;
    use crate::cluster::testing::{
        address, answer, answer_text, envelope, next_delivery, next_reply, no_reply_within,
        request_from, send, TestCluster, WORKSPACE,
    };
    use goondan_cluster::inbox::ShardInbox;
    use goondan_store::OutboxMessage;
    use std::time::Duration;

    /// What the outbox holds for the orchestrator's own request `envelope`
    /// (one with a reply subject) answered with `text`.
    fn answered_to_orchestrator(envelope: &Envelope, text: &str) -> OutboxMessage {
        OutboxMessage {
            to: goondan_ipc::ORCHESTRATOR.to_string(),
            event: answer(&protocol::correlation_id_for_id(&envelope.id), text),
        }
    }

    #[tokio::test]
    async fn a_consumed_request_is_answered_again_from_the_outbox_on_its_reply_subject() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let (reply_subject, mut replies) = test.reply_subject().await;
        let sent = envelope(&address("user-1"), "q1", Some(&reply_subject));
        send(&test.cluster, &sent).await;
        let mut shard_inbox = ShardInbox::open(&test.cluster, sent.address.shard())
            .await
            .unwrap();
        let delivery = next_delivery(&mut shard_inbox).await;
        // The Turn committed this input and two answers: this input's, and
        // one to an earlier request that must not be sent with it.
        let other = envelope(&sent.address, "q0", None);
        let outbox = vec![
            answered_to_orchestrator(&other, "a0"),
            answered_to_orchestrator(&sent, "a1"),
        ];
        test.commit(&sent.address, Some(delivery.seq), outbox).await;

        let consumed = answer_from_outbox(&test.cluster, WORKSPACE, &delivery)
            .await
            .unwrap();
        assert_eq!(consumed, Consumed::Answered);
        let reply = next_reply(&mut replies).await;
        assert!(reply.error.is_none(), "{reply:?}");
        let answer = reply.answer.expect("an answer");
        assert_eq!(answer_text(&answer).as_deref(), Some("a1"));
        assert_eq!(
            protocol::in_reply_to(&answer),
            Some(protocol::correlation_id_for_id(&sent.id).as_str())
        );
        // The caller learns which instance answered.
        assert_eq!(answer.instance_key.as_deref(), Some("user-1"));
        no_reply_within(&mut replies, Duration::from_millis(300)).await;
    }

    #[tokio::test]
    async fn a_consumed_request_from_another_host_is_answered_again_to_its_callers_inbox() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let sent = request_from(&address("user-2"), "help", "planner:main", "corr-42");
        send(&test.cluster, &sent).await;
        let mut shard_inbox = ShardInbox::open(&test.cluster, sent.address.shard())
            .await
            .unwrap();
        let delivery = next_delivery(&mut shard_inbox).await;
        let outbox = vec![OutboxMessage {
            to: "planner:main".to_string(),
            event: answer("corr-42", "helped"),
        }];
        test.commit(&sent.address, Some(delivery.seq), outbox).await;

        let consumed = answer_from_outbox(&test.cluster, WORKSPACE, &delivery)
            .await
            .unwrap();
        assert_eq!(consumed, Consumed::Answered);
        // The answer waits in the caller's inbox, under the id every copy
        // of it carries (so a copy the first host sent too is stored once).
        let caller = InstanceAddress::new(WORKSPACE, "planner", "main");
        let mut callers_inbox = if caller.shard() == sent.address.shard() {
            delivery.ack().await.unwrap();
            shard_inbox
        } else {
            ShardInbox::open(&test.cluster, caller.shard())
                .await
                .unwrap()
        };
        let forwarded = next_delivery(&mut callers_inbox).await;
        assert_eq!(forwarded.envelope.address, caller);
        assert_eq!(forwarded.envelope.id, inbox::answer_message_id("corr-42"));
        assert_eq!(forwarded.envelope.reply_to, None);
        assert_eq!(
            answer_text(&forwarded.envelope.event).as_deref(),
            Some("helped")
        );
    }

    /// The cases where nothing is sent again: what the replay says, and
    /// that no reply left.
    #[tokio::test]
    async fn a_delivery_not_answered_by_the_last_commit_is_left_to_the_agent() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let (reply_subject, mut replies) = test.reply_subject().await;
        let instance = address("user-3");
        let mut shard_inbox = ShardInbox::open(&test.cluster, instance.shard())
            .await
            .unwrap();

        // No commit at all: a new instance.
        let first = envelope(&instance, "q1", Some(&reply_subject));
        send(&test.cluster, &first).await;
        let first_delivery = next_delivery(&mut shard_inbox).await;
        let consumed = answer_from_outbox(&test.cluster, WORKSPACE, &first_delivery)
            .await
            .unwrap();
        assert_eq!(consumed, Consumed::No, "an instance without a commit");

        let second = envelope(&instance, "q2", Some(&reply_subject));
        send(&test.cluster, &second).await;
        let second_delivery = next_delivery(&mut shard_inbox).await;
        assert!(second_delivery.seq > first_delivery.seq);

        // The last commit consumed the first input and answered it.
        test.commit(
            &instance,
            Some(first_delivery.seq),
            vec![answered_to_orchestrator(&first, "a1")],
        )
        .await;
        let consumed = answer_from_outbox(&test.cluster, WORKSPACE, &second_delivery)
            .await
            .unwrap();
        assert_eq!(consumed, Consumed::No, "a delivery above the cursor");

        // The last commit consumed the second input: the first is below
        // its cursor, and is left to the agent's log even when that
        // commit's outbox holds an answer correlated to it (the outbox
        // speaks only for the input at the cursor).
        test.commit(
            &instance,
            Some(second_delivery.seq),
            vec![
                answered_to_orchestrator(&first, "a1 again"),
                answered_to_orchestrator(&second, "a2"),
            ],
        )
        .await;
        let consumed = answer_from_outbox(&test.cluster, WORKSPACE, &first_delivery)
            .await
            .unwrap();
        assert_eq!(consumed, Consumed::Earlier, "a delivery below the cursor");

        // At the cursor, but its answer is not in the outbox (a fold that
        // carried the cursor over and answered nothing).
        test.commit(&instance, Some(second_delivery.seq), Vec::new())
            .await;
        let consumed = answer_from_outbox(&test.cluster, WORKSPACE, &second_delivery)
            .await
            .unwrap();
        assert_eq!(consumed, Consumed::Earlier, "at the cursor, no answer");

        no_reply_within(&mut replies, Duration::from_millis(300)).await;
    }

    #[tokio::test]
    async fn a_consumed_send_that_wants_no_answer_is_answered_without_sending_anything() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let sent = envelope(&address("user-4"), "fyi", None);
        send(&test.cluster, &sent).await;
        let mut shard_inbox = ShardInbox::open(&test.cluster, sent.address.shard())
            .await
            .unwrap();
        let delivery = next_delivery(&mut shard_inbox).await;
        // An outbox holding an answer to someone: not this input's, since
        // a send has no correlation id.
        let outbox = vec![OutboxMessage {
            to: "planner:main".to_string(),
            event: answer("corr-other", "unrelated"),
        }];
        test.commit(&sent.address, Some(delivery.seq), outbox).await;

        let consumed = answer_from_outbox(&test.cluster, WORKSPACE, &delivery)
            .await
            .unwrap();
        assert_eq!(consumed, Consumed::Answered);
        // Only the send itself (not yet acked) is in the inbox.
        assert_eq!(test.n_stored_inputs().await, 1);
    }
}
