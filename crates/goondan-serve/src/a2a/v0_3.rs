//! A2A 0.3 beside 1.0 on the same endpoint, for clients not moved yet:
//! the earlier methods (`message/send`, `message/stream`, `tasks/get`,
//! `tasks/cancel`, `tasks/resubscribe`) are served by the 1.0 handlers,
//! their parameters read into the 1.0 form and their results written back
//! in the 0.3 form (`kind` discriminators, lowercase dashed states,
//! `user`/`agent` roles, file parts as `file`, stream events with
//! `final`).
//!
//! The translation is on JSON values, both ways, so the 1.0 types stay
//! the only ones the server works with.

use serde_json::{json, Map, Value};

/// The 1.0 method an earlier one became.
pub(super) fn current_method(earlier: &str) -> Option<&'static str> {
    use goondan_a2a::jsonrpc::*;
    Some(match earlier {
        "message/send" => SEND_MESSAGE,
        "message/stream" => SEND_STREAMING_MESSAGE,
        "tasks/get" => GET_TASK,
        "tasks/cancel" => CANCEL_TASK,
        "tasks/resubscribe" => SUBSCRIBE_TO_TASK,
        _ => return None,
    })
}

/// 0.3 parameters in the 1.0 form.
pub(super) fn params_to_current(mut params: Value) -> Value {
    if let Some(message) = params.get_mut("message") {
        *message = message_to_current(message.take());
    }
    if let Some(configuration) = params
        .get_mut("configuration")
        .and_then(Value::as_object_mut)
    {
        if configuration.remove("blocking") == Some(Value::Bool(false)) {
            configuration.insert("returnImmediately".into(), Value::Bool(true));
        }
        configuration.remove("pushNotificationConfig");
    }
    params
}

fn message_to_current(message: Value) -> Value {
    let Value::Object(mut message) = message else {
        return message;
    };
    message.remove("kind");
    if let Some(role) = message.get_mut("role") {
        *role = match role.as_str() {
            Some("user") => "ROLE_USER".into(),
            Some("agent") => "ROLE_AGENT".into(),
            _ => role.take(),
        };
    }
    if let Some(Value::Array(parts)) = message.get_mut("parts") {
        for part in parts.iter_mut() {
            *part = part_to_current(part.take());
        }
    }
    Value::Object(message)
}

fn part_to_current(part: Value) -> Value {
    let Value::Object(mut part) = part else {
        return part;
    };
    let kind = part.remove("kind");
    if kind.as_ref().and_then(Value::as_str) == Some("file") {
        if let Some(Value::Object(file)) = part.remove("file") {
            let moves = [
                ("uri", "url"),
                ("bytes", "raw"),
                ("mimeType", "mediaType"),
                ("name", "filename"),
            ];
            for (from, to) in moves {
                if let Some(value) = file.get(from) {
                    part.insert(to.into(), value.clone());
                }
            }
        }
    }
    Value::Object(part)
}

/// A 1.0 `oneof` answer (`{"task": …}`, `{"message": …}`,
/// `{"statusUpdate": …}`, `{"artifactUpdate": …}`) in the 0.3 form.
pub(super) fn wrapped_to_earlier(value: Value) -> Value {
    let Value::Object(mut wrapper) = value else {
        return value;
    };
    if let Some(task) = wrapper.remove("task") {
        return task_to_earlier(task);
    }
    if let Some(message) = wrapper.remove("message") {
        return message_to_earlier(message);
    }
    if let Some(Value::Object(mut update)) = wrapper.remove("statusUpdate") {
        let state = update
            .get("status")
            .and_then(|status| status.get("state"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let last = matches!(
            state.as_str(),
            "TASK_STATE_COMPLETED"
                | "TASK_STATE_FAILED"
                | "TASK_STATE_CANCELED"
                | "TASK_STATE_REJECTED"
                | "TASK_STATE_INPUT_REQUIRED"
        );
        if let Some(status) = update.remove("status") {
            update.insert("status".into(), status_to_earlier(status));
        }
        update.insert("kind".into(), "status-update".into());
        update.insert("final".into(), Value::Bool(last));
        return Value::Object(update);
    }
    if let Some(Value::Object(mut update)) = wrapper.remove("artifactUpdate") {
        if let Some(artifact) = update.remove("artifact") {
            update.insert("artifact".into(), artifact_to_earlier(artifact));
        }
        update.insert("kind".into(), "artifact-update".into());
        return Value::Object(update);
    }
    Value::Object(wrapper)
}

/// A 1.0 Task in the 0.3 form.
pub(super) fn task_to_earlier(task: Value) -> Value {
    let Value::Object(mut task) = task else {
        return task;
    };
    if let Some(status) = task.remove("status") {
        task.insert("status".into(), status_to_earlier(status));
    }
    map_array(&mut task, "artifacts", artifact_to_earlier);
    map_array(&mut task, "history", message_to_earlier);
    task.insert("kind".into(), "task".into());
    Value::Object(task)
}

fn map_array(object: &mut Map<String, Value>, key: &str, each: fn(Value) -> Value) {
    if let Some(Value::Array(items)) = object.get_mut(key) {
        for item in items.iter_mut() {
            *item = each(item.take());
        }
    }
}

fn status_to_earlier(status: Value) -> Value {
    let Value::Object(mut status) = status else {
        return status;
    };
    if let Some(state) = status.get_mut("state") {
        let name = state.as_str().unwrap_or_default();
        *state = match name.strip_prefix("TASK_STATE_") {
            Some("UNSPECIFIED") | None => "unknown".into(),
            Some(rest) => rest.to_ascii_lowercase().replace('_', "-").into(),
        };
    }
    if let Some(message) = status.remove("message") {
        status.insert("message".into(), message_to_earlier(message));
    }
    Value::Object(status)
}

fn message_to_earlier(message: Value) -> Value {
    let Value::Object(mut message) = message else {
        return message;
    };
    if let Some(role) = message.get_mut("role") {
        *role = match role.as_str() {
            Some("ROLE_USER") => "user".into(),
            _ => "agent".into(),
        };
    }
    map_array(&mut message, "parts", part_to_earlier);
    message.insert("kind".into(), "message".into());
    Value::Object(message)
}

fn artifact_to_earlier(artifact: Value) -> Value {
    let Value::Object(mut artifact) = artifact else {
        return artifact;
    };
    map_array(&mut artifact, "parts", part_to_earlier);
    Value::Object(artifact)
}

fn part_to_earlier(part: Value) -> Value {
    let Value::Object(mut part) = part else {
        return part;
    };
    if part.contains_key("text") {
        part.insert("kind".into(), "text".into());
    } else if part.contains_key("data") {
        part.insert("kind".into(), "data".into());
    } else {
        let mut file = Map::new();
        let moves = [
            ("url", "uri"),
            ("raw", "bytes"),
            ("mediaType", "mimeType"),
            ("filename", "name"),
        ];
        for (from, to) in moves {
            if let Some(value) = part.remove(from) {
                file.insert(to.into(), value);
            }
        }
        part.insert("kind".into(), "file".into());
        part.insert("file".into(), Value::Object(file));
    }
    Value::Object(part)
}

/// The fields an A2A 0.3 client reads from an Agent Card, for the
/// card's JSON-RPC endpoint `url` (a 1.0 client reads
/// `supportedInterfaces` and leaves them alone).
pub(super) fn card_fields(url: &str) -> Value {
    json!({
        "url": url,
        "preferredTransport": goondan_a2a::JSONRPC_BINDING,
        "protocolVersion": "0.3.0",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_earlier_send_reads_as_the_current_one() {
        let earlier = json!({"message": {"kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "hi"}, {"kind": "file", "file": {"uri": "http://x/f", "mimeType": "text/plain"}}]}, "configuration": {"blocking": false}});
        let current = params_to_current(earlier);
        assert_eq!(
            current,
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}, {"url": "http://x/f", "mediaType": "text/plain"}]}, "configuration": {"returnImmediately": true}})
        );
    }

    #[test]
    fn current_answers_read_as_earlier_ones() {
        let task = json!({"task": {"id": "t", "contextId": "c", "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "decide"}]}}, "artifacts": [{"artifactId": "answer", "parts": [{"text": "a"}]}]}});
        assert_eq!(
            wrapped_to_earlier(task),
            json!({"id": "t", "contextId": "c", "status": {"state": "input-required", "message": {"messageId": "s", "role": "agent", "parts": [{"text": "decide", "kind": "text"}], "kind": "message"}}, "artifacts": [{"artifactId": "answer", "parts": [{"text": "a", "kind": "text"}]}], "kind": "task"})
        );
        let update = json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING"}}});
        assert_eq!(
            wrapped_to_earlier(update),
            json!({"taskId": "t", "contextId": "c", "status": {"state": "working"}, "kind": "status-update", "final": false})
        );
        let done = json!({"statusUpdate": {"taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_COMPLETED"}}});
        assert_eq!(wrapped_to_earlier(done)["final"], true);
        let piece = json!({"artifactUpdate": {"taskId": "t", "contextId": "c", "artifact": {"artifactId": "answer", "parts": [{"text": "p"}]}, "append": true}});
        assert_eq!(
            wrapped_to_earlier(piece),
            json!({"taskId": "t", "contextId": "c", "append": true, "artifact": {"artifactId": "answer", "parts": [{"text": "p", "kind": "text"}]}, "kind": "artifact-update"})
        );
    }
}
