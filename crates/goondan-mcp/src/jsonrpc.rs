//! JSON-RPC 2.0 as MCP uses it: one message per line on stdio, one per
//! HTTP body or SSE event on streamable HTTP. [`Incoming`] classifies a
//! decoded message; the constructors build the outgoing ones.

use serde_json::{json, Value};

/// The largest message either side reads, in bytes; a longer line ends
/// the connection instead of growing without bound.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC's "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC's "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC's "parse error".
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "invalid request".
pub const INVALID_REQUEST: i64 = -32600;

/// A decoded message, by its shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: it has a `method` and an `id`.
    Request {
        /// The id to answer with, as sent.
        id: Value,
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A notification: a `method` and no `id`.
    Notification {
        /// The method.
        method: String,
        /// The params (`null` when absent).
        params: Value,
    },
    /// A response: an `id` and a `result` or an `error`.
    Response {
        /// The id of the request it answers.
        id: Value,
        /// The result, or the error's `(code, message)`.
        outcome: Result<Value, (i64, String)>,
    },
}

impl Incoming {
    /// Classifies a JSON value; `None` when it is no JSON-RPC message.
    pub fn classify(value: Value) -> Option<Incoming> {
        let Value::Object(mut object) = value else {
            return None;
        };
        let id = object.remove("id");
        let params = object.remove("params").unwrap_or(Value::Null);
        if let Some(Value::String(method)) = object.remove("method") {
            return Some(match id {
                Some(id) if !id.is_null() => Incoming::Request { id, method, params },
                _ => Incoming::Notification { method, params },
            });
        }
        let id = id?;
        if let Some(result) = object.remove("result") {
            return Some(Incoming::Response {
                id,
                outcome: Ok(result),
            });
        }
        let error = object.remove("error")?;
        let code = error.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("(no message)")
            .to_string();
        Some(Incoming::Response {
            id,
            outcome: Err((code, message)),
        })
    }
}

/// A request with a numeric id.
pub fn request(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    if params.is_null() {
        json!({"jsonrpc": "2.0", "method": method})
    } else {
        json!({"jsonrpc": "2.0", "method": method, "params": params})
    }
}

/// A successful response.
pub fn result(id: Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response.
pub fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_classified_by_shape() {
        let cases = [
            (
                json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
                Some(Incoming::Request {
                    id: json!(1),
                    method: "ping".into(),
                    params: Value::Null,
                }),
            ),
            (
                json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
                Some(Incoming::Notification {
                    method: "notifications/tools/list_changed".into(),
                    params: Value::Null,
                }),
            ),
            (
                json!({"jsonrpc": "2.0", "id": "a", "result": {"x": 1}}),
                Some(Incoming::Response {
                    id: json!("a"),
                    outcome: Ok(json!({"x": 1})),
                }),
            ),
            (
                json!({"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "no"}}),
                Some(Incoming::Response {
                    id: json!(2),
                    outcome: Err((-32601, "no".into())),
                }),
            ),
            (json!([1, 2]), None),
            (json!({"jsonrpc": "2.0", "id": 3}), None),
        ];
        for (value, expected) in cases {
            assert_eq!(Incoming::classify(value.clone()), expected, "{value}");
        }
    }
}
