//! Test doubles for what lies outside an agent process: a scripted
//! [`Model`] that answers from a queue and records every request, a journal
//! that records the order of its calls, and event builders. Enabled by the
//! `test-support` feature so other crates' tests and benchmarks can use
//! them; never part of a release build.

use futures_util::future::BoxFuture;
use goondan_model::{FinishReason, Model, ModelError, ModelRequest, ModelResponse, StreamObserver};
use goondan_store::{CommitContext, LoadedConversation, MemoryJournal, StoreError, TurnJournal};
use goondan_types::{
    AgentEvent, ContentPart, EventSource, EventSourceKind, JsonValue, Message, MessageEvent,
    TokenUsage,
};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Test doubles hold plain data; a panic elsewhere leaves it readable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A [`Model`] that answers from a queue, in order, and records every
/// request. An empty queue answers with an `E_MODEL_CONFIG` error. Text
/// parts are reported to the stream observer as one delta each.
#[derive(Clone, Default)]
pub struct ScriptedModel {
    answers: Arc<Mutex<VecDeque<ModelResponse>>>,
    requests: Arc<Mutex<Vec<ModelRequest>>>,
    repeat_last: bool,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("answers", &lock(&self.answers).len())
            .field("requests", &lock(&self.requests).len())
            .finish()
    }
}

impl ScriptedModel {
    /// A model with no answers.
    pub fn new() -> Self {
        ScriptedModel::default()
    }

    /// A model that answers every request with its last queued answer once
    /// the queue is down to one (for benchmarks).
    pub fn repeating(answer: ModelResponse) -> Self {
        let model = ScriptedModel {
            repeat_last: true,
            ..ScriptedModel::default()
        };
        model.push(answer);
        model
    }

    /// Queues a whole answer.
    pub fn push(&self, answer: ModelResponse) -> &Self {
        lock(&self.answers).push_back(answer);
        self
    }

    /// Queues a text answer.
    pub fn text(&self, text: &str) -> &Self {
        self.push(text_answer(text))
    }

    /// Queues an answer asking for tool calls `(id, name, input)`.
    pub fn tool_calls(&self, calls: &[(&str, &str, JsonValue)]) -> &Self {
        self.push(tool_call_answer(calls))
    }

    /// Queues an answer with no content at all.
    pub fn empty(&self) -> &Self {
        self.push(ModelResponse {
            content: Vec::new(),
            finish_reason: FinishReason::Stop,
            usage: None,
        })
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<ModelRequest> {
        lock(&self.requests).clone()
    }

    /// How many answers are still queued.
    pub fn remaining(&self) -> usize {
        lock(&self.answers).len()
    }
}

/// A text answer with a small fixed usage.
pub fn text_answer(text: &str) -> ModelResponse {
    ModelResponse {
        content: vec![ContentPart::text(text)],
        finish_reason: FinishReason::Stop,
        usage: Some(TokenUsage {
            prompt_tokens: 10,
            completion_tokens: 5,
            total_tokens: 15,
        }),
    }
}

/// An answer asking for tool calls `(id, name, input)`, with a small fixed
/// usage.
pub fn tool_call_answer(calls: &[(&str, &str, JsonValue)]) -> ModelResponse {
    ModelResponse {
        content: calls
            .iter()
            .map(|(id, name, input)| ContentPart::tool_call(*id, *name, input.clone()))
            .collect(),
        finish_reason: FinishReason::ToolCalls,
        usage: Some(TokenUsage {
            prompt_tokens: 20,
            completion_tokens: 3,
            total_tokens: 23,
        }),
    }
}

impl Model for ScriptedModel {
    fn generate<'a>(
        &'a self,
        request: ModelRequest,
        observer: &'a dyn StreamObserver,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            lock(&self.requests).push(request);
            let answer = {
                let mut answers = lock(&self.answers);
                if self.repeat_last && answers.len() == 1 {
                    answers.front().cloned()
                } else {
                    answers.pop_front()
                }
            };
            let answer = answer.ok_or_else(|| ModelError::Config {
                message: "the scripted model has no answer left".into(),
                suggestion: Some("queue one more answer in the test".into()),
            })?;
            for part in &answer.content {
                if let ContentPart::Text { text, .. } = part {
                    observer.on_text_delta(text);
                }
            }
            Ok(answer)
        })
    }
}

/// One call a [`RecordingJournal`] received.
#[derive(Debug, Clone, PartialEq)]
pub enum JournalCall {
    /// `record_event(turn_id, event)`.
    Record {
        /// The Turn.
        turn_id: String,
        /// The event.
        event: Box<MessageEvent>,
    },
    /// `commit_turn(turn_id, events, next, context)`.
    Commit {
        /// The Turn.
        turn_id: String,
        /// How many events were folded.
        events: usize,
        /// How many messages the new base has.
        messages: usize,
        /// The context's inbox sequence.
        inbox_seq: Option<u64>,
        /// How many answers the context's outbox holds.
        outbox: usize,
    },
}

/// A [`MemoryJournal`] that logs its calls; clones share the same journal,
/// so a test keeps one and gives the agent the other.
#[derive(Debug, Clone, Default)]
pub struct RecordingJournal {
    journal: Arc<Mutex<MemoryJournal>>,
    calls: Arc<Mutex<Vec<JournalCall>>>,
    fail_commits: Arc<Mutex<bool>>,
}

impl RecordingJournal {
    /// An empty journal.
    pub fn new() -> Self {
        RecordingJournal::default()
    }

    /// The calls so far.
    pub fn calls(&self) -> Vec<JournalCall> {
        lock(&self.calls).clone()
    }

    /// The committed base.
    pub fn base(&self) -> Vec<Message> {
        lock(&self.journal).base().to_vec()
    }

    /// Events recorded but not committed.
    pub fn pending(&self) -> Vec<MessageEvent> {
        lock(&self.journal).pending().cloned().collect()
    }

    /// Makes the next commits fail, like a full disk would.
    pub fn fail_commits(&self, fail: bool) {
        *lock(&self.fail_commits) = fail;
    }

    /// A boxed clone, ready for `AgentServices`.
    pub fn boxed(&self) -> Box<dyn TurnJournal> {
        Box::new(self.clone())
    }
}

impl TurnJournal for RecordingJournal {
    fn load(&mut self) -> Result<LoadedConversation, StoreError> {
        lock(&self.journal).load()
    }

    fn record_event(&mut self, turn_id: &str, event: &MessageEvent) -> Result<(), StoreError> {
        lock(&self.calls).push(JournalCall::Record {
            turn_id: turn_id.to_string(),
            event: Box::new(event.clone()),
        });
        lock(&self.journal).record_event(turn_id, event)
    }

    fn commit_turn(
        &mut self,
        turn_id: &str,
        events: &[MessageEvent],
        next_messages: &[Message],
        context: &CommitContext,
    ) -> Result<(), StoreError> {
        if *lock(&self.fail_commits) {
            return Err(StoreError::Io {
                action: "committing",
                path: "base.jsonl".into(),
                source: std::io::Error::other("disk full"),
            });
        }
        lock(&self.calls).push(JournalCall::Commit {
            turn_id: turn_id.to_string(),
            events: events.len(),
            messages: next_messages.len(),
            inbox_seq: context.inbox_seq,
            outbox: context.outbox.len(),
        });
        lock(&self.journal).commit_turn(turn_id, events, next_messages, context)
    }
}

/// A `user_message` event from the CLI connector with `input`.
pub fn user_event(input: &str) -> AgentEvent {
    let mut event = AgentEvent::new(
        "user_message",
        EventSource::new(EventSourceKind::Connector, "cli"),
    );
    event.input = Some(input.to_string());
    event
}
