//! `ClusterJournal` against three real nats-servers: the store contract of
//! `goondan_store::TurnJournal` (round trip, crash recovery, the orphan
//! rule), fencing by a newer claim, blobs, snapshots with purge, a killed
//! stream leader, export to the single-host layout, the inbox cursor and
//! outbox each commit carries, read back by `cursor::last_commit`, and the
//! requests for a person's decision kept in the same log
//! (`ClusterApprovals`, listed by `approvals::waiting`).
//!
//! The tests run on tokio's current-thread runtime on purpose: that is
//! where an AgentProcess calls the synchronous journal from.

use goondan_cluster::cursor::last_commit;
use goondan_cluster::testing::NatsCluster;
use goondan_cluster::{
    export, layout, subject::InstanceAddress, Cluster, ClusterJournal, ClusterOptions, ClusterUrls,
};
use goondan_store::{
    ApprovalLog, CommitContext, Decided, ExtensionStateStore, InstanceStore, OutboxMessage,
    StateRoot, StoreError, TurnJournal,
};
use goondan_types::{
    AgentEvent, ApprovalDecision, ApprovalRequest, ContentPart, EventSource, EventSourceKind,
    JsonValue, Message, MessageEvent, MessageSource, ModelMessage, ToolResultOutput, Verdict,
};
use serde_json::json;
use std::time::{Duration, Instant};

struct Harness {
    nats: NatsCluster,
    cluster: Cluster,
}

impl Harness {
    async fn start() -> Option<Harness> {
        let nats = NatsCluster::start(3).await?;
        let cluster = nats.connect().await;
        layout::ensure(&cluster).await.expect("layout");
        Some(Harness { nats, cluster })
    }

    fn open(&self, address: &InstanceAddress, owner: &str) -> ClusterJournal {
        self.try_open(address, owner).expect("open the journal")
    }

    fn try_open(
        &self,
        address: &InstanceAddress,
        owner: &str,
    ) -> Result<ClusterJournal, goondan_cluster::ClusterError> {
        let urls = ClusterUrls::parse(&self.nats.urls()).unwrap();
        let options = ClusterOptions {
            replicas: 3,
            client_name: format!("test-{owner}"),
            ..ClusterOptions::default()
        };
        ClusterJournal::open(&urls, options, address.clone(), owner)
    }

    /// How many messages the stream holds for `address`.
    async fn n_records(&self, address: &InstanceAddress) -> u64 {
        let stream = self
            .cluster
            .jetstream()
            .get_stream(layout::CONVERSATION_STREAM)
            .await
            .unwrap();
        let filter = format!("{}.>", address.conversation_prefix());
        let mut subjects = stream.info_with_subjects(filter).await.unwrap();
        let mut total = 0;
        use futures_util::StreamExt;
        while let Some(entry) = subjects.next().await {
            total += entry.unwrap().1 as u64;
        }
        total
    }
}

fn user(text: &str) -> Message {
    Message::new(ModelMessage::user(text), MessageSource::User)
}

fn assistant(text: &str) -> Message {
    Message::new(
        ModelMessage::assistant(vec![ContentPart::text(text)]),
        MessageSource::Assistant {
            step_id: "s-1".to_string(),
        },
    )
}

fn append(message: &Message) -> MessageEvent {
    MessageEvent::Append {
        message: message.clone(),
    }
}

/// Records `messages` as appends of `turn_id` and commits them.
fn append_turn(
    journal: &mut ClusterJournal,
    base: &mut Vec<Message>,
    turn_id: &str,
    messages: &[Message],
) {
    let events: Vec<MessageEvent> = messages.iter().map(append).collect();
    for event in &events {
        journal.record_event(turn_id, event).unwrap();
    }
    base.extend(messages.iter().cloned());
    journal
        .commit_turn(turn_id, &events, base, &Default::default())
        .unwrap();
}

#[tokio::test]
async fn record_commit_and_load_round_trip_with_appends_rewrites_and_extension_state() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:round-trip");
    let mut journal = harness.open(&address, "host-a");
    assert_eq!(journal.load().unwrap(), Default::default());
    let mut base = Vec::new();
    append_turn(
        &mut journal,
        &mut base,
        "t-1",
        &[user("hello"), assistant("hi")],
    );
    // A Turn that replaces and removes is folded by a rewrite.
    let replacement = assistant("hi there");
    let events = vec![
        MessageEvent::Replace {
            target_id: base[1].id.clone(),
            message: replacement.clone(),
        },
        MessageEvent::Remove {
            target_id: base[0].id.clone(),
        },
    ];
    for event in &events {
        journal.record_event("t-2", event).unwrap();
    }
    base = vec![replacement];
    journal
        .commit_turn("t-2", &events, &base, &Default::default())
        .unwrap();
    append_turn(&mut journal, &mut base, "t-3", &[user("again")]);
    let mut extensions = journal.extension_state();
    extensions
        .save("memory", &json!({"facts": ["likes tea"]}))
        .unwrap();
    drop(extensions);
    drop(journal);

    let mut reopened = harness.open(&address, "host-b");
    let loaded = reopened.load().unwrap();
    assert_eq!(loaded.base, base);
    assert!(loaded.pending_events.is_empty());
    assert_eq!(loaded.pending_turn_id, None);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let mut extensions = reopened.extension_state();
    assert_eq!(
        extensions.load("memory").unwrap(),
        Some(json!({"facts": ["likes tea"]}))
    );
    assert_eq!(extensions.load("other").unwrap(), None);
    // A second load reads the log again and finds the same.
    assert_eq!(reopened.load().unwrap().base, base);
}

#[tokio::test]
async fn a_turn_that_did_not_commit_is_pending_on_the_next_open_with_its_turn_id() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:crash");
    let mut journal = harness.open(&address, "host-a");
    let mut base = Vec::new();
    append_turn(&mut journal, &mut base, "t-1", &[user("one")]);
    let interrupted = [user("two"), assistant("half an answer")];
    for message in &interrupted {
        journal.record_event("t-2", &append(message)).unwrap();
    }
    drop(journal); // The process dies before the commit.

    let mut journal = harness.open(&address, "host-b");
    let loaded = journal.load().unwrap();
    assert_eq!(loaded.base, base);
    assert_eq!(loaded.pending_turn_id.as_deref(), Some("t-2"));
    assert_eq!(
        loaded.pending_events,
        interrupted.iter().map(append).collect::<Vec<_>>()
    );
    // Folding the pending Turn under its own id, as the contract says.
    base.extend(interrupted.iter().cloned());
    journal
        .commit_turn("t-2", &loaded.pending_events, &base, &Default::default())
        .unwrap();
    drop(journal);
    let loaded = harness.open(&address, "host-c").load().unwrap();
    assert_eq!(loaded.base, base);
    assert_eq!(loaded.pending_turn_id, None);
}

#[tokio::test]
async fn only_the_latest_turns_events_are_pending_and_abandoned_ones_are_reported() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:orphans");
    let mut journal = harness.open(&address, "host-a");
    journal
        .record_event("t-1", &append(&user("abandoned")))
        .unwrap();
    let kept = user("kept");
    journal.record_event("t-2", &append(&kept)).unwrap();
    drop(journal);

    let mut journal = harness.open(&address, "host-b");
    let loaded = journal.load().unwrap();
    assert_eq!(loaded.pending_turn_id.as_deref(), Some("t-2"));
    assert_eq!(loaded.pending_events, vec![append(&kept)]);
    assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("t-1"), "{:?}", loaded.warnings);
    // The append commit of t-2 folds t-2's message only.
    journal
        .commit_turn(
            "t-2",
            &loaded.pending_events,
            std::slice::from_ref(&kept),
            &Default::default(),
        )
        .unwrap();
    drop(journal);
    let loaded = harness.open(&address, "host-c").load().unwrap();
    assert_eq!(loaded.base, vec![kept]);
    assert!(loaded.pending_events.is_empty());
}

#[tokio::test]
async fn a_second_owner_fences_the_first_and_nothing_the_first_tries_lands() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:fence");
    let mut first = harness.open(&address, "host-a");
    let mut first_extensions = first.extension_state();
    let landed = user("before the takeover");
    first.record_event("t-1", &append(&landed)).unwrap();

    let mut second = harness.open(&address, "host-b");
    let seen = second.load().unwrap();
    assert_eq!(seen.pending_events, vec![append(&landed)]);

    // Large, so it goes through the blob store: the refused record's blob
    // is removed too.
    let refused = user(&"after the takeover ".repeat(20_000));
    let error = first.record_event("t-1", &append(&refused)).unwrap_err();
    assert_eq!(error.code(), "E_STORE_FENCED", "{error}");
    assert!(matches!(error, StoreError::Fenced { .. }));
    assert!(error.suggestion().is_some());
    // Poisoned: every later call fails the same way, without writing.
    let error = first
        .commit_turn(
            "t-1",
            &[append(&landed)],
            std::slice::from_ref(&landed),
            &Default::default(),
        )
        .unwrap_err();
    assert_eq!(error.code(), "E_STORE_FENCED");
    let error = first_extensions.save("memory", &json!(1)).unwrap_err();
    assert_eq!(error.code(), "E_STORE_FENCED");
    assert_eq!(first.load().unwrap_err().code(), "E_STORE_FENCED");

    // The second owner goes on; a third reader sees only what landed.
    let answer = assistant("ok");
    second.record_event("t-1", &append(&answer)).unwrap();
    drop(second);
    let mut third = harness.open(&address, "host-c");
    let loaded = third.load().unwrap();
    assert!(loaded.base.is_empty());
    assert_eq!(
        loaded.pending_events,
        vec![append(&landed), append(&answer)]
    );
    assert_eq!(third.extension_state().load("memory").unwrap(), None);
    let blobs = harness
        .cluster
        .jetstream()
        .get_object_store(layout::BLOB_STORE)
        .await
        .unwrap();
    use futures_util::StreamExt;
    assert_eq!(blobs.list().await.unwrap().count().await, 0);
}

#[tokio::test]
async fn a_writer_learns_it_was_taken_over_before_it_writes() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:confirm");
    let mut first = harness.open(&address, "host-a");
    first.load().unwrap();
    first.confirm_writer().unwrap();
    first.record_event("t-1", &append(&user("mine"))).unwrap();
    // Its own writes do not make it doubt itself.
    first.confirm_writer().unwrap();
    let mut second = harness.open(&address, "host-b");
    second.load().unwrap();
    let error = first.confirm_writer().unwrap_err();
    assert_eq!(error.code(), "E_STORE_FENCED", "{error}");
    // The check wrote nothing, and the new owner is still the writer.
    second.confirm_writer().unwrap();
    second
        .record_event("t-2", &append(&user("theirs")))
        .unwrap();
}

#[tokio::test]
async fn a_tool_result_larger_than_a_message_round_trips_through_the_blob_store() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:blob");
    let mut journal = harness.open(&address, "host-a");
    let big_output = "x".repeat(300 * 1024);
    let tool = Message::new(
        ModelMessage::tool(vec![ContentPart::tool_result(
            "call-1",
            "bash",
            ToolResultOutput::Text(big_output.clone()),
        )]),
        MessageSource::Tool {
            tool_call_id: "call-1".to_string(),
            tool_name: "bash".to_string(),
        },
    );
    let mut base = vec![];
    append_turn(
        &mut journal,
        &mut base,
        "t-1",
        &[user("run it"), tool.clone()],
    );
    // An interrupted Turn with a large pending event, and a large state.
    let pending_tool = Message {
        id: "msg_pending_big".to_string(),
        ..tool.clone()
    };
    journal.record_event("t-2", &append(&pending_tool)).unwrap();
    let big_state = JsonValue::String(big_output.clone());
    journal.extension_state().save("cache", &big_state).unwrap();
    drop(journal);

    let mut journal = harness.open(&address, "host-b");
    let loaded = journal.load().unwrap();
    assert_eq!(loaded.base, base);
    assert_eq!(loaded.pending_events, vec![append(&pending_tool)]);
    assert_eq!(
        journal.extension_state().load("cache").unwrap(),
        Some(big_state)
    );
    let blobs = harness
        .cluster
        .jetstream()
        .get_object_store(layout::BLOB_STORE)
        .await
        .unwrap();
    use futures_util::StreamExt;
    let n_blobs = blobs.list().await.unwrap().count().await;
    assert!(n_blobs >= 3, "{n_blobs} blobs");
}

#[tokio::test]
async fn the_last_commit_holds_the_inbox_cursor_and_outbox_through_blobs_snapshots_and_owners() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:cursor");
    let last = |address: &InstanceAddress| {
        let (cluster, address) = (harness.cluster.clone(), address.clone());
        async move { last_commit(&cluster, &address).await.unwrap() }
    };
    // A snapshot after every commit: earlier records are purged, so a new
    // owner learns the cursor from the snapshot.
    let mut journal = harness.open(&address, "host-a").with_snapshot_every(1);
    assert_eq!(last(&address).await, None, "a claim is not a commit");

    let mut answer = AgentEvent::new(
        "response",
        EventSource::new(EventSourceKind::Agent, "coder"),
    );
    answer.input = Some("a1".to_string());
    let outbox = vec![OutboxMessage {
        to: "orchestrator".to_string(),
        event: answer,
    }];
    let mut base = vec![user("q1"), assistant("a1")];
    let events: Vec<MessageEvent> = base.iter().map(append).collect();
    for event in &events {
        journal.record_event("t-1", event).unwrap();
    }
    let context = CommitContext {
        inbox_seq: Some(5),
        outbox: outbox.clone(),
    };
    journal
        .commit_turn("t-1", &events, &base, &context)
        .unwrap();
    let first = last(&address).await.expect("a commit");
    assert_eq!(first.inbox_seq, Some(5));
    assert_eq!(first.outbox, outbox);

    // A rewrite too large for one message (its body is a blob) that
    // consumed no input: the cursor is carried over, the outbox is not.
    let big = user(&"x".repeat(1_100_000));
    let rewrite = [MessageEvent::Truncate, append(&big)];
    for event in &rewrite {
        journal.record_event("t-2", event).unwrap();
    }
    base = vec![big.clone()];
    journal
        .commit_turn("t-2", &rewrite, &base, &CommitContext::default())
        .unwrap();
    let second = last(&address).await.expect("a commit");
    assert!(second.seq > first.seq);
    assert_eq!(second.inbox_seq, Some(5));
    assert!(second.outbox.is_empty());
    drop(journal);

    // A new owner folds a Turn of its own without an input: it still
    // writes the cursor it read from the snapshot.
    let mut journal = harness.open(&address, "host-b");
    assert_eq!(journal.load().unwrap().base, base);
    append_turn(&mut journal, &mut base, "t-3", &[user("q3")]);
    assert_eq!(last(&address).await.unwrap().inbox_seq, Some(5));
    let events = [append(&assistant("a3"))];
    journal.record_event("t-4", &events[0]).unwrap();
    base.push(assistant("a3"));
    let context = CommitContext {
        inbox_seq: Some(9),
        outbox: Vec::new(),
    };
    journal
        .commit_turn("t-4", &events, &base, &context)
        .unwrap();
    assert_eq!(last(&address).await.unwrap().inbox_seq, Some(9));
}

#[tokio::test]
async fn snapshots_purge_the_log_and_loading_still_gives_the_full_history() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:snapshots");
    let mut journal = harness.open(&address, "host-a").with_snapshot_every(2);
    let mut base = Vec::new();
    for turn in 0..10 {
        let turn_id = format!("t-{turn}");
        append_turn(
            &mut journal,
            &mut base,
            &turn_id,
            &[user(&format!("q{turn}")), assistant(&format!("a{turn}"))],
        );
        if turn == 4 {
            // A rewrite in the middle snapshots at once.
            let event = MessageEvent::Remove {
                target_id: base[0].id.clone(),
            };
            journal.record_event("t-4b", &event).unwrap();
            base.remove(0);
            journal
                .commit_turn("t-4b", &[event], &base, &Default::default())
                .unwrap();
        }
        journal
            .extension_state()
            .save("counter", &json!(turn))
            .unwrap();
    }
    let n_records = harness.n_records(&address).await;
    // The claim, 10 × (2 events + commit + ext) and a snapshot record per
    // two commits would be 51 records without purging.
    assert!(n_records <= 8, "{n_records} records left for the instance");
    drop(journal);

    let mut journal = harness.open(&address, "host-b");
    let loaded = journal.load().unwrap();
    assert_eq!(loaded.base.len(), 19);
    assert_eq!(loaded.base, base);
    assert!(loaded.pending_events.is_empty());
    assert_eq!(
        journal.extension_state().load("counter").unwrap(),
        Some(json!(9))
    );
    let snapshots = harness
        .cluster
        .jetstream()
        .get_object_store(layout::SNAPSHOT_STORE)
        .await
        .unwrap();
    use futures_util::StreamExt;
    let n_snapshots = snapshots.list().await.unwrap().count().await;
    assert_eq!(n_snapshots, 1, "older snapshots are deleted");
}

#[tokio::test]
async fn a_thousand_message_history_loads_and_appends_are_measured_against_the_file_store() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:thousand");
    let mut journal = harness.open(&address, "host-a");
    let mut base = Vec::new();
    let started = Instant::now();
    for turn in 0..100 {
        let messages: Vec<Message> = (0..10)
            .map(|n| {
                user(&format!(
                    "turn {turn} message {n}: {}",
                    "lorem ipsum ".repeat(20)
                ))
            })
            .collect();
        append_turn(&mut journal, &mut base, &format!("t-{turn}"), &messages);
    }
    let cluster_elapsed = started.elapsed();
    drop(journal);

    let started = Instant::now();
    let mut journal = harness.open(&address, "host-b");
    let loaded = journal.load().unwrap();
    let load_elapsed = started.elapsed();
    assert_eq!(loaded.base.len(), 1000);
    assert_eq!(loaded.base, base);
    drop(journal);

    // The same history without snapshots: a replay of all 1,100 records.
    let unsnapshotted = InstanceAddress::new("ws-1", "coder", "user:thousand-no-snapshot");
    let mut journal = harness
        .open(&unsnapshotted, "host-a")
        .with_snapshot_every(u64::MAX);
    let mut replayed_base = Vec::new();
    for (turn, chunk) in base.chunks(10).enumerate() {
        append_turn(
            &mut journal,
            &mut replayed_base,
            &format!("t-{turn}"),
            chunk,
        );
    }
    drop(journal);
    let started = Instant::now();
    let loaded = harness.open(&unsnapshotted, "host-b").load().unwrap();
    let full_replay_elapsed = started.elapsed();
    assert_eq!(loaded.base, base);

    // The same workload on the file store (default sync policy).
    let dir = tempfile::tempdir().unwrap();
    let store = InstanceStore::new(StateRoot::new(dir.path()).workspace("ws-1"));
    let mut instance = store.open("coder", "user:thousand").unwrap();
    let file_journal = instance.journal_mut();
    let mut file_base: Vec<Message> = Vec::new();
    let started = Instant::now();
    for (turn, chunk) in base.chunks(10).enumerate() {
        let events: Vec<MessageEvent> = chunk.iter().map(append).collect();
        for event in &events {
            file_journal
                .record_event(&format!("t-{turn}"), event)
                .unwrap();
        }
        file_base.extend(chunk.iter().cloned());
        file_journal
            .commit_turn(
                &format!("t-{turn}"),
                &events,
                &file_base,
                &Default::default(),
            )
            .unwrap();
    }
    let file_elapsed = started.elapsed();
    eprintln!(
        "1000 appends in 100 turns: cluster {:?} ({:?} per record, events and commits), file store {:?} ({:?} per record); open + load of 1000 messages: snapshot + replay {:?}, full replay {:?}",
        cluster_elapsed,
        cluster_elapsed / 1100,
        file_elapsed,
        file_elapsed / 1100,
        load_elapsed,
        full_replay_elapsed
    );
    assert!(load_elapsed < Duration::from_secs(10), "{load_elapsed:?}");
}

#[tokio::test]
async fn appends_resume_after_the_stream_leader_is_killed_with_nothing_lost_or_doubled() {
    let Some(mut harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:leader");
    let mut journal = harness.open(&address, "host-a");
    let mut base = Vec::new();
    for turn in 0..5 {
        append_turn(
            &mut journal,
            &mut base,
            &format!("t-{turn}"),
            &[user(&format!("q{turn}")), assistant(&format!("a{turn}"))],
        );
    }
    let mut stream = harness
        .cluster
        .jetstream()
        .get_stream(layout::CONVERSATION_STREAM)
        .await
        .unwrap();
    let leader = stream
        .info()
        .await
        .unwrap()
        .cluster
        .clone()
        .and_then(|cluster| cluster.leader)
        .expect("the stream has a leader");
    let index = harness.nats.index_of(&leader).expect("a known server");
    harness.nats.kill(index);
    let started = Instant::now();
    let mut longest_turn = Duration::ZERO;
    for turn in 5..15 {
        let turn_started = Instant::now();
        append_turn(
            &mut journal,
            &mut base,
            &format!("t-{turn}"),
            &[user(&format!("q{turn}")), assistant(&format!("a{turn}"))],
        );
        longest_turn = longest_turn.max(turn_started.elapsed());
    }
    eprintln!(
        "10 turns after killing the GDN_CONV leader {leader}: {:?}, the longest {longest_turn:?}",
        started.elapsed()
    );
    drop(journal);
    let loaded = harness.open(&address, "host-b").load().unwrap();
    assert_eq!(loaded.base.len(), 30);
    assert_eq!(loaded.base, base);
    assert!(loaded.pending_events.is_empty());
}

#[tokio::test]
async fn export_writes_files_the_file_store_loads_as_the_same_conversation() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:export");
    let mut journal = harness.open(&address, "host-a");
    let mut base = Vec::new();
    append_turn(
        &mut journal,
        &mut base,
        "t-1",
        &[user("hello"), assistant("hi")],
    );
    journal
        .record_event("t-2", &append(&user("pending")))
        .unwrap();
    journal
        .extension_state()
        .save("memory", &json!({"k": "v"}))
        .unwrap();
    let from_cluster = {
        drop(journal);
        harness.open(&address, "host-b").load().unwrap()
    };

    let dir = tempfile::tempdir().unwrap();
    let workspace = StateRoot::new(dir.path()).workspace("ws-1");
    let paths = workspace.instance("coder", "user:export");
    export(&harness.cluster, &address, paths.dir())
        .await
        .unwrap();
    let mut instance = InstanceStore::new(workspace)
        .open("coder", "user:export")
        .unwrap();
    let from_disk = instance.journal_mut().load().unwrap();
    assert_eq!(from_disk, from_cluster);
    assert_eq!(from_disk.pending_turn_id.as_deref(), Some("t-2"));
    assert_eq!(
        instance.extension_state_mut().load("memory").unwrap(),
        Some(json!({"k": "v"}))
    );
}

#[tokio::test]
async fn two_owners_claiming_at_once_both_open_and_only_the_later_claim_writes() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:race");
    let first = user("first");
    let mut seed = harness.open(&address, "host-0");
    seed.record_event("t-1", &append(&first)).unwrap();
    drop(seed);
    let (mut a, mut b) = std::thread::scope(|scope| {
        let a = scope.spawn(|| harness.open(&address, "host-a"));
        let b = scope.spawn(|| harness.open(&address, "host-b"));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (from_a, from_b) = (user("from a"), user("from b"));
    let wrote_a = a.record_event("t-1", &append(&from_a));
    let wrote_b = b.record_event("t-1", &append(&from_b));
    assert!(
        wrote_a.is_ok() != wrote_b.is_ok(),
        "exactly one owner writes: {wrote_a:?} / {wrote_b:?}"
    );
    let winner = if wrote_a.is_ok() { &from_a } else { &from_b };
    for loser in [wrote_a, wrote_b].into_iter().filter_map(Result::err) {
        assert_eq!(loser.code(), "E_STORE_FENCED");
    }
    drop((a, b));
    let loaded = harness.open(&address, "host-c").load().unwrap();
    assert_eq!(loaded.pending_events, vec![append(&first), append(winner)]);
}

#[tokio::test]
async fn opening_before_any_host_made_the_layout_fails_at_once_with_not_started() {
    let Some(nats) = NatsCluster::start(3).await else {
        return;
    };
    let urls = ClusterUrls::parse(&nats.urls()).unwrap();
    let started = Instant::now();
    let error = ClusterJournal::open(
        &urls,
        ClusterOptions::default(),
        InstanceAddress::new("ws-1", "coder", "user:early"),
        "host-a",
    )
    .unwrap_err();
    assert_eq!(error.code(), "E_CLUSTER_NOT_STARTED", "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

fn approval_request(id: &str, address: &InstanceAddress, asked_at: &str) -> ApprovalRequest {
    ApprovalRequest {
        id: id.to_string(),
        key: format!("call-{id}"),
        agent: address.agent_name.clone(),
        instance_key: address.instance_key.clone(),
        tool: Some("bash__exec".to_string()),
        arguments: json!({"command": "echo ran"}),
        question: None,
        turn_id: "t-1".to_string(),
        event_id: "evt-1".to_string(),
        requested_at: asked_at.to_string(),
        deadline: None,
        on_timeout: Verdict::Deny,
        deciders: vec!["operator".to_string()],
    }
}

fn approve(id: &str) -> ApprovalDecision {
    ApprovalDecision {
        id: id.to_string(),
        verdict: Verdict::Approve,
        arguments: None,
        reason: Some("fine".to_string()),
        by: "cli:test".to_string(),
        decided_at: goondan_types::now_iso(),
    }
}

/// The ids `approvals::waiting` lists for `workspace`.
async fn listed(harness: &Harness, workspace: &str) -> Vec<String> {
    goondan_cluster::approvals::waiting(&harness.cluster, workspace)
        .await
        .unwrap()
        .into_iter()
        .map(|request| request.id)
        .collect()
}

/// Issue 36: a pending approval is durable state of its instance's log:
/// the next owner finds it (and decides it), the previous one can no
/// longer record anything on it, and the workspace's listing shows it
/// while it waits.
#[tokio::test]
async fn issue_36_an_approval_asked_on_one_owner_is_decided_by_the_next_and_listed_while_it_waits()
{
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:approval");
    let other = InstanceAddress::new("ws-1", "coder", "user:other");
    let elsewhere = InstanceAddress::new("ws-2", "coder", "user:approval");
    assert!(listed(&harness, "ws-1").await.is_empty());

    let first = harness.open(&address, "host-a");
    let asked = approval_request("apv_1", &address, "2026-11-27T00:00:02.000Z");
    first.approvals().request(&asked).unwrap();
    harness
        .open(&other, "host-a")
        .approvals()
        .request(&approval_request(
            "apv_0",
            &other,
            "2026-11-27T00:00:01.000Z",
        ))
        .unwrap();
    harness
        .open(&elsewhere, "host-a")
        .approvals()
        .request(&approval_request(
            "apv_9",
            &elsewhere,
            "2026-11-27T00:00:00.000Z",
        ))
        .unwrap();
    assert_eq!(listed(&harness, "ws-1").await, ["apv_0", "apv_1"]);

    // The instance moves: the next owner finds the request as asked.
    let second = harness.open(&address, "host-b");
    let found = second.approvals().by_key("call-apv_1").unwrap().unwrap();
    assert_eq!(found.request, asked);
    assert_eq!(found.decision, None);
    // The previous owner records nothing on it any more.
    let error = first.approvals().decide(&approve("apv_1")).unwrap_err();
    assert_eq!(error.code(), "E_STORE_FENCED", "{error}");
    let decided = |id| second.approvals().decide(&approve(id)).unwrap();
    assert_eq!(decided("apv_1"), Decided::Recorded);
    assert_eq!(decided("apv_1"), Decided::NotWaiting);
    assert_eq!(decided("apv_404"), Decided::NotWaiting);
    assert_eq!(listed(&harness, "ws-1").await, ["apv_0"]);

    // Decided, not yet acted on: a third owner finds the decision, and
    // once it closed the request nothing finds it again.
    let third = harness.open(&address, "host-c");
    let decided = third.approvals().by_key("call-apv_1").unwrap().unwrap();
    assert_eq!(decided.decision.map(|d| d.verdict), Some(Verdict::Approve));
    third.approvals().close("apv_1").unwrap();
    assert_eq!(third.approvals().by_key("call-apv_1").unwrap(), None);
    let fourth = harness.open(&address, "host-d");
    assert_eq!(fourth.approvals().by_key("call-apv_1").unwrap(), None);
    assert_eq!(listed(&harness, "ws-1").await, ["apv_0"]);
    assert_eq!(listed(&harness, "ws-2").await, ["apv_9"]);

    // Closed by a cancel of its Turn: the next owner says so to a late
    // decision.
    let cancelled = approval_request("apv_2", &address, "2026-11-27T00:00:03.000Z");
    fourth.approvals().request(&cancelled).unwrap();
    let of_event = fourth.approvals().of_event(&cancelled.event_id).unwrap();
    assert_eq!(of_event.len(), 1);
    let mut cancel = approve("apv_2");
    cancel.verdict = Verdict::Deny;
    cancel.by = goondan_store::CANCELLED_BY.into();
    assert_eq!(
        fourth.approvals().decide(&cancel).unwrap(),
        Decided::Recorded
    );
    fourth.approvals().close("apv_2").unwrap();
    let fifth = harness.open(&address, "host-e");
    assert_eq!(
        fifth.approvals().decide(&approve("apv_2")).unwrap(),
        Decided::Cancelled
    );
    assert_eq!(listed(&harness, "ws-1").await, ["apv_0"]);
}

/// A snapshot's purge keeps the open approvals of the instance: they are
/// written again after it, so the next owner and the listing still find
/// them, and a closed one is gone for good.
#[tokio::test]
async fn open_approvals_outlive_snapshots_and_their_purge() {
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:approval-snapshots");
    let mut journal = harness.open(&address, "host-a").with_snapshot_every(1);
    let approvals = journal.approvals();
    let waiting = approval_request("apv_w", &address, "2026-11-27T00:00:01.000Z");
    let closed = approval_request("apv_c", &address, "2026-11-27T00:00:02.000Z");
    approvals.request(&waiting).unwrap();
    approvals.request(&closed).unwrap();
    approvals.close("apv_c").unwrap();
    let mut base = Vec::new();
    for turn in 0..3 {
        let turn_id = format!("t-{turn}");
        append_turn(&mut journal, &mut base, &turn_id, &[user(&turn_id)]);
    }
    // The claim, the last commit, the snapshot record and the open request
    // written again: the closed one and everything else was purged.
    let n_records = harness.n_records(&address).await;
    assert!(n_records <= 4, "{n_records} records left for the instance");
    drop(journal);
    let next = harness.open(&address, "host-b");
    let found = next.approvals().by_key("call-apv_w").unwrap().unwrap();
    assert_eq!(found.request, waiting);
    assert_eq!(next.approvals().by_key("call-apv_c").unwrap(), None);
    assert_eq!(listed(&harness, "ws-1").await, ["apv_w"]);
}

/// A Turn's input message, marked as the runtime marks it.
fn input(text: &str, turn_id: &str) -> Message {
    let mut message = user(text);
    message
        .metadata
        .insert("__goondanInbound".into(), JsonValue::Bool(true));
    message
        .metadata
        .insert("eventId".into(), format!("evt-{turn_id}").into());
    message.metadata.insert("turnId".into(), turn_id.into());
    message
}

/// Runs Turns `t-1` to `t-n` as the runtime does (the input and an
/// answer appended and committed, then the extension state saved: Turn k
/// leaves `counter` at k, and `late` appears with Turn 3), and returns
/// the committed base.
fn run_turns(journal: &mut ClusterJournal, n: usize) -> Vec<Message> {
    let mut base = Vec::new();
    let mut extensions = journal.extension_state();
    for k in 1..=n {
        let turn_id = format!("t-{k}");
        append_turn(
            journal,
            &mut base,
            &turn_id,
            &[
                input(&format!("question {k}"), &turn_id),
                assistant(&format!("answer {k}")),
            ],
        );
        extensions.save("counter", &json!(k)).unwrap();
        if k >= 3 {
            extensions.save("late", &json!("since 3")).unwrap();
        }
    }
    base
}

/// Issue 36: fork and rewind in a cluster cut an instance's log at one of
/// its Turns, with the extension state that Turn ended with; a rewind
/// archives what it cuts, fences the instance's earlier writer, and a
/// fork never overwrites an instance that exists.
#[tokio::test]
async fn issue_36_fork_and_rewind_cut_the_log_at_a_turn_with_the_extension_state_it_ended_with() {
    use goondan_cluster::history;
    use goondan_store::{ExtensionStateSource, TurnRef};
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:travel");
    let mut journal = harness.open(&address, "host-a");
    let base = run_turns(&mut journal, 4);

    let turns = history::turns(&harness.cluster, &address).await.unwrap();
    let listed: Vec<_> = turns
        .iter()
        .map(|t| {
            (
                t.index,
                t.start.turn_id.as_deref(),
                t.start.input.as_str(),
                t.end(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (1, Some("t-1"), "question 1", 2),
            (2, Some("t-2"), "question 2", 4),
            (3, Some("t-3"), "question 3", 6),
            (4, Some("t-4"), "question 4", 8)
        ]
    );

    // A fork at Turn 2 by position: its messages, and its state then.
    let forked_key = InstanceAddress::new("ws-1", "coder", "user:travel-fork");
    let forked = history::fork(
        &harness.cluster,
        &address,
        &TurnRef::Index(2),
        &forked_key,
        "cli",
        "test",
    )
    .await
    .unwrap();
    assert_eq!(forked.at.turn_index, 2);
    assert_eq!(forked.at.turn_id.as_deref(), Some("t-2"));
    assert_eq!(forked.n_messages, 4);
    assert_eq!(forked.extension_state, ExtensionStateSource::Snapshot);
    let mut fork = harness.open(&forked_key, "host-b");
    assert_eq!(fork.load().unwrap().base, base[..4]);
    assert_eq!(
        fork.extension_state().load("counter").unwrap(),
        Some(json!(2))
    );
    assert_eq!(fork.extension_state().load("late").unwrap(), None);
    // The key is taken now; a Turn the log does not hold is named.
    for (at, code) in [
        (TurnRef::Index(1), "E_INSTANCE_EXISTS"),
        (TurnRef::Id("t-9".into()), "E_TURN_NOT_FOUND"),
    ] {
        let target = if code == "E_INSTANCE_EXISTS" {
            forked_key.clone()
        } else {
            InstanceAddress::new("ws-1", "coder", "user:other-fork")
        };
        let error = history::fork(&harness.cluster, &address, &at, &target, "cli", "test")
            .await
            .unwrap_err();
        assert_eq!(error.code(), code, "{error}");
        assert!(error.suggestion().is_some());
    }
    assert_eq!(
        fork.load().unwrap().base,
        base[..4],
        "the fork was not touched"
    );

    // A rewind to Turn 1 by id: archived first, then cut; the writer that
    // ran the instance is fenced.
    let rewound = history::rewind(
        &harness.cluster,
        &address,
        &TurnRef::Id("t-1".into()),
        "cli",
        "host-c",
    )
    .await
    .unwrap();
    assert_eq!(rewound.to.turn_index, 1);
    assert_eq!(rewound.extension_state, ExtensionStateSource::Snapshot);
    let archive = rewound.archive.expect("an archive");
    assert_eq!(
        (
            archive.n_turns,
            archive.n_messages,
            archive.n_pending_events
        ),
        (3, 6, 0)
    );
    let error = journal
        .record_event("t-5", &append(&user("too late")))
        .unwrap_err();
    assert_eq!(error.code(), "E_STORE_FENCED", "{error}");
    let mut next = harness.open(&address, "host-d");
    assert_eq!(next.load().unwrap().base, base[..2]);
    assert_eq!(
        next.extension_state().load("counter").unwrap(),
        Some(json!(1))
    );
    assert_eq!(
        next.extension_state().load("late").unwrap(),
        None,
        "removed"
    );
    let snapshots = harness
        .cluster
        .jetstream()
        .get_object_store(layout::SNAPSHOT_STORE)
        .await
        .unwrap();
    let mut object = snapshots.get(&archive.object).await.unwrap();
    let mut bytes = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut object, &mut bytes)
        .await
        .unwrap();
    let manifest: JsonValue = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(manifest["by"], "cli");
    assert_eq!(manifest["rewoundTo"]["turnIndex"], 1);
    assert_eq!(manifest["turnIds"], json!(["t-2", "t-3", "t-4"]));
    assert_eq!(manifest["messages"].as_array().map(Vec::len), Some(6));
    assert_eq!(
        manifest["extensions"],
        json!({"counter": 4, "late": "since 3"})
    );
    drop(next);

    // Already at Turn 1: nothing to cut, nothing archived.
    let again = history::rewind(
        &harness.cluster,
        &address,
        &TurnRef::Index(1),
        "cli",
        "host-c",
    )
    .await
    .unwrap();
    assert_eq!(again.archive, None);
}

/// A Turn whose commit a snapshot's purge took leaves no record of the
/// extension state it ended with: the fork gets the current one and says
/// so, while the Turn the snapshot holds is still exact.
#[tokio::test]
async fn a_fork_at_a_turn_older_than_the_snapshot_falls_back_to_the_current_extension_state() {
    use goondan_cluster::history;
    use goondan_store::{ExtensionStateSource, TurnRef};
    let Some(harness) = Harness::start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:compacted");
    let mut journal = harness.open(&address, "host-a").with_snapshot_every(1);
    run_turns(&mut journal, 3);
    for (at, key, source, counter) in [
        (1, "user:old", ExtensionStateSource::CurrentFallback, 3),
        (3, "user:new", ExtensionStateSource::Unchanged, 3),
    ] {
        let target = InstanceAddress::new("ws-1", "coder", key);
        let forked = history::fork(
            &harness.cluster,
            &address,
            &TurnRef::Index(at),
            &target,
            "cli",
            "test",
        )
        .await
        .unwrap();
        assert_eq!(forked.extension_state, source, "Turn {at}");
        let fork = harness.open(&target, "host-b");
        assert_eq!(
            fork.extension_state().load("counter").unwrap(),
            Some(json!(counter))
        );
    }
}
