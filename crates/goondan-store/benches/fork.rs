//! Fork and history of a 10,000-message instance (issue 36; target: a
//! fork under 100 ms).
//!
//! The instance holds 2,500 Turns of four messages (input, a tool call,
//! its result, the answer), each with its `turn.started` and
//! `turn.completed` runtime events, and an extension whose state changed
//! every tenth Turn (so `extensions/snapshots.jsonl` has 251 lines). Timed:
//! reading the history (both logs, whole), and a fork at the middle Turn
//! (lock, crash recovery, history, snapshot lookup, copying half the log,
//! the state, the metadata), each fork into a new key whose folder is
//! removed outside the measurement. Both with the default durability
//! (`turn-commit`: the fork is flushed to the disk) and with
//! `process-crash` (no `fsync`).
//!
//! Run: `cargo bench -p goondan-store --bench fork`.

use criterion::{criterion_group, criterion_main, Criterion};
use goondan_store::{
    ExtensionStateStore, InstanceStore, StateRoot, SyncPolicy, TurnJournal, TurnRef,
};
use goondan_types::{
    ContentPart, JsonValue, Message, MessageEvent, MessageSource, ModelMessage, RuntimeEvent,
    RuntimeEventBase, ToolResultOutput,
};
use std::time::{Duration, Instant};

const N_TURNS: usize = 2_500;

fn turn_messages(n: usize) -> Vec<Message> {
    let mut input = Message::new(
        ModelMessage::user(format!(
            "question {n}: what does the file say, line by line?"
        )),
        MessageSource::User,
    );
    for (key, value) in [
        ("__goondanInbound", JsonValue::Bool(true)),
        ("eventId", format!("evt_{n}").into()),
        ("turnId", format!("turn_{n}").into()),
        ("traceId", format!("trace_{n}").into()),
    ] {
        input.metadata.insert(key.into(), value);
    }
    let call_id = format!("call_{n}");
    vec![
        input,
        Message::new(
            ModelMessage::assistant(vec![ContentPart::tool_call(
                call_id.clone(),
                "bash__exec",
                serde_json::json!({"command": "cat notes.txt"}),
            )]),
            MessageSource::Assistant {
                step_id: format!("s{n}"),
            },
        ),
        Message::new(
            ModelMessage::tool(vec![ContentPart::tool_result(
                call_id.clone(),
                "bash__exec",
                ToolResultOutput::Text("the quick brown fox jumps over the lazy dog\n".repeat(4)),
            )]),
            MessageSource::Tool {
                tool_call_id: call_id,
                tool_name: "bash__exec".into(),
            },
        ),
        Message::new(
            ModelMessage::assistant(vec![ContentPart::text(format!(
                "answer {n}: the file says the fox jumps, four times."
            ))]),
            MessageSource::Assistant {
                step_id: format!("s{n}b"),
            },
        ),
    ]
}

/// The 10,000-message instance `agent:k` under `root`.
fn build(root: &std::path::Path) -> InstanceStore {
    let store = InstanceStore::new(StateRoot::new(root).workspace("bench"))
        .with_sync_policy(SyncPolicy::ProcessCrash);
    let mut instance = store.open("agent", "k").expect("open");
    let mut history: Vec<Message> = Vec::new();
    instance.extension_state_mut().load("memo").expect("load");
    for n in 1..=N_TURNS {
        let messages = turn_messages(n);
        let events: Vec<MessageEvent> = messages
            .iter()
            .map(|message| MessageEvent::Append {
                message: message.clone(),
            })
            .collect();
        history.extend(messages);
        let turn_id = format!("turn_{n}");
        instance
            .journal_mut()
            .commit_turn(&turn_id, &events, &history, &Default::default())
            .expect("commit");
        let base = RuntimeEventBase {
            timestamp: goondan_types::now_iso(),
            agent_name: "agent".into(),
            instance_key: "k".into(),
            trace_id: format!("trace_{n}"),
            span_id: format!("span_{n}"),
            parent_span_id: None,
        };
        let log = instance.runtime_events();
        log.append(&RuntimeEvent::TurnStarted {
            base: base.clone(),
            turn_id: turn_id.clone(),
            source: None,
        })
        .expect("event");
        log.append(&RuntimeEvent::TurnCompleted {
            base,
            turn_id: turn_id.clone(),
            step_count: 2,
            duration: 900,
            token_usage: None,
            cost_usd: Some(0.0021),
        })
        .expect("event");
        let state = instance.extension_state_mut();
        if n % 10 == 0 {
            state
                .save(
                    "memo",
                    &serde_json::json!({"turn": n, "notes": "x".repeat(200)}),
                )
                .expect("save");
        }
        state.end_turn(&turn_id).expect("end turn");
    }
    store
}

fn bench_fork(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = build(dir.path());
    let history = store
        .history("agent", "k", Default::default())
        .expect("history");
    assert_eq!(history.turns.len() * 4, 10_000);
    let middle = TurnRef::Index(N_TURNS / 2);

    let mut group = c.benchmark_group("instance_10k_messages");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_millis(500));
    group.bench_function("history (both logs, whole)", |b| {
        b.iter(|| {
            store
                .history("agent", "k", Default::default())
                .expect("history")
        })
    });
    for (label, policy) in [
        ("turn-commit", SyncPolicy::TurnCommit),
        ("process-crash", SyncPolicy::ProcessCrash),
    ] {
        let store = store.clone().with_sync_policy(policy);
        let mut n_fork = 0usize;
        group.bench_function(format!("fork at the middle Turn ({label})"), |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    n_fork += 1;
                    let key = format!("fork-{label}-{n_fork}");
                    let started = Instant::now();
                    let report = store
                        .fork("agent", "k", &middle, &key, "bench")
                        .expect("fork");
                    total += started.elapsed();
                    assert_eq!(report.n_messages, 5_000);
                    std::fs::remove_dir_all(&report.dir).expect("cleanup");
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_fork);
criterion_main!(benches);
