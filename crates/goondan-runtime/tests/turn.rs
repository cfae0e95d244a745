//! `runtime.md` §7-§8 and seed 000 §4.5, §7: the Turn and Step loop, the
//! message fold and its journal, recovery, async answers, extension state
//! and the runtime context.

mod common;

use common::{Harness, Log};
use goondan_model::{NoStream, StreamObserver};
use goondan_runtime::agents::InterAgentResponse;
use goondan_runtime::test_support::{user_event, JournalCall, RecordingJournal};
use goondan_runtime::{
    handler_fn, Agent, ExtensionApi, ExtensionInitError, MiddlewareOptions, PipelineError,
};
use goondan_store::{ExtensionStateStore, MemoryExtensionState, StoreError, TurnJournal};
use goondan_types::agents::{InterAgentResponseMetadata, InterAgentResponseStatus};
use goondan_types::{
    JsonValue, Message, MessageEvent, MessageSource, ModelMessage, TurnFinishReason,
};
use serde_json::json;
use std::sync::{Arc, Mutex};

fn system_message(id: &str, text: &str) -> Message {
    let mut message = Message::new(
        ModelMessage::system(text),
        MessageSource::Extension {
            extension_name: "test".into(),
        },
    );
    message.id = id.to_string();
    message
}

fn texts(agent: &Agent) -> Vec<String> {
    agent
        .conversation()
        .next_messages()
        .iter()
        .map(|m| m.data.text())
        .collect()
}

#[tokio::test]
async fn must_emits_before_and_after_next_in_a_turn_middleware_land_in_the_fold() {
    let mut harness = Harness::new();
    harness.extension("around", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().turn(
            |ctx, next| {
                Box::pin(async move {
                    assert!(ctx.conversation_state().base_messages().is_empty());
                    ctx.emit_message_event(MessageEvent::Append {
                        message: system_message("pre", "before"),
                    })?;
                    let result = next.run(ctx).await?;
                    ctx.emit_message_event(MessageEvent::Append {
                        message: system_message("post", "after"),
                    })?;
                    let state = ctx.conversation_state();
                    assert_eq!(state.events().len(), 4, "pre, user, assistant, post");
                    assert!(
                        state.base_messages().is_empty(),
                        "the base is the turn-start snapshot"
                    );
                    Ok(result)
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.model.text("answer");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("question"), &NoStream).await;
    assert!(result.error.is_none(), "{:?}", result.error);
    assert_eq!(texts(&agent), ["before", "question", "answer", "after"]);
    assert!(agent.conversation().events().is_empty(), "folded");
    let committed: Vec<String> = harness
        .journal
        .base()
        .iter()
        .map(|m| m.data.text())
        .collect();
    assert_eq!(committed, ["before", "question", "answer", "after"]);
    // The model saw the pre-next message but not the post-next one.
    let request = &harness.model.requests()[0];
    assert_eq!(request.messages.len(), 2);
}

#[tokio::test]
async fn must_journal_records_events_in_order_and_commits_only_after_the_chain() {
    let mut harness = Harness::new();
    let journal = harness.journal.clone();
    harness.extension("post", move |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        let journal = journal.clone();
        api.pipeline().turn(
            move |ctx, next| {
                let journal = journal.clone();
                Box::pin(async move {
                    let result = next.run(ctx).await?;
                    let calls = journal.calls();
                    assert!(
                        calls
                            .iter()
                            .all(|call| matches!(call, JournalCall::Record { .. })),
                        "committed before the outermost turn layer returned"
                    );
                    ctx.emit_message_event(MessageEvent::Append {
                        message: system_message("late", "late"),
                    })?;
                    Ok(result)
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    let journal = harness.journal.clone();
    harness.tool(
        "probe",
        vec![(
            "run",
            None,
            handler_fn(move |ctx, _args| {
                let journal = journal.clone();
                Box::pin(async move {
                    // The assistant message holding this call is durable
                    // before the tool runs.
                    let last = journal.calls().last().cloned();
                    let Some(JournalCall::Record { event, .. }) = last else {
                        panic!("nothing recorded before the tool ran");
                    };
                    let MessageEvent::Append { message } = *event else {
                        panic!("not an append")
                    };
                    assert_eq!(message.id, ctx.message.id);
                    Ok(json!("probed"))
                })
            }),
        )],
        None,
    );
    harness.model.tool_calls(&[("c1", "probe__run", json!({}))]);
    harness.model.text("done");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("go"), &NoStream).await;
    assert!(result.error.is_none(), "{:?}", result.error);
    let calls = harness.journal.calls();
    let kinds: Vec<String> = calls
        .iter()
        .map(|call| match call {
            JournalCall::Record { event, .. } => match &**event {
                MessageEvent::Append { message } => format!("append:{}", message.data.role()),
                other => format!("{other:?}"),
            },
            JournalCall::Commit {
                events, messages, ..
            } => format!("commit:{events}:{messages}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "append:user",
            "append:assistant",
            "append:tool",
            "append:assistant",
            "append:system",
            "commit:5:5"
        ]
    );
    let turn_ids: Vec<&str> = calls
        .iter()
        .map(|call| match call {
            JournalCall::Record { turn_id, .. } | JournalCall::Commit { turn_id, .. } => {
                turn_id.as_str()
            }
        })
        .collect();
    assert!(turn_ids.iter().all(|id| *id == result.turn_id));
}

#[tokio::test]
async fn must_every_message_event_kind_applies_through_emit() {
    let mut harness = Harness::new();
    harness.extension("editor", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().turn(
            |ctx, next| {
                Box::pin(async move {
                    ctx.emit_message_event(MessageEvent::Append {
                        message: system_message("a", "A"),
                    })?;
                    ctx.emit_message_event(MessageEvent::Append {
                        message: system_message("b", "B"),
                    })?;
                    ctx.emit_message_event(MessageEvent::Replace {
                        target_id: "a".into(),
                        message: system_message("a2", "A2"),
                    })?;
                    ctx.emit_message_event(MessageEvent::Remove {
                        target_id: "b".into(),
                    })?;
                    // A missing target warns and the Turn goes on.
                    ctx.emit_message_event(MessageEvent::Remove {
                        target_id: "missing".into(),
                    })?;
                    assert_eq!(ctx.conversation_state().warnings().len(), 1);
                    let result = next.run(ctx).await?;
                    ctx.emit_message_event(MessageEvent::Truncate)?;
                    ctx.emit_message_event(MessageEvent::Append {
                        message: system_message("s", "summary"),
                    })?;
                    Ok(result)
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.model.text("fine");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("hi"), &NoStream).await;
    assert!(result.error.is_none());
    let request = &harness.model.requests()[0];
    let seen: Vec<String> = request.messages.iter().map(|m| m.text()).collect();
    assert_eq!(seen, ["A2", "hi"]);
    assert_eq!(texts(&agent), ["summary"]);
    assert_eq!(harness.journal.base().len(), 1);
}

struct FailingJournal;

impl TurnJournal for FailingJournal {
    fn load(&mut self) -> Result<goondan_store::LoadedConversation, StoreError> {
        Ok(Default::default())
    }
    fn record_event(&mut self, _: &str, _: &MessageEvent) -> Result<(), StoreError> {
        Err(StoreError::Io {
            action: "appending to",
            path: "events.jsonl".into(),
            source: std::io::Error::other("disk full"),
        })
    }
    fn commit_turn(
        &mut self,
        _: &str,
        _: &[MessageEvent],
        _: &[Message],
        _: &goondan_store::CommitContext,
    ) -> Result<(), StoreError> {
        Ok(())
    }
}

#[tokio::test]
async fn an_event_that_cannot_be_recorded_is_not_applied_and_fails_the_turn() {
    let harness = Harness::new();
    let mut services = harness.services();
    services.journal = Box::new(FailingJournal);
    let mut agent = Agent::start(harness.definition.clone(), services)
        .await
        .unwrap();
    let result = agent.run_turn(user_event("hi"), &NoStream).await;
    assert_eq!(result.finish_reason, TurnFinishReason::Error);
    assert_eq!(result.error.unwrap().code.as_deref(), Some("E_STORE_IO"));
    assert!(agent.conversation().next_messages().is_empty());
}

#[tokio::test]
async fn must_a_failed_turn_keeps_its_events_and_they_are_folded_before_the_next() {
    let harness = Harness::new();
    harness
        .model
        .tool_calls(&[("c1", "nothing__here", json!({}))]);
    // No second answer: the model fails in step 1.
    let mut agent = harness.start().await;
    let failed = agent.run_turn(user_event("first"), &NoStream).await;
    assert_eq!(failed.finish_reason, TurnFinishReason::Error);
    assert_eq!(
        failed.error.as_ref().unwrap().code.as_deref(),
        Some("E_MODEL_CONFIG")
    );
    assert!(harness.journal.base().is_empty(), "nothing committed");
    assert_eq!(
        harness.journal.pending().len(),
        3,
        "user, assistant, tool result kept"
    );
    let failed_events = harness.events.take();
    assert_eq!(failed_events.last().unwrap().type_name(), "turn.failed");
    assert!(failed_events
        .iter()
        .any(|event| event.type_name() == "step.failed"));

    harness.model.text("second answer");
    let result = agent.run_turn(user_event("second"), &NoStream).await;
    assert!(result.error.is_none());
    let committed: Vec<String> = harness
        .journal
        .base()
        .iter()
        .map(|m| m.data.text())
        .collect();
    assert_eq!(committed, ["first", "", "", "second", "second answer"]);
}

/// Runs one Turn of `harness` whose model calls a tool that never ends,
/// and cancels it (as `cli`) once the tool started: the agent, for what
/// comes next, and the cancelled Turn's result.
async fn cancelled_mid_tool(harness: &mut Harness) -> (Agent, goondan_types::TurnResult) {
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let started_tx = Mutex::new(Some(started_tx));
    harness.tool(
        "forever",
        vec![(
            "run",
            None,
            handler_fn(move |_, _| {
                if let Some(started) = started_tx.lock().unwrap().take() {
                    let _ = started.send(());
                }
                Box::pin(std::future::pending())
            }),
        )],
        None,
    );
    harness
        .model
        .tool_calls(&[("c1", "forever__run", json!({}))]);
    let mut agent = harness.start().await;
    let cancelled = async {
        let _ = started.await;
        goondan_runtime::turn::Cancellation {
            by: Some("cli".into()),
        }
    };
    let result = agent
        .run_turn_answering_early(
            user_event("first"),
            &NoStream,
            cancelled,
            async |_: &goondan_types::TurnResult| Vec::new(),
        )
        .await;
    (agent, result)
}

#[tokio::test]
async fn a_cancelled_turn_stops_mid_tool_closes_its_call_saying_who_and_commits() {
    let mut harness = Harness::new();
    let (mut agent, result) = cancelled_mid_tool(&mut harness).await;
    assert_eq!(result.finish_reason, TurnFinishReason::Error);
    let error = result.error.as_ref().unwrap();
    assert_eq!(error.code.as_deref(), Some("E_TURN_CANCELLED"));
    assert!(error.message.contains("operator (cli)"), "{error:?}");
    assert!(
        harness.journal.pending().is_empty(),
        "the cancelled Turn is committed as it stands"
    );
    let base = harness.journal.base();
    assert_eq!(base.len(), 3, "input, the call, and the result closing it");
    let closing = serde_json::to_string(&base[2].data).unwrap();
    assert!(
        matches!(base[2].data, ModelMessage::Tool { .. })
            && closing.contains("E_TOOL_CANCELLED")
            && closing.contains("operator (cli)"),
        "{closing}"
    );
    let events = harness.events.take();
    match events.last().unwrap() {
        goondan_types::RuntimeEvent::TurnFailed { cancelled_by, .. } => {
            assert_eq!(cancelled_by.as_deref(), Some("cli"))
        }
        other => panic!("the last event is {other:?}"),
    }

    harness.model.text("second answer");
    let next = agent.run_turn(user_event("second"), &NoStream).await;
    assert!(next.error.is_none(), "{next:?}");
    let base = harness.journal.base();
    assert!(
        !serde_json::to_string(&base)
            .unwrap()
            .contains("E_TOOL_INTERRUPTED"),
        "nothing was left for the next Turn to close"
    );
    assert_eq!(texts(&agent).last().unwrap(), "second answer");
}

/// Seed 001 §11.4 (rules 3 and 4): a cancelled Turn still runs every turn
/// middleware's code after `next()`, with the cancelled result, and what
/// it emits there is committed after the closed call.
#[tokio::test]
async fn must_run_turn_middleware_post_processing_when_an_operator_cancels_the_turn() {
    let mut harness = Harness::new();
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen_by_layer = seen.clone();
    harness.extension(
        "after-cancel",
        move |api: &mut ExtensionApi<'_>, _: &JsonValue| {
            let seen = seen_by_layer.clone();
            api.pipeline().turn(
                move |ctx, next| {
                    let seen = seen.clone();
                    Box::pin(async move {
                        let result = next.run(ctx).await;
                        let code = match &result {
                            Ok(_) => "ok".to_string(),
                            Err(error) => error.code().to_string(),
                        };
                        seen.lock().unwrap().push(code);
                        ctx.emit_message_event(MessageEvent::Append {
                            message: system_message("post", "noted the cancel"),
                        })?;
                        result
                    })
                },
                MiddlewareOptions::default(),
            );
            Ok(())
        },
    );
    let (_agent, result) = cancelled_mid_tool(&mut harness).await;
    assert_eq!(
        result.error.as_ref().and_then(|e| e.code.as_deref()),
        Some("E_TURN_CANCELLED")
    );
    assert_eq!(*seen.lock().unwrap(), ["E_TURN_CANCELLED"]);
    assert!(harness.journal.pending().is_empty(), "committed");
    let base = harness.journal.base();
    assert_eq!(base.len(), 4, "input, call, its closing result, then post");
    assert!(matches!(base[2].data, ModelMessage::Tool { .. }));
    assert_eq!(base[3].data.text(), "noted the cancel");
}

#[tokio::test]
async fn must_recovery_folds_pending_events_of_an_interrupted_turn_at_start() {
    let journal = RecordingJournal::new();
    let mut writer = journal.clone();
    let old = Message::new(ModelMessage::user("before the crash"), MessageSource::User);
    writer
        .record_event("turn_old", &MessageEvent::Append { message: old })
        .unwrap();
    let mut harness = Harness::new();
    harness.journal = journal;
    harness.model.text("after");
    let mut agent = harness.start().await;
    assert_eq!(texts(&agent), ["before the crash"], "restored");
    assert!(harness.journal.pending().is_empty(), "committed at start");
    agent.run_turn(user_event("again"), &NoStream).await;
    let request = &harness.model.requests()[0];
    assert_eq!(request.messages[0].text(), "before the crash");
}

#[tokio::test]
async fn must_max_steps_per_turn_ends_the_turn_with_max_steps() {
    let mut harness = Harness::new();
    harness.definition.max_steps_per_turn = 2;
    harness.tool(
        "loop",
        vec![(
            "run",
            None,
            handler_fn(|_, _| Box::pin(async { Ok(json!(1)) })),
        )],
        None,
    );
    for n in 0..3 {
        harness
            .model
            .tool_calls(&[(&format!("c{n}"), "loop__run", json!({}))]);
    }
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("spin"), &NoStream).await;
    assert_eq!(result.finish_reason, TurnFinishReason::MaxSteps);
    assert_eq!(harness.model.requests().len(), 2);
}

#[tokio::test]
async fn must_an_empty_answer_after_tool_results_ends_the_turn_normally() {
    let mut harness = Harness::new();
    harness.tool(
        "t",
        vec![(
            "run",
            None,
            handler_fn(|_, _| Box::pin(async { Ok(json!("r")) })),
        )],
        None,
    );
    harness.model.tool_calls(&[("c1", "t__run", json!({}))]);
    harness.model.empty();
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("x"), &NoStream).await;
    assert_eq!(result.finish_reason, TurnFinishReason::TextResponse);
    assert!(result.error.is_none());
    let roles: Vec<&str> = agent
        .conversation()
        .next_messages()
        .iter()
        .map(|m| m.data.role())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool"],
        "no empty assistant message stored"
    );
}

#[tokio::test]
async fn must_should_continue_defaults_to_tool_calls_and_step_middleware_may_override() {
    let mut harness = Harness::new();
    harness.extension("one-more", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().step(
            |ctx, next| {
                Box::pin(async move {
                    let mut result = next.run(ctx).await?;
                    assert!(!result.should_continue, "a text answer defaults to stop");
                    if ctx.step_index() == 0 {
                        result.should_continue = true;
                    }
                    Ok(result)
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    harness.model.text("draft");
    harness.model.text("final");
    let mut agent = harness.start().await;
    let result = agent.run_turn(user_event("x"), &NoStream).await;
    assert_eq!(result.response_message.unwrap().data.text(), "final");
    assert_eq!(harness.model.requests().len(), 2);
}

#[tokio::test]
async fn must_async_answers_are_injected_before_the_next_step() {
    let mut harness = Harness::new();
    let inbox_slot: Arc<Mutex<Option<goondan_runtime::AsyncResponseInbox>>> = Arc::default();
    let slot = inbox_slot.clone();
    harness.tool(
        "ask",
        vec![(
            "run",
            None,
            handler_fn(move |_, _| {
                let slot = slot.clone();
                Box::pin(async move {
                    // The answer arrives while the tool runs.
                    let inbox = slot.lock().unwrap().clone().unwrap();
                    inbox.push(InterAgentResponse {
                        text: "beta says hi".into(),
                        metadata: InterAgentResponseMetadata {
                            kind: "inter_agent_response".into(),
                            version: 1,
                            request_id: "corr-1".into(),
                            request_event_id: "evt-1".into(),
                            response_event_id: None,
                            from_agent_id: "beta".into(),
                            to_agent_id: "alpha".into(),
                            r#async: true,
                            status: InterAgentResponseStatus::Ok,
                            received_at: goondan_types::now_iso(),
                            trace_id: None,
                            request_event_type: None,
                            request_metadata: None,
                            error_code: None,
                            error_message: None,
                        },
                    });
                    Ok(json!({"accepted": true}))
                })
            }),
        )],
        None,
    );
    harness.model.tool_calls(&[("c1", "ask__run", json!({}))]);
    harness.model.text("thanks");
    let mut agent = harness.start().await;
    *inbox_slot.lock().unwrap() = Some(agent.inbox().clone());
    agent.run_turn(user_event("ask beta"), &NoStream).await;
    let second = &harness.model.requests()[1];
    assert_eq!(second.messages.last().unwrap().text(), "beta says hi");
    let state = agent.conversation();
    let injected = state
        .next_messages()
        .iter()
        .find(|m| m.data.text() == "beta says hi")
        .unwrap();
    assert_eq!(
        injected.metadata["__goondanInterAgentResponse"]["requestId"],
        "corr-1"
    );
    assert!(agent.inbox().is_empty());
}

#[derive(Default)]
struct Collect(Mutex<String>);

impl StreamObserver for Collect {
    fn on_text_delta(&self, delta: &str) {
        self.0.lock().unwrap().push_str(delta);
    }
}

#[tokio::test]
async fn the_stream_observer_sees_text_as_it_arrives() {
    let harness = Harness::new();
    harness.model.text("streamed text");
    let mut agent = harness.start().await;
    let observer = Collect::default();
    agent.run_turn(user_event("x"), &observer).await;
    assert_eq!(*observer.0.lock().unwrap(), "streamed text");
}

#[derive(Clone, Default)]
struct SharedState(Arc<Mutex<MemoryExtensionState>>, Arc<Mutex<usize>>);

impl ExtensionStateStore for SharedState {
    fn load(&mut self, name: &str) -> Result<Option<JsonValue>, StoreError> {
        self.0.lock().unwrap().load(name)
    }
    fn save(&mut self, name: &str, value: &JsonValue) -> Result<(), StoreError> {
        *self.1.lock().unwrap() += 1;
        self.0.lock().unwrap().save(name, value)
    }
}

#[tokio::test]
async fn must_extension_state_is_restored_at_start_and_written_at_turn_end_when_changed() {
    let store = SharedState::default();
    store
        .0
        .lock()
        .unwrap()
        .save("counter", &json!({"turns": 41}))
        .unwrap();
    let mut harness = Harness::new();
    harness.extension_with_config(
        "counter",
        |api: &mut ExtensionApi<'_>, config: &JsonValue| {
            let step = config["step"]
                .as_u64()
                .ok_or_else(|| ExtensionInitError::new("config.step is required"))?;
            let state = api.state().clone();
            api.pipeline().turn(
                move |ctx, next| {
                    let state = state.clone();
                    Box::pin(async move {
                        let result = next.run(ctx).await?;
                        if ctx.input_event().input.as_deref() == Some("count") {
                            let turns = state.get()["turns"].as_u64().unwrap_or(0);
                            state.set(json!({"turns": turns + step}));
                        }
                        Ok(result)
                    })
                },
                MiddlewareOptions::default(),
            );
            Ok(())
        },
        json!({"step": 1}),
    );
    harness.model.text("a");
    harness.model.text("b");
    let mut services = harness.services();
    services.extension_state = Box::new(store.clone());
    let mut agent = Agent::start(harness.definition.clone(), services)
        .await
        .unwrap();
    agent.run_turn(user_event("count"), &NoStream).await;
    assert_eq!(
        store.0.lock().unwrap().load("counter").unwrap(),
        Some(json!({"turns": 42}))
    );
    assert_eq!(*store.1.lock().unwrap(), 1);
    agent.run_turn(user_event("no change"), &NoStream).await;
    assert_eq!(
        *store.1.lock().unwrap(),
        1,
        "unchanged state is not written"
    );

    let mut broken = Harness::new();
    broken.extension_with_config(
        "counter",
        |_: &mut ExtensionApi<'_>, config: &JsonValue| {
            config["step"]
                .as_u64()
                .ok_or_else(|| ExtensionInitError::new("config.step is required"))?;
            Ok(())
        },
        JsonValue::Null,
    );
    let error = Agent::start(broken.definition.clone(), broken.services())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_EXTENSION_INIT");
    assert_eq!(
        error.to_string(),
        "extension 'counter' failed to initialize: config.step is required"
    );
}

#[tokio::test]
async fn must_the_core_never_injects_a_system_prompt_but_an_extension_can() {
    let mut harness = Harness::new();
    harness.definition.runtime_agent.prompt = Some(goondan_runtime::pipeline::RuntimePrompt {
        system: Some("You are alpha.".into()),
    });
    harness.model.text("one");
    harness.model.text("two");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("x"), &NoStream).await;
    let request = &harness.model.requests()[0];
    assert!(request.messages.iter().all(|m| m.role() != "system"));

    let mut with_prompt = Harness::new();
    with_prompt.definition.runtime_agent.prompt = Some(goondan_runtime::pipeline::RuntimePrompt {
        system: Some("You are alpha.".into()),
    });
    with_prompt.extension("prompt", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().step(
            |ctx, next| {
                Box::pin(async move {
                    let system = ctx
                        .runtime()
                        .agent
                        .prompt
                        .as_ref()
                        .and_then(|p| p.system.clone());
                    let already = ctx
                        .conversation_state()
                        .next_messages()
                        .iter()
                        .any(|m| m.data.role() == "system");
                    if let (Some(system), false) = (system, already) {
                        ctx.emit_message_event(MessageEvent::Append {
                            message: system_message("sys", &system),
                        })?;
                    }
                    assert_eq!(ctx.runtime().inbound.source_name, "cli");
                    assert_eq!(ctx.runtime().swarm.self_agent, "alpha");
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    with_prompt.model.text("hi");
    let mut agent = with_prompt.start().await;
    agent.run_turn(user_event("x"), &NoStream).await;
    let request = &with_prompt.model.requests()[0];
    assert_eq!(
        request.messages.last().unwrap(),
        &ModelMessage::system("You are alpha.")
    );
}

#[tokio::test]
async fn must_ctx_agents_is_available_in_turn_and_step_middleware() {
    let log = Log::default();
    let mut harness = Harness::new();
    let turn_log = log.clone();
    harness.extension(
        "caller",
        move |api: &mut ExtensionApi<'_>, _: &JsonValue| {
            let log = turn_log.clone();
            api.pipeline().turn(
                move |ctx, next| {
                    let log = log.clone();
                    Box::pin(async move {
                        let event = user_event("ping");
                        let outcome = ctx.agents().send("beta", event).await;
                        log.push(format!("turn:{}", outcome.unwrap_err().code()));
                        next.run(ctx).await
                    })
                },
                MiddlewareOptions::default(),
            );
            let log = turn_log.clone();
            api.pipeline().step(
                move |ctx, next| {
                    let log = log.clone();
                    Box::pin(async move {
                        // `?` turns an agents failure into the pipeline's error.
                        let failure: Result<(), PipelineError> = async {
                            ctx.agents().catalog().await?;
                            Ok(())
                        }
                        .await;
                        log.push(format!("step:{}", failure.unwrap_err().code()));
                        next.run(ctx).await
                    })
                },
                MiddlewareOptions::default(),
            );
            Ok(())
        },
    );
    harness.model.text("ok");
    let mut agent = harness.start().await;
    agent.run_turn(user_event("x"), &NoStream).await;
    assert_eq!(
        log.lines(),
        ["turn:E_AGENTS_UNAVAILABLE", "step:E_AGENTS_UNAVAILABLE"]
    );
}

#[tokio::test]
async fn a_failed_commit_fails_the_turn_and_loses_nothing() {
    let harness = Harness::new();
    harness.model.text("one");
    harness.model.text("two");
    let mut agent = harness.start().await;
    harness.journal.fail_commits(true);
    let failed = agent.run_turn(user_event("first"), &NoStream).await;
    assert_eq!(failed.finish_reason, TurnFinishReason::Error);
    assert_eq!(failed.error.unwrap().code.as_deref(), Some("E_STORE_IO"));
    assert_eq!(
        agent.conversation().events().len(),
        2,
        "still pending in memory"
    );
    assert_eq!(
        harness.journal.pending().len(),
        2,
        "still pending in the journal"
    );
    harness.journal.fail_commits(false);
    let result = agent.run_turn(user_event("second"), &NoStream).await;
    assert!(result.error.is_none());
    let committed: Vec<String> = harness
        .journal
        .base()
        .iter()
        .map(|m| m.data.text())
        .collect();
    assert_eq!(committed, ["first", "one", "second", "two"]);
}

#[tokio::test]
async fn must_compaction_may_emit_while_reading_the_conversation() {
    // Seed 000 §9.1: read nextMessages, emit remove/append for what was read.
    let mut harness = Harness::new();
    harness.extension("compaction", |api: &mut ExtensionApi<'_>, _: &JsonValue| {
        api.pipeline().turn(
            |ctx, next| {
                Box::pin(async move {
                    {
                        let state = ctx.conversation_state();
                        if state.next_messages().len() > 2
                            && ctx.conversation_state().events().is_empty()
                        {
                            for message in state.next_messages().iter() {
                                ctx.emit_message_event(MessageEvent::Remove {
                                    target_id: message.id.clone(),
                                })?;
                            }
                            ctx.emit_message_event(MessageEvent::Append {
                                message: system_message("sum", "summary"),
                            })?;
                        }
                    }
                    next.run(ctx).await
                })
            },
            MiddlewareOptions::default(),
        );
        Ok(())
    });
    for answer in ["a1", "a2", "a3"] {
        harness.model.text(answer);
    }
    let mut agent = harness.start().await;
    agent.run_turn(user_event("q1"), &NoStream).await;
    agent.run_turn(user_event("q2"), &NoStream).await;
    assert_eq!(texts(&agent), ["q1", "a1", "q2", "a2"]);
    agent.run_turn(user_event("q3"), &NoStream).await;
    assert_eq!(texts(&agent), ["summary", "q3", "a3"]);
    let third = &harness.model.requests()[2];
    assert_eq!(third.messages.len(), 2, "the model saw the summary and q3");
}

#[tokio::test]
async fn an_early_answer_comes_after_the_chain_and_before_the_commit_which_records_it() {
    let harness = Harness::new();
    harness.model.text("the answer");
    let mut agent = harness.start().await;
    let journal = harness.journal.clone();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen_in_answer = seen.clone();
    let mut event = user_event("q");
    event.inbox_seq = Some(7);
    let result = agent
        .run_turn_answering_early(
            event,
            &NoStream,
            std::future::pending(),
            async |result: &goondan_types::TurnResult| {
                // Everything the Turn emitted is recorded, nothing is folded yet.
                *seen_in_answer.lock().unwrap() = Some((
                    result.response_message.as_ref().map(|m| m.data.text()),
                    journal.pending().len(),
                    journal.base().len(),
                ));
                let answer = goondan_types::AgentEvent::new(
                    "response",
                    goondan_types::EventSource::new(goondan_types::EventSourceKind::Agent, "coder"),
                );
                vec![goondan_store::OutboxMessage {
                    to: "orchestrator".to_string(),
                    event: answer,
                }]
            },
        )
        .await;
    // The commit carries the event's inbox sequence and what was answered.
    let commits: Vec<(Option<u64>, usize)> = harness
        .journal
        .calls()
        .into_iter()
        .filter_map(|call| match call {
            JournalCall::Commit {
                inbox_seq, outbox, ..
            } => Some((inbox_seq, outbox)),
            JournalCall::Record { .. } => None,
        })
        .collect();
    assert_eq!(commits, [(Some(7), 1)]);
    let (answered, pending, base) = seen.lock().unwrap().clone().unwrap();
    assert_eq!(answered.as_deref(), Some("the answer"));
    assert_eq!(
        (pending, base),
        (2, 0),
        "user and assistant messages recorded, not committed"
    );
    assert_eq!(result.finish_reason, TurnFinishReason::TextResponse);
    assert!(
        harness.journal.pending().is_empty(),
        "committed after the answer"
    );
    assert_eq!(harness.journal.base().len(), 2);
}
