//! What a request asks a Turn to do: the body's fields read with the
//! place of every fault, the conversation split into what is replayed and
//! the input, and the instance it goes to.

use super::error::ApiError;
use crate::instance::{is_valid_key, MAX_KEY_CHARS};
use crate::swarm::{PriorMessage, PriorRole};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Map, Value};

/// The header that names the instance a request goes to.
pub const INSTANCE_HEADER: &str = "x-goondan-instance";

/// The body as one JSON object; a body past the limit is 413, anything
/// but an object 400.
pub(crate) fn body_object(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<Map<String, Value>, ApiError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::BodyTooLarge { limit }
        } else {
            ApiError::BadJson(rejection.body_text())
        }
    })?;
    match serde_json::from_slice(&body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(ApiError::BadJson("expected one object".into())),
        Err(error) => Err(ApiError::BadJson(error.to_string())),
    }
}

/// A string field that may be absent (or `null`).
pub(crate) fn optional_str<'a>(
    object: &'a Map<String, Value>,
    field: &str,
) -> Result<Option<&'a str>, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(bad(field, "must be a string")),
    }
}

/// A boolean field; absent is `false`.
pub(crate) fn flag(object: &Map<String, Value>, field: &str) -> Result<bool, ApiError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(value)) => Ok(*value),
        Some(_) => Err(bad(field, "must be true or false")),
    }
}

/// The agent the `model` field names.
pub(crate) fn model<'a>(
    object: &'a Map<String, Value>,
    swarm: &dyn crate::Swarm,
) -> Result<&'a str, ApiError> {
    let name = optional_str(object, "model")?.ok_or_else(|| bad("model", "is required"))?;
    match swarm.agent(name) {
        Some(_) => Ok(name),
        None => Err(ApiError::UnknownModel(name.to_string())),
    }
}

/// The field at `param` is missing or of the wrong shape.
pub(crate) fn bad(param: impl Into<String>, problem: impl Into<String>) -> ApiError {
    ApiError::BadField {
        param: param.into(),
        problem: problem.into(),
    }
}

/// One message of the request's conversation, text only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Said {
    pub(crate) role: PriorRole,
    pub(crate) text: String,
    /// Where it is in the body, for the fault of a misplaced last one.
    pub(crate) param: String,
}

/// A message (`{role, content}`) of chat's `messages` or a Responses
/// input item; `param` is its place (`messages[2]`).
pub(crate) fn said(message: &Value, param: &str) -> Result<Said, ApiError> {
    let Some(message) = message.as_object() else {
        return Err(bad(param, "must be an object with `role` and `content`"));
    };
    let role_param = format!("{param}.role");
    let role =
        match optional_str(message, "role").map_err(|_| bad(&role_param, "must be a string"))? {
            Some("system" | "developer") => PriorRole::System,
            Some("user") => PriorRole::User,
            Some("assistant") => PriorRole::Assistant,
            Some(kind @ ("tool" | "function")) => {
                return Err(ApiError::Unsupported {
                    param: role_param,
                    kind: kind.to_string(),
                    what: "message",
                })
            }
            Some(other) => {
                return Err(bad(
                    role_param,
                    format!("is {other:?}; expected system, developer, user or assistant"),
                ))
            }
            None => return Err(bad(role_param, "is required")),
        };
    for calls in ["tool_calls", "function_call"] {
        let asked = match message.get(calls) {
            None | Some(Value::Null) => false,
            Some(Value::Array(list)) => !list.is_empty(),
            Some(_) => true,
        };
        if asked {
            return Err(ApiError::Unsupported {
                param: format!("{param}.{calls}"),
                kind: calls.to_string(),
                what: "message",
            });
        }
    }
    let content_param = format!("{param}.content");
    let text = text_of(
        message.get("content").unwrap_or(&Value::Null),
        &content_param,
    )?;
    Ok(Said {
        role,
        text,
        param: param.to_string(),
    })
}

/// The text of a message's content: a string, or text parts joined by
/// line breaks; any other part is refused, never dropped.
fn text_of(content: &Value, param: &str) -> Result<String, ApiError> {
    let parts = match content {
        Value::String(text) => return Ok(text.clone()),
        Value::Array(parts) => parts,
        _ => return Err(bad(param, "must be a string or an array of text parts")),
    };
    let mut texts = Vec::with_capacity(parts.len());
    for (index, part) in parts.iter().enumerate() {
        let part_param = format!("{param}[{index}]");
        let kind = part
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("{part_param}.type"), "is required"))?;
        match kind {
            "text" | "input_text" | "output_text" => {
                let text = part
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{part_param}.text"), "must be a string"))?;
                texts.push(text);
            }
            other => {
                return Err(ApiError::Unsupported {
                    param: format!("{part_param}.type"),
                    kind: other.to_string(),
                    what: "content part",
                })
            }
        }
    }
    Ok(texts.join("\n"))
}

/// A conversation split into what a fresh instance is given first and
/// the input of the Turn: the last message, which must be the user's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conversation {
    pub(crate) history: Vec<PriorMessage>,
    pub(crate) input: String,
}

impl Conversation {
    /// `messages` (the place of the list is `param`) as a conversation.
    pub(crate) fn split(mut messages: Vec<Said>, param: &str) -> Result<Conversation, ApiError> {
        let Some(last) = messages.pop() else {
            return Err(bad(param, "must hold at least one message"));
        };
        if last.role != PriorRole::User {
            return Err(bad(
                format!("{}.role", last.param),
                "must be \"user\": the last message is the input of the Turn",
            ));
        }
        Ok(Conversation {
            history: messages
                .into_iter()
                .map(|said| PriorMessage {
                    role: said.role,
                    text: said.text,
                })
                .collect(),
            input: last.text,
        })
    }
}

/// The instance the `X-Goondan-Instance` header names.
pub(crate) fn header_instance(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(INSTANCE_HEADER) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key) if is_valid_key(key) => Ok(Some(key.to_string())),
        _ => Err(ApiError::BadInstanceKey {
            from_header: true,
            max: MAX_KEY_CHARS,
        }),
    }
}

/// The end user the body's `user` field names: the namespace of their
/// conversations (`conversations`), never an instance key itself.
pub(crate) fn end_user(user: Option<&str>) -> Result<Option<&str>, ApiError> {
    match user {
        Some(user) if !is_valid_key(user) => Err(ApiError::BadInstanceKey {
            from_header: false,
            max: MAX_KEY_CHARS,
        }),
        user => Ok(user),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_is_a_string_or_text_parts() {
        let message = json!({"role": "user", "content": [
            {"type": "text", "text": "a"},
            {"type": "input_text", "text": "b"},
        ]});
        assert_eq!(said(&message, "messages[0]").unwrap().text, "a\nb");
        let message = json!({"role": "developer", "content": "be brief"});
        assert_eq!(said(&message, "m").unwrap().role, PriorRole::System);
    }

    #[test]
    fn every_other_part_or_role_is_refused_at_its_place() {
        let cases = [
            (
                json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}),
                "E_SERVE_UNSUPPORTED_INPUT",
                "messages[1].content[1].type",
            ),
            (
                json!({"role": "tool", "content": "42", "tool_call_id": "c"}),
                "E_SERVE_UNSUPPORTED_INPUT",
                "messages[1].role",
            ),
            (
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c"}]}),
                "E_SERVE_UNSUPPORTED_INPUT",
                "messages[1].tool_calls",
            ),
            (
                json!({"role": "robot", "content": "x"}),
                "E_SERVE_BAD_REQUEST",
                "messages[1].role",
            ),
            (
                json!({"role": "user"}),
                "E_SERVE_BAD_REQUEST",
                "messages[1].content",
            ),
            (json!("hi"), "E_SERVE_BAD_REQUEST", "messages[1]"),
        ];
        for (message, code, param) in cases {
            let error = said(&message, "messages[1]").unwrap_err();
            assert_eq!(error.code(), code, "{message}");
            assert_eq!(error.body()["error"]["param"], param, "{message}");
        }
    }

    #[test]
    fn the_last_message_is_the_input_and_must_be_the_users() {
        let messages = vec![
            said(&json!({"role": "system", "content": "s"}), "messages[0]").unwrap(),
            said(&json!({"role": "user", "content": "q"}), "messages[1]").unwrap(),
            said(&json!({"role": "assistant", "content": "a"}), "messages[2]").unwrap(),
        ];
        let error = Conversation::split(messages.clone(), "messages").unwrap_err();
        assert_eq!(error.body()["error"]["param"], "messages[2].role");
        let conversation = Conversation::split(messages[..2].to_vec(), "messages").unwrap();
        assert_eq!(conversation.input, "q");
        assert_eq!(conversation.history.len(), 1);
        assert!(Conversation::split(Vec::new(), "messages").is_err());
    }

    #[test]
    fn bad_keys_and_bad_users_are_refused() {
        let mut headers = HeaderMap::new();
        assert_eq!(header_instance(&headers).unwrap(), None);
        headers.insert(INSTANCE_HEADER, "h1".parse().unwrap());
        assert_eq!(header_instance(&headers).unwrap().as_deref(), Some("h1"));
        headers.insert(INSTANCE_HEADER, "x".repeat(200).parse().unwrap());
        assert_eq!(
            header_instance(&headers).unwrap_err().code(),
            "E_SERVE_BAD_INSTANCE_KEY"
        );
        assert_eq!(end_user(Some("u1")).unwrap(), Some("u1"));
        assert!(end_user(Some("")).is_err());
        assert!(end_user(Some("a\u{7}b")).is_err());
    }
}
