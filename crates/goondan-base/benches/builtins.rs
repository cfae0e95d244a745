//! What the builtins cost per call: a Turn on a 1,000-message conversation
//! with and without the message-window and message-compaction extensions,
//! and one `bash__exec` of `true` (process group spawn, wait, capture), with
//! and without the namespace sandbox.
//!
//! Run with `cargo bench -p goondan-base --bench builtins`.

use criterion::{criterion_group, criterion_main, Criterion};
use goondan_base::tools::bash::BashTool;
use goondan_model::NoStream;
use goondan_runtime::test_support::{text_answer, user_event, ScriptedModel};
use goondan_runtime::turn::{AgentDefinition, AgentServices, ExtensionDefinition};
use goondan_runtime::{Agent, EntryResolvers};
use goondan_store::{MemoryExtensionState, MemoryJournal, TurnJournal};
use goondan_types::{ContentPart, Entry, JsonValue, Message, MessageSource, ModelMessage};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

const CONVERSATION: usize = 1_000;

fn conversation() -> Vec<Message> {
    (0..CONVERSATION)
        .map(|index| {
            let data = if index % 2 == 0 {
                ModelMessage::user(format!("question {index} about the quarterly numbers"))
            } else {
                ModelMessage::assistant(vec![ContentPart::text(format!(
                    "answer {index}: it went up"
                ))])
            };
            Message::new(data, MessageSource::User)
        })
        .collect()
}

fn agent(runtime: &tokio::runtime::Runtime, extensions: &[(&str, JsonValue)]) -> Agent {
    let model = ScriptedModel::repeating(text_answer("ok"));
    let mut definition = AgentDefinition::new("bench", "main", Arc::new(model), "scripted-1");
    definition.extensions = extensions
        .iter()
        .map(|(name, config)| ExtensionDefinition {
            name: name.to_string(),
            entry: Entry::native(*name),
            config: config.clone(),
        })
        .collect();
    let mut journal = MemoryJournal::default();
    journal
        .commit_turn("seed", &[], &conversation(), &Default::default())
        .unwrap();
    let services = AgentServices::new(
        Box::new(journal),
        Box::new(MemoryExtensionState::default()),
        Arc::new(EntryResolvers::new(Arc::new(goondan_base::builtins()))),
    );
    runtime
        .block_on(Agent::start(definition, services))
        .unwrap()
}

fn turns(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("turn_1000_messages");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(3));
    let cases: [(&str, Vec<(&str, JsonValue)>); 3] = [
        ("no_extensions", vec![]),
        (
            "message_window",
            vec![("message-window", json!({"maxMessages": CONVERSATION}))],
        ),
        (
            "message_compaction",
            vec![(
                "message-compaction",
                json!({"maxMessages": CONVERSATION, "maxCharacters": 1_000_000}),
            )],
        ),
    ];
    for (name, extensions) in cases {
        let mut agent = agent(&runtime, &extensions);
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(agent.run_turn(user_event("and now?"), &NoStream)))
        });
    }
    group.finish();
}

fn bash_exec(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let workdir = tempfile::tempdir().unwrap();
    let tool = BashTool::default();
    let args = json!({"command": "true"}).as_object().unwrap().clone();
    let mut group = c.benchmark_group("bash");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(3));
    // The same call with and without the namespace sandbox (issue 16 #1);
    // the variable is read per call, and criterion runs one bench at a time.
    for (name, sandbox) in [("exec_true", None), ("exec_true_sandbox_off", Some("off"))] {
        match sandbox {
            Some(value) => std::env::set_var("GOONDAN_BASH_SANDBOX", value),
            None => std::env::remove_var("GOONDAN_BASH_SANDBOX"),
        }
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(tool.exec(workdir.path(), &args)).unwrap())
        });
    }
    std::env::remove_var("GOONDAN_BASH_SANDBOX");
    group.finish();
}

criterion_group!(benches, turns, bash_exec);
criterion_main!(benches);
