//! The inbox against a real three-server cluster: the conformance cases of
//! the scale-out design (duplicate send, redelivery, reordering, a crash
//! between commit and ack, a poison message), and what one shard sustains.

use goondan_cluster::inbox::{self, Envelope, InboxOptions, ShardInbox};
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::testing::NatsCluster;
use goondan_cluster::{layout, Cluster};
use goondan_types::{AgentEvent, EventSource, EventSourceKind};
use std::time::{Duration, Instant};

async fn start() -> Option<(NatsCluster, Cluster)> {
    let nats = NatsCluster::start(3).await?;
    let cluster = nats.connect().await;
    layout::ensure(&cluster).await.unwrap();
    Some((nats, cluster))
}

fn address(key: &str) -> InstanceAddress {
    InstanceAddress::new("ws-1", "assistant", key)
}

fn envelope(address: &InstanceAddress, input: &str) -> Envelope {
    let mut event = AgentEvent::new(
        "user_message",
        EventSource::new(EventSourceKind::Connector, "cli"),
    );
    event.input = Some(input.to_string());
    Envelope {
        id: event.id.clone(),
        address: address.clone(),
        event,
        reply_to: None,
    }
}

fn input(envelope: &Envelope) -> &str {
    envelope.event.input.as_deref().unwrap()
}

fn short_ack_wait() -> InboxOptions {
    InboxOptions {
        ack_wait: Duration::from_secs(1),
        ..InboxOptions::default()
    }
}

async fn next(inbox: &mut ShardInbox) -> inbox::Delivery {
    tokio::time::timeout(Duration::from_secs(5), inbox.next())
        .await
        .expect("a delivery within 5 s")
        .expect("the inbox is open")
        .unwrap_or_else(|e| panic!("a readable delivery: {e}"))
}

async fn nothing_within(inbox: &mut ShardInbox, wait: Duration) {
    if let Ok(delivery) = tokio::time::timeout(wait, inbox.next()).await {
        panic!("unexpected delivery: {delivery:?}");
    }
}

/// Whether blob `name` is there, once the replicas agree (reads may be
/// answered by a replica a moment behind).
async fn blob_exists(blobs: &async_nats::jetstream::object_store::ObjectStore, name: &str) -> bool {
    let mut seen = Vec::new();
    for _ in 0..50 {
        seen.push(blobs.info(name).await.is_ok_and(|info| !info.deleted));
        if seen.len() >= 3
            && seen[seen.len() - 3..]
                .iter()
                .all(|s| *s == seen[seen.len() - 1])
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen[seen.len() - 1]
}

async fn stored_messages(cluster: &Cluster) -> u64 {
    cluster
        .jetstream()
        .get_stream(layout::INBOX_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .messages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_send_is_stored_once_and_reported() {
    let Some((_nats, cluster)) = start().await else {
        return;
    };
    let sent = envelope(&address("user-1"), "hello");
    let first = inbox::send(&cluster, &sent).await.unwrap();
    assert!(!first.duplicate);
    // A retry by the publisher (same id) is recognized within the window,
    // even with another body.
    let mut retried = sent.clone();
    retried.event.input = Some("hello again".to_string());
    let second = inbox::send(&cluster, &retried).await.unwrap();
    assert!(second.duplicate);
    assert_eq!(second.seq, first.seq);
    assert_eq!(stored_messages(&cluster).await, 1);

    let mut shard = ShardInbox::open(&cluster, sent.address.shard())
        .await
        .unwrap();
    let delivery = next(&mut shard).await;
    assert_eq!(delivery.envelope, sent);
    assert_eq!((delivery.seq, delivery.delivered), (first.seq, 1));
    delivery.ack().await.unwrap();
    assert_eq!(stored_messages(&cluster).await, 0, "acked work leaves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nak_and_an_expired_ack_wait_redeliver_and_progress_holds_it() {
    let Some((_nats, cluster)) = start().await else {
        return;
    };
    let sent = envelope(&address("user-2"), "work");
    let receipt = inbox::send(&cluster, &sent).await.unwrap();
    let mut shard = ShardInbox::open_with(&cluster, sent.address.shard(), &short_ack_wait())
        .await
        .unwrap();

    let first = next(&mut shard).await;
    assert_eq!((first.seq, first.delivered), (receipt.seq, 1));
    first.nak().await.unwrap();
    let second = next(&mut shard).await;
    assert_eq!((second.seq, second.delivered), (receipt.seq, 2));

    // Left unanswered, it comes back after ack_wait.
    let unanswered_at = Instant::now();
    drop(second);
    let third = next(&mut shard).await;
    assert_eq!((third.seq, third.delivered), (receipt.seq, 3));
    assert!(unanswered_at.elapsed() >= Duration::from_millis(900));

    // A running Turn keeps it with progress, well past ack_wait.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        third.progress().await.unwrap();
    }
    nothing_within(&mut shard, Duration::from_millis(500)).await;
    third.ack().await.unwrap();
    nothing_within(&mut shard, Duration::from_millis(1500)).await;
    assert_eq!(stored_messages(&cluster).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_are_taken_in_acceptance_order_when_redeliveries_reorder() {
    let Some((_nats, cluster)) = start().await else {
        return;
    };
    let instance = address("user-3");
    let (one, two) = (envelope(&instance, "one"), envelope(&instance, "two"));
    let seq_one = inbox::send(&cluster, &one).await.unwrap().seq;
    let seq_two = inbox::send(&cluster, &two).await.unwrap().seq;
    assert!(seq_one < seq_two);

    let mut shard = ShardInbox::open(&cluster, instance.shard()).await.unwrap();
    let rang_one = next(&mut shard).await;
    let rang_two = next(&mut shard).await;
    assert_eq!(input(&rang_two.envelope), "two");
    // "one" is handed back and rings again after "two".
    rang_one.nak().await.unwrap();
    let rang_one_again = next(&mut shard).await;
    assert_eq!((rang_one_again.seq, rang_one_again.delivered), (seq_one, 2));

    // The host serves the instance by its cursor, not by the doorbells: a
    // fresh instance (cursor 0) gets "one" first whichever rang first.
    let mut cursor = 0;
    let mut served = Vec::new();
    while let Some((seq, next_input)) = inbox::next_for_instance(&cluster, &instance, cursor)
        .await
        .unwrap()
    {
        served.push(input(&next_input).to_string());
        cursor = seq; // the Turn's commit records it
    }
    assert_eq!(served, ["one", "two"]);
    assert_eq!(cursor, seq_two);

    // Both doorbells are now behind the cursor: acked, nothing else runs.
    for delivery in [rang_two, rang_one_again] {
        assert!(delivery.consumed_by(cursor));
        delivery.ack().await.unwrap();
    }
    // Acked inputs leave the work queue (the removal reaches the replicas
    // a moment after the ack; a host never reads below its cursor anyway).
    let removed_by = Instant::now() + Duration::from_secs(3);
    while inbox::next_for_instance(&cluster, &instance, 0)
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            Instant::now() < removed_by,
            "acked inputs stay in the queue"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another instance on the same inbox stream is not mixed in.
    let other = address("user-4");
    inbox::send(&cluster, &envelope(&other, "elsewhere"))
        .await
        .unwrap();
    assert_eq!(
        inbox::next_for_instance(&cluster, &instance, 0)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_commit_and_ack_redelivers_and_the_cursor_dedupes() {
    let Some((_nats, cluster)) = start().await else {
        return;
    };
    let instance = address("user-5");
    let sent = envelope(&instance, "once");
    let receipt = inbox::send(&cluster, &sent).await.unwrap();

    let mut shard = ShardInbox::open_with(&cluster, instance.shard(), &short_ack_wait())
        .await
        .unwrap();
    let delivery = next(&mut shard).await;
    let (seq, envelope) = inbox::next_for_instance(&cluster, &instance, 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((seq, &envelope), (receipt.seq, &sent));
    // The Turn commits with cursor = seq, and the host dies before acking.
    let committed_cursor = seq;
    drop(delivery);
    drop(shard);

    // The next owner opens the shard and gets the message again.
    let mut shard = ShardInbox::open_with(&cluster, instance.shard(), &short_ack_wait())
        .await
        .unwrap();
    let again = next(&mut shard).await;
    assert_eq!((again.seq, again.delivered), (receipt.seq, 2));
    assert!(
        again.consumed_by(committed_cursor),
        "a duplicate by the cursor"
    );
    assert_eq!(
        inbox::next_for_instance(&cluster, &instance, committed_cursor)
            .await
            .unwrap(),
        None,
        "no new input for the instance"
    );
    again.ack().await.unwrap();
    nothing_within(&mut shard, Duration::from_millis(1500)).await;
    assert_eq!(stored_messages(&cluster).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_is_acked_and_reported_once() {
    let Some((_nats, cluster)) = start().await else {
        return;
    };
    let instance = address("user-6");
    let poison_seq = cluster
        .jetstream()
        .publish(instance.inbox_subject(), "{not an envelope".into())
        .await
        .unwrap()
        .await
        .unwrap()
        .sequence;
    let good = envelope(&instance, "fine");
    inbox::send(&cluster, &good).await.unwrap();

    let mut shard = ShardInbox::open_with(&cluster, instance.shard(), &short_ack_wait())
        .await
        .unwrap();
    let error = tokio::time::timeout(Duration::from_secs(5), shard.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(error.code(), "E_CLUSTER_CORRUPT");
    assert!(
        error.to_string().contains(&format!("seq {poison_seq}")),
        "{error}"
    );
    let delivery = next(&mut shard).await;
    assert_eq!(delivery.envelope, good);
    delivery.ack().await.unwrap();
    // The poison message is gone, not redelivered after ack_wait.
    nothing_within(&mut shard, Duration::from_millis(1500)).await;
    assert_eq!(stored_messages(&cluster).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_an_inbox_hands_back_what_it_held_at_once() {
    let Some((_nats, cluster)) = start().await else {
        return;
    };
    let instance = address("user-7");
    for n in 0..5 {
        inbox::send(&cluster, &envelope(&instance, &format!("m{n}")))
            .await
            .unwrap();
    }
    let long_ack_wait = InboxOptions {
        ack_wait: Duration::from_secs(30),
        ..InboxOptions::default()
    };
    let mut shard = ShardInbox::open_with(&cluster, instance.shard(), &long_ack_wait)
        .await
        .unwrap();
    let taken = next(&mut shard).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(shard.close().await, 4, "the four held back are NAKed");

    // The next owner gets them now, not after the 30 s ack_wait.
    let mut shard = ShardInbox::open(&cluster, instance.shard()).await.unwrap();
    let mut inputs = Vec::new();
    for _ in 0..4 {
        let delivery = next(&mut shard).await;
        assert_eq!(delivery.delivered, 2);
        inputs.push(input(&delivery.envelope).to_string());
        delivery.ack().await.unwrap();
    }
    // Redeliveries come in any order (the cursor restores it).
    inputs.sort();
    assert_eq!(inputs, ["m1", "m2", "m3", "m4"]);
    // The delivery handed out before the close stays valid.
    taken.ack().await.unwrap();
    assert_eq!(stored_messages(&cluster).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shard_throughput_and_send_latency() {
    let Some((_nats, cluster)) = start().await else {
        return;
    };
    const N: usize = 1000;
    let instance = address("bench");
    let mut latencies = Vec::with_capacity(N);
    for n in 0..N {
        let sent = envelope(&instance, &format!("m{n}"));
        let started = Instant::now();
        inbox::send(&cluster, &sent).await.unwrap();
        latencies.push(started.elapsed());
    }
    latencies.sort();
    let p50 = latencies[N / 2];
    let p99 = latencies[N * 99 / 100];

    let mut shard = ShardInbox::open(&cluster, instance.shard()).await.unwrap();
    let started = Instant::now();
    let mut acks = Vec::with_capacity(N);
    let mut last_seq = 0;
    for _ in 0..N {
        let delivery = next(&mut shard).await;
        assert!(delivery.seq > last_seq, "one shard delivers in order");
        last_seq = delivery.seq;
        acks.push(tokio::spawn(delivery.ack()));
    }
    for ack in acks {
        ack.await.unwrap().unwrap();
    }
    let elapsed = started.elapsed();
    eprintln!(
        "send with PubAck: p50 {p50:?}, p99 {p99:?}; one shard: {N} deliveries double-acked in {elapsed:?} ({:.0}/s)",
        N as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(stored_messages(&cluster).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_travels_through_the_blob_store_and_leaves_with_the_ack() {
    let Some((_nats, cluster)) = start().await else {
        return;
    };
    let instance = address("user-8");
    let big = envelope(&instance, &"x".repeat(layout::MAX_MESSAGE_BYTES + 1));
    let receipt = inbox::send(&cluster, &big).await.unwrap();
    let stream_bytes = cluster
        .jetstream()
        .get_stream(layout::INBOX_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .state
        .bytes;
    assert!(stream_bytes < 4096, "the stream holds a reference only");
    let blobs = cluster
        .jetstream()
        .get_object_store(layout::BLOB_STORE)
        .await
        .unwrap();
    let blob_name = format!("inbox/{}", big.id);
    assert!(blob_exists(&blobs, &blob_name).await);

    let (seq, read) = inbox::next_for_instance(&cluster, &instance, 0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((seq, &read), (receipt.seq, &big));
    let mut shard = ShardInbox::open(&cluster, instance.shard()).await.unwrap();
    let delivery = next(&mut shard).await;
    assert_eq!(delivery.envelope, big);
    delivery.ack().await.unwrap();
    assert!(
        !blob_exists(&blobs, &blob_name).await,
        "the blob left with the ack"
    );

    // A late retry of the same send is a duplicate and leaves no blob behind.
    let retried = inbox::send(&cluster, &big).await.unwrap();
    assert!(retried.duplicate);
    assert!(!blob_exists(&blobs, &blob_name).await);
    assert_eq!(stored_messages(&cluster).await, 0);
}
