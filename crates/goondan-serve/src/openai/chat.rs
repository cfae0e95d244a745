//! `POST /v1/chat/completions`: one Turn of the agent named by `model`,
//! answered as a `chat.completion`, or with `stream: true` as
//! `chat.completion.chunk` events ending in `data: [DONE]`.

use super::error::ApiError;
use super::input::{self, Conversation};
use super::stream::{self, Frames};
use super::{new_id, unix_now};
use crate::swarm::{TurnAnswer, TurnFailure};
use crate::Shared;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use goondan_types::TokenUsage;
use serde_json::{json, Value};
use std::sync::Arc;

/// Runs the Turn a chat completion request asks for.
pub(crate) async fn completions(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match complete(&shared, &headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn complete(
    shared: &Shared,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body.as_ref().ok().cloned().unwrap_or_default();
    let body = input::body_object(body, shared.limits.max_body_bytes)?;
    let model = input::model(&body, shared.swarm.as_ref())?.to_string();
    let messages = match body.get("messages") {
        Some(Value::Array(messages)) => messages,
        Some(_) => return Err(input::bad("messages", "must be an array of messages")),
        None => return Err(input::bad("messages", "is required")),
    };
    let said = messages
        .iter()
        .enumerate()
        .map(|(index, message)| input::said(message, &format!("messages[{index}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let conversation = Conversation::split(said, "messages")?;
    match body.get("n") {
        None | Some(Value::Null) => {}
        Some(n) if n.as_u64() == Some(1) => {}
        Some(_) => return Err(input::bad("n", "must be 1: a Turn gives one answer")),
    }
    let stream = input::flag(&body, "stream")?;
    let include_usage = match body.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(options)) => input::flag(options, "include_usage")
            .map_err(|_| input::bad("stream_options.include_usage", "must be true or false"))?,
        Some(_) => return Err(input::bad("stream_options", "must be an object")),
    };
    let named = input::header_instance(headers)?;
    let user = input::end_user(input::optional_str(&body, "user")?)?;
    let id = new_id("chatcmpl-");
    let started = match super::begin(shared, "chat", headers, &raw, id.clone())? {
        super::Begin::Follow(started) => started,
        super::Begin::Start(claim) => {
            let conversations = &shared.openai.conversations;
            let addressed = conversations.address(&model, named, user, conversation, None);
            super::start(shared, addressed, claim, id).await?
        }
    };
    let shape = Shape {
        id: started.id,
        created: unix_now(),
        model,
    };
    if stream {
        // A stream's client that leaves leaves its Turn to finish.
        started.leave.stay();
        return Ok(stream::respond(
            started.updates,
            ChunkFrames {
                shape,
                include_usage,
            },
        ));
    }
    // Held until the answer: a client gone before it cancels the Turn.
    let _leave = started.leave;
    let answer = stream::gather(started.updates).await?;
    Ok(axum::Json(shape.completion(&answer)).into_response())
}

/// What every object of one completion shares.
struct Shape {
    id: String,
    created: u64,
    model: String,
}

impl Shape {
    fn completion(&self, answer: &TurnAnswer) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": answer.text, "refusal": null},
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": answer.usage.as_ref().map(usage),
        })
    }

    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    fn choice(&self, delta: Value, finish_reason: Option<&str>) -> Event {
        let chunk = self.chunk(json!([{
            "index": 0,
            "delta": delta,
            "logprobs": null,
            "finish_reason": finish_reason,
        }]));
        Event::default().data(chunk.to_string())
    }
}

/// The ledger's tokens as chat's `usage`.
fn usage(usage: &TokenUsage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    })
}

/// A completion as OpenAI streams it: a first chunk with the role, one
/// per delta, one with `finish_reason`, the usage in a chunk without
/// choices when asked for, then `[DONE]`. A failed Turn ends the stream
/// with `{"error": …}`, which the `openai` packages raise as an error.
struct ChunkFrames {
    shape: Shape,
    include_usage: bool,
}

impl Frames for ChunkFrames {
    fn opening(&mut self) -> Vec<Event> {
        vec![self
            .shape
            .choice(json!({"role": "assistant", "content": ""}), None)]
    }

    fn text(&mut self, delta: &str) -> Vec<Event> {
        vec![self.shape.choice(json!({"content": delta}), None)]
    }

    fn finished(&mut self, result: Result<TurnAnswer, TurnFailure>) -> Vec<Event> {
        match result {
            Ok(answer) => {
                let mut events = vec![self.shape.choice(json!({}), Some("stop"))];
                if self.include_usage {
                    let mut chunk = self.shape.chunk(json!([]));
                    chunk["usage"] = answer.usage.as_ref().map(usage).into();
                    events.push(Event::default().data(chunk.to_string()));
                }
                events.push(Event::default().data("[DONE]"));
                events
            }
            Err(failure) => vec![Event::default().data(ApiError::from(failure).body().to_string())],
        }
    }
}
