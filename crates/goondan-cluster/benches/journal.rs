//! The conversation log in the cluster against the file store, on three
//! real NATS servers (R3) on this machine.
//!
//! Prints:
//! * append overhead: one `record_event` (and one `commit_turn`) until a
//!   quorum stored it, p50/p99, against the file journal's;
//! * activation: open (claim) + load of a conversation of 10, 1,000 and
//!   100,000 messages (a snapshot, then 10 Turns replayed on top), against
//!   the file journal's open + load of the same history.
//!
//! Needs `nats-server` (2.11+) on the `PATH` or in `GOONDAN_NATS_SERVER`.
//! Run: `cargo bench -p goondan-cluster --bench journal`.

use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::testing::NatsCluster;
use goondan_cluster::{layout, ClusterJournal, ClusterOptions, ClusterUrls};
use goondan_store::{InstanceStore, StateRoot, TurnJournal};
use goondan_types::{Message, MessageEvent, MessageSource, ModelMessage};
use std::time::{Duration, Instant};

fn message(i: usize) -> Message {
    Message::new(
        ModelMessage::user(format!("message {i}: {}", "lorem ipsum ".repeat(8))),
        MessageSource::User,
    )
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn ms(duration: Duration) -> String {
    format!("{:.3} ms", duration.as_secs_f64() * 1000.0)
}

/// `turns` Turns of one appended message each; the time of each record
/// and each commit.
fn append_turns(journal: &mut dyn TurnJournal, turns: usize) -> (Vec<Duration>, Vec<Duration>) {
    let mut base = journal.load().unwrap().base;
    let (mut records, mut commits) = (Vec::new(), Vec::new());
    for turn in 0..turns {
        let new = message(base.len());
        let event = MessageEvent::Append {
            message: new.clone(),
        };
        let turn_id = format!("t-{}-{turn}", base.len());
        let started = Instant::now();
        journal.record_event(&turn_id, &event).unwrap();
        records.push(started.elapsed());
        base.push(new);
        let started = Instant::now();
        journal
            .commit_turn(&turn_id, &[event], &base, &Default::default())
            .unwrap();
        commits.push(started.elapsed());
    }
    (records, commits)
}

/// A history of `n` messages: one rewrite (which snapshots), then 10
/// appended Turns the next load replays.
fn build_history(journal: &mut dyn TurnJournal, n: usize) {
    journal.load().unwrap();
    let all: Vec<Message> = (0..n).map(message).collect();
    journal
        .record_event("t-bulk", &MessageEvent::Truncate)
        .unwrap();
    journal
        .commit_turn(
            "t-bulk",
            &[MessageEvent::Truncate],
            &all,
            &Default::default(),
        )
        .unwrap();
    append_turns(journal, 10);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let Some(nats) = runtime.block_on(NatsCluster::start(3)) else {
        eprintln!("no nats-server: nothing measured");
        return;
    };
    runtime.block_on(async { layout::ensure(&nats.connect().await).await.unwrap() });
    let urls = ClusterUrls::parse(&nats.urls()).unwrap();
    let open = |key: &str| {
        ClusterJournal::open(
            &urls,
            ClusterOptions::default(),
            InstanceAddress::new("bench", "agent", key),
            "bench-host",
        )
        .unwrap()
    };
    let root = tempfile::tempdir().unwrap();
    let store = InstanceStore::new(StateRoot::new(root.path()).workspace("bench"));

    let (mut records, mut commits) = append_turns(&mut open("appends"), 500);
    let mut file = store.open("agent", "appends").unwrap().into_parts().journal;
    let (mut file_records, mut file_commits) = append_turns(&mut file, 500);
    drop(file);
    println!("append overhead, 500 Turns of one message:");
    for (what, samples) in [
        ("cluster record_event", &mut records),
        ("cluster commit_turn ", &mut commits),
        ("file    record_event", &mut file_records),
        ("file    commit_turn ", &mut file_commits),
    ] {
        println!(
            "  {what}: p50 {} p99 {}",
            ms(percentile(samples, 0.5)),
            ms(percentile(samples, 0.99))
        );
    }

    println!("activation (open + load; snapshot, then 10 Turns replayed):");
    for n in [10, 1_000, 100_000] {
        let key = format!("history-{n}");
        build_history(&mut open(&key), n);
        let mut file = store.open("agent", &key).unwrap().into_parts().journal;
        build_history(&mut file, n);
        drop(file);
        let mut cluster_times = Vec::new();
        let mut file_times = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let loaded = open(&key).load().unwrap();
            cluster_times.push(started.elapsed());
            assert_eq!(loaded.base.len(), n + 10);
            let started = Instant::now();
            let loaded = store
                .open("agent", &key)
                .unwrap()
                .into_parts()
                .journal
                .load()
                .unwrap();
            file_times.push(started.elapsed());
            assert_eq!(loaded.base.len(), n + 10);
        }
        println!(
            "  {n:>7} messages: cluster p50 {}, file p50 {}",
            ms(percentile(&mut cluster_times, 0.5)),
            ms(percentile(&mut file_times, 0.5))
        );
    }
}
