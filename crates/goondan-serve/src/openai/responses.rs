//! `POST /v1/responses`: one Turn of the agent named by `model`, answered
//! as a `response` object, or with `stream: true` as the Responses API's
//! events (`response.created` … `response.completed`, or
//! `response.failed`). `previous_response_id` continues the instance of a
//! response this server gave, for as long as it remembers it
//! ([`Remembered`]).

use super::error::ApiError;
use super::input::{self, Conversation};
use super::stream::{self, Frames};
use super::{new_id, unix_now};
use crate::recent::Recent;
use crate::swarm::{TurnAnswer, TurnFailure};
use crate::Shared;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use goondan_types::TokenUsage;
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// Which agent and instance gave each recent response, so a follow-up
/// naming it (`previous_response_id`) goes on in the same instance; the
/// oldest is forgotten first.
pub(crate) type Remembered = Recent<String, (String, String)>;

/// Runs the Turn a Responses request asks for.
pub(crate) async fn create(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match respond(&shared, &headers, body).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    }
}

async fn respond(
    shared: &Shared,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = body.as_ref().ok().cloned().unwrap_or_default();
    let body = input::body_object(body, shared.limits.max_body_bytes)?;
    let model = input::model(&body, shared.swarm.as_ref())?.to_string();
    let conversation = conversation(&body)?;
    let instructions = input::optional_str(&body, "instructions")?;
    let stream = input::flag(&body, "stream")?;
    let previous = input::optional_str(&body, "previous_response_id")?;
    let remembered = &shared.openai.responses;
    let continued = match previous {
        None => None,
        Some(id) => {
            let (agent, key) = remembered
                .recall(&id.to_string())
                .ok_or_else(|| ApiError::PreviousResponseNotFound(id.to_string()))?;
            if agent != model {
                return Err(ApiError::PreviousResponseOfOtherAgent {
                    id: id.to_string(),
                    agent,
                    model,
                });
            }
            Some(key)
        }
    };
    let named = match input::header_instance(headers)? {
        Some(key) => Some(key),
        None => continued,
    };
    let user = input::end_user(input::optional_str(&body, "user")?)?;
    let id = new_id("resp_");
    let started = match super::begin(shared, "responses", headers, &raw, id.clone())? {
        super::Begin::Follow(started) => started,
        super::Begin::Start(claim) => {
            let conversations = &shared.openai.conversations;
            let addressed = conversations.address(&model, named, user, conversation, instructions);
            let instance_key = addressed.request.instance_key.clone();
            let started = super::start(shared, addressed, claim, id.clone()).await?;
            remembered.remember(id, (model.clone(), instance_key));
            started
        }
    };
    let shape = Shape {
        id: started.id,
        item_id: new_id("msg_"),
        created_at: unix_now(),
        model,
        instructions: instructions.map(str::to_string),
        previous_response_id: previous.map(str::to_string),
    };
    if stream {
        // A stream's client that leaves leaves its Turn to finish.
        started.leave.stay();
        return Ok(stream::respond(
            started.updates,
            EventFrames {
                shape,
                sequence: 0,
                text: String::new(),
            },
        ));
    }
    // Held until the answer: a client gone before it cancels the Turn.
    let _leave = started.leave;
    let answer = stream::gather(started.updates).await?;
    let output = vec![shape.message(&answer.text, "completed")];
    Ok(axum::Json(shape.object("completed", output, answer.usage.as_ref(), None)).into_response())
}

/// `input` as a conversation: a string is one user message; a list holds
/// messages (with or without `type: "message"`), any other item is
/// refused.
fn conversation(body: &Map<String, Value>) -> Result<Conversation, ApiError> {
    let items = match body.get("input") {
        Some(Value::String(text)) => {
            return Ok(Conversation {
                history: Vec::new(),
                input: text.clone(),
            })
        }
        Some(Value::Array(items)) => items,
        Some(_) => {
            return Err(input::bad(
                "input",
                "must be a string or an array of messages",
            ))
        }
        None => return Err(input::bad("input", "is required")),
    };
    let mut said = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let param = format!("input[{index}]");
        match item.get("type").and_then(Value::as_str) {
            None | Some("message") => said.push(input::said(item, &param)?),
            Some(kind) => {
                return Err(ApiError::Unsupported {
                    param: format!("{param}.type"),
                    kind: kind.to_string(),
                    what: "input item",
                })
            }
        }
    }
    Conversation::split(said, "input")
}

/// What every object of one response shares.
struct Shape {
    id: String,
    item_id: String,
    created_at: u64,
    model: String,
    instructions: Option<String>,
    previous_response_id: Option<String>,
}

impl Shape {
    /// The `response` object.
    fn object(
        &self,
        status: &str,
        output: Vec<Value>,
        usage: Option<&TokenUsage>,
        error: Option<Value>,
    ) -> Value {
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "completed_at": (status == "completed").then(unix_now),
            "status": status,
            "model": self.model,
            "output": output,
            "error": error,
            "incomplete_details": null,
            "instructions": self.instructions,
            "previous_response_id": self.previous_response_id,
            "metadata": {},
            "parallel_tool_calls": false,
            "tool_choice": "auto",
            "tools": [],
            "temperature": null,
            "top_p": null,
            "usage": usage.map(|usage| json!({
                "input_tokens": usage.prompt_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": usage.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            })),
        })
    }

    /// The answer's message item.
    fn message(&self, text: &str, status: &str) -> Value {
        json!({
            "id": self.item_id,
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": if status == "in_progress" && text.is_empty() {
                json!([])
            } else {
                json!([text_part(text)])
            },
        })
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// A response as the Responses API streams it; every event carries its
/// `type` (also as the SSE event name) and a `sequence_number` counting
/// from 0.
struct EventFrames {
    shape: Shape,
    sequence: u64,
    /// The answer so far, for the failed response's output.
    text: String,
}

impl EventFrames {
    fn event(&mut self, kind: &str, mut data: Value) -> Event {
        data["type"] = kind.into();
        data["sequence_number"] = self.sequence.into();
        self.sequence += 1;
        Event::default().event(kind).data(data.to_string())
    }

    /// The fields naming the one text part of the one output item.
    fn part_place(&self) -> Value {
        json!({"item_id": self.shape.item_id, "output_index": 0, "content_index": 0})
    }
}

impl Frames for EventFrames {
    fn opening(&mut self) -> Vec<Event> {
        let response = self.shape.object("in_progress", Vec::new(), None, None);
        let item = self.shape.message("", "in_progress");
        let mut part_added = self.part_place();
        part_added["part"] = text_part("");
        vec![
            self.event("response.created", json!({"response": response})),
            self.event("response.in_progress", json!({"response": response})),
            self.event(
                "response.output_item.added",
                json!({"output_index": 0, "item": item}),
            ),
            self.event("response.content_part.added", part_added),
        ]
    }

    fn text(&mut self, delta: &str) -> Vec<Event> {
        self.text.push_str(delta);
        let mut data = self.part_place();
        data["delta"] = delta.into();
        data["logprobs"] = json!([]);
        vec![self.event("response.output_text.delta", data)]
    }

    fn finished(&mut self, result: Result<TurnAnswer, TurnFailure>) -> Vec<Event> {
        let answer = match result {
            Ok(answer) => answer,
            Err(failure) => {
                let error = ApiError::from(failure);
                let (status, _) = super::error::status_and_type(error.code());
                let code = if status.as_u16() == 429 {
                    "rate_limit_exceeded"
                } else {
                    "server_error"
                };
                let message = error.body()["error"]["message"].clone();
                let output = vec![self.shape.message(&self.text, "incomplete")];
                let response = self.shape.object(
                    "failed",
                    output,
                    None,
                    Some(json!({"code": code, "message": message})),
                );
                return vec![self.event("response.failed", json!({"response": response}))];
            }
        };
        let mut text_done = self.part_place();
        text_done["text"] = answer.text.as_str().into();
        text_done["logprobs"] = json!([]);
        let mut part_done = self.part_place();
        part_done["part"] = text_part(&answer.text);
        let item = self.shape.message(&answer.text, "completed");
        let response =
            self.shape
                .object("completed", vec![item.clone()], answer.usage.as_ref(), None);
        vec![
            self.event("response.output_text.done", text_done),
            self.event("response.content_part.done", part_done),
            self.event(
                "response.output_item.done",
                json!({"output_index": 0, "item": item}),
            ),
            self.event("response.completed", json!({"response": response})),
        ]
    }
}
