//! Fold (`commit_turn`) time per Turn against the size of the history.
//!
//! A Turn here appends a user and an assistant message. The delta-append
//! fold must cost the same at 10, 1,000 and 100,000 messages of history;
//! the rewrite fold (a Turn that replaced a message) is shown beside it for
//! contrast and grows with the history. Only `commit_turn` is timed; the
//! events are recorded outside the measurement.
//!
//! Run: `cargo bench -p goondan-store --bench fold`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use goondan_store::{FileJournal, Instance, InstanceStore, StateRoot, SyncPolicy, TurnJournal};
use goondan_types::{Message, MessageEvent, MessageSource, ModelMessage};
use std::time::{Duration, Instant};

const HISTORY_SIZES: [usize; 3] = [10, 1_000, 100_000];

fn message(index: usize) -> Message {
    let text = format!("message {index}: the quick brown fox jumps over the lazy dog, twice over.");
    if index.is_multiple_of(2) {
        Message::new(ModelMessage::user(text), MessageSource::User)
    } else {
        Message::new(
            ModelMessage::assistant(vec![goondan_types::ContentPart::text(text)]),
            MessageSource::Assistant {
                step_id: format!("s{index}"),
            },
        )
    }
}

/// An instance whose base holds `history` messages.
fn instance_with_history(
    root: &std::path::Path,
    history: usize,
    policy: SyncPolicy,
) -> (Instance, Vec<Message>) {
    let store =
        InstanceStore::new(StateRoot::new(root).workspace("bench")).with_sync_policy(policy);
    let mut instance = store.open("agent", "k").expect("open");
    let messages: Vec<Message> = (0..history).map(message).collect();
    let events: Vec<MessageEvent> = messages
        .iter()
        .map(|m| MessageEvent::Append { message: m.clone() })
        .collect();
    instance
        .journal_mut()
        .commit_turn("seed", &events, &messages, &Default::default())
        .expect("seed");
    (instance, messages)
}

/// Records one Turn's events and returns them, untimed.
fn record_turn(
    journal: &mut FileJournal,
    turn: usize,
    messages: &mut Vec<Message>,
) -> Vec<MessageEvent> {
    let turn_id = format!("t{turn}");
    let mut events = Vec::new();
    for offset in 0..2 {
        let next = message(messages.len() + offset);
        let event = MessageEvent::Append { message: next };
        journal.record_event(&turn_id, &event).expect("record");
        events.push(event);
    }
    for event in &events {
        if let MessageEvent::Append { message } = event {
            messages.push(message.clone());
        }
    }
    events
}

fn bench_append(c: &mut Criterion, policy: SyncPolicy, label: &str) {
    let mut group = c.benchmark_group(format!("fold_append/{label}"));
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for history in HISTORY_SIZES {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut instance, mut messages) = instance_with_history(dir.path(), history, policy);
        let mut turn = 0;
        group.bench_function(BenchmarkId::from_parameter(history), |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    turn += 1;
                    let journal = instance.journal_mut();
                    let events = record_turn(journal, turn, &mut messages);
                    let started = Instant::now();
                    journal
                        .commit_turn(&format!("t{turn}"), &events, &messages, &Default::default())
                        .expect("commit");
                    total += started.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

fn bench_rewrite(c: &mut Criterion) {
    let mut group = c.benchmark_group("fold_rewrite/ProcessCrash");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    for history in HISTORY_SIZES {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut instance, mut messages) =
            instance_with_history(dir.path(), history, SyncPolicy::ProcessCrash);
        let mut turn = 0;
        group.bench_function(BenchmarkId::from_parameter(history), |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    turn += 1;
                    let turn_id = format!("r{turn}");
                    let replacement = message(turn);
                    let target = messages[0].id.clone();
                    let event = MessageEvent::Replace {
                        target_id: target,
                        message: replacement.clone(),
                    };
                    let journal = instance.journal_mut();
                    journal.record_event(&turn_id, &event).expect("record");
                    messages[0] = replacement;
                    let started = Instant::now();
                    journal
                        .commit_turn(&turn_id, &[event], &messages, &Default::default())
                        .expect("commit");
                    total += started.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

fn folds(c: &mut Criterion) {
    bench_append(c, SyncPolicy::TurnCommit, "TurnCommit");
    bench_append(c, SyncPolicy::ProcessCrash, "ProcessCrash");
    bench_rewrite(c);
}

criterion_group!(benches, folds);
criterion_main!(benches);
