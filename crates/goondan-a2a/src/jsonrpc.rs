//! The JSON-RPC 2.0 envelope of A2A's JSON-RPC binding, the method
//! names, and the error codes the specification assigns.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Sends a message and answers with a Task or a Message.
pub const SEND_MESSAGE: &str = "SendMessage";
/// Sends a message and answers with a stream of `StreamResponse`s (SSE).
pub const SEND_STREAMING_MESSAGE: &str = "SendStreamingMessage";
/// A Task by id.
pub const GET_TASK: &str = "GetTask";
/// Cancels a Task.
pub const CANCEL_TASK: &str = "CancelTask";
/// Streams a Task's updates from now on.
pub const SUBSCRIBE_TO_TASK: &str = "SubscribeToTask";

/// The body is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// The body is JSON but not a JSON-RPC request.
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The method's parameters are wrong.
pub const INVALID_PARAMS: i64 = -32602;
/// The server failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// No Task has that id (or it is no longer remembered).
pub const TASK_NOT_FOUND: i64 = -32001;
/// The Task is over and cannot be cancelled.
pub const TASK_NOT_CANCELABLE: i64 = -32002;
/// Push notifications are not offered.
pub const PUSH_NOTIFICATION_NOT_SUPPORTED: i64 = -32003;
/// The operation is not offered.
pub const UNSUPPORTED_OPERATION: i64 = -32004;
/// A part's media type is not accepted.
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
/// The remote agent answered something that is not A2A.
pub const INVALID_AGENT_RESPONSE: i64 = -32006;
/// The protocol version the client asked for is not spoken.
pub const VERSION_NOT_SUPPORTED: i64 = -32009;

/// A JSON-RPC request as sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The request id (a string or a number), echoed in the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    /// The method.
    pub method: String,
    /// Its parameters.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub params: Value,
}

impl Request {
    /// A request with id `id`.
    pub fn new(id: impl Into<Value>, method: &str, params: Value) -> Request {
        Request {
            jsonrpc: "2.0".into(),
            id: Some(id.into()),
            method: method.into(),
            params,
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// One of the codes of this module, or another server's.
    pub code: i64,
    /// What went wrong.
    #[serde(default)]
    pub message: String,
    /// More, when there is more (Goondan puts its `E_…` code there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// A JSON-RPC response: `result` or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The request's id (`null` when it could not be read).
    pub id: Value,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
}

impl Response {
    /// A successful answer to `id`.
    pub fn result(id: Value, result: Value) -> Response {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: Some(result),
            error: None,
        }
    }

    /// A refusal of `id` with `code`, saying `message`, and Goondan's own
    /// `E_…` code in `data.code` when there is one.
    pub fn error(
        id: Value,
        code: i64,
        message: impl Into<String>,
        goondan_code: Option<&str>,
    ) -> Response {
        Response {
            jsonrpc: "2.0".into(),
            id,
            result: None,
            error: Some(ErrorObject {
                code,
                message: message.into(),
                data: goondan_code.map(|code| serde_json::json!({ "code": code })),
            }),
        }
    }
}
