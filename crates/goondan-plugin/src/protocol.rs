//! The plugin protocol: JSON-RPC 2.0, one message per line, over the
//! plugin process's stdin (host → plugin) and stdout (plugin → host).
//! Both sides send requests: the host calls the plugin (`tool.invoke`,
//! `middleware.invoke`, ...), the plugin calls back into the host
//! (`middleware.next`, `state.get`, `log`, ...). `docs/plugin-protocol.md`
//! documents every method with an example.
//!
//! This module owns the wire shapes and the one decoder; it does not know
//! processes, timeouts or what a method does.

use goondan_types::{JsonObject, JsonValue, ToolCatalogItem};
use serde::{Deserialize, Serialize};

/// The protocol version this host speaks. A plugin answering `initialize`
/// with another version is refused (`E_PLUGIN_PROTOCOL`).
pub const PROTOCOL_VERSION: u32 = 1;

/// The longest line either side may send (8 MiB); a longer one is a
/// protocol error, so a runaway plugin cannot make the agent buffer
/// without bound.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Method names, host → plugin and plugin → host.
pub mod methods {
    /// Host → plugin, first request: versions and what the module exports.
    pub const INITIALIZE: &str = "initialize";
    /// Host → plugin: run one tool export (or an extension-registered tool).
    pub const TOOL_INVOKE: &str = "tool.invoke";
    /// Host → plugin notification: stop working on request `id`.
    pub const CANCEL: &str = "$/cancel";
    /// Host → plugin: finish and exit.
    pub const SHUTDOWN: &str = "shutdown";
    /// Host → plugin: run an extension's `register(api, config)`.
    pub const EXTENSION_REGISTER: &str = "extension.register";
    /// Host → plugin: run a connector's default export until it returns.
    pub const CONNECTOR_START: &str = "connector.start";
    /// Host → plugin: run one registered middleware.
    pub const MIDDLEWARE_INVOKE: &str = "middleware.invoke";
    /// Host → plugin notification: an event the extension subscribed to.
    pub const EVENTS_DISPATCH: &str = "events.dispatch";
    /// Plugin → host: run the inner chain of a middleware invocation.
    pub const MIDDLEWARE_NEXT: &str = "middleware.next";
    /// Plugin → host: read the extension's state.
    pub const STATE_GET: &str = "state.get";
    /// Plugin → host: replace the extension's state.
    pub const STATE_SET: &str = "state.set";
    /// Plugin → host: emit an event on the agent's event bus.
    pub const EVENTS_EMIT: &str = "events.emit";
    /// Plugin → host: emit a message event into the Turn's conversation.
    pub const MESSAGE_EMIT: &str = "message.emit";
    /// Plugin → host, during `connector.start`: `ctx.emit(event)`.
    pub const CONNECTOR_EMIT: &str = "connector.emit";
    /// Plugin → host notification: a log line.
    pub const LOG: &str = "log";
    /// Plugin → host, during `tool.invoke`: ask another agent and wait.
    pub const AGENTS_REQUEST: &str = "agents.request";
    /// Plugin → host, during `tool.invoke`: a one-way event to an agent.
    pub const AGENTS_SEND: &str = "agents.send";
    /// Plugin → host, during `tool.invoke`: the swarm's agents.
    pub const AGENTS_CATALOG: &str = "agents.catalog";
    /// Plugin → host, during `tool.invoke` or `middleware.invoke`: ask a
    /// person and wait for the decision.
    pub const OPERATOR_ASK: &str = "operator.ask";
}

/// JSON-RPC error codes this protocol uses.
pub mod error_codes {
    /// The request is not valid JSON-RPC.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method is unknown.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The parameters are wrong.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The user's code threw; `data` carries a structured tool error.
    pub const USER_ERROR: i64 = -32000;
    /// `middleware.next` was called a second time in one invocation.
    pub const NEXT_TWICE: i64 = -32001;
    /// The request was cancelled.
    pub const CANCELLED: i64 = -32800;
}

/// A request id. The host uses numbers; a plugin may use numbers or
/// strings, and gets its id back unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A numeric id.
    Number(u64),
    /// A string id.
    Text(String),
}

/// The error object of a failed response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// A JSON-RPC error code ([`error_codes`]).
    pub code: i64,
    /// What went wrong.
    pub message: String,
    /// Structured detail: for [`error_codes::USER_ERROR`], a tool error
    /// (`code`, `name`, `suggestion`, `helpUrl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<JsonValue>,
}

impl RpcError {
    /// An error with a code and a message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// One decoded line.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcMessage {
    /// A request (with an id) or a notification (without).
    Request {
        /// `None` for a notification.
        id: Option<RequestId>,
        /// The method.
        method: String,
        /// The parameters (`null` when absent).
        params: JsonValue,
    },
    /// An answer to a request.
    Response {
        /// The id of the request it answers.
        id: RequestId,
        /// The result or the error.
        outcome: Result<JsonValue, RpcError>,
    },
}

/// Why a line is not a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// What is wrong with it.
    pub reason: String,
}

#[derive(Deserialize)]
struct RawMessage {
    jsonrpc: Option<String>,
    #[serde(default)]
    id: Option<JsonValue>,
    method: Option<String>,
    #[serde(default)]
    params: Option<JsonValue>,
    #[serde(default)]
    result: Option<JsonValue>,
    #[serde(default)]
    error: Option<RpcError>,
}

/// Decodes one line. The only decoder of the crate: anything it refuses
/// is a protocol error of the plugin.
pub fn decode(line: &str) -> Result<RpcMessage, DecodeError> {
    let fail = |reason: String| DecodeError { reason };
    let raw: RawMessage =
        serde_json::from_str(line).map_err(|error| fail(format!("not JSON-RPC JSON: {error}")))?;
    if raw.jsonrpc.as_deref() != Some("2.0") {
        return Err(fail("`jsonrpc` is not \"2.0\"".into()));
    }
    let id = match raw.id {
        None | Some(JsonValue::Null) => None,
        Some(value) => Some(
            serde_json::from_value::<RequestId>(value)
                .map_err(|_| fail("`id` is neither a number nor a string".into()))?,
        ),
    };
    match (raw.method, id) {
        (Some(method), id) => Ok(RpcMessage::Request {
            id,
            method,
            params: raw.params.unwrap_or(JsonValue::Null),
        }),
        (None, Some(id)) => {
            let outcome = match (raw.result, raw.error) {
                (_, Some(error)) => Err(error),
                (Some(result), None) => Ok(result),
                // `"result": null` deserializes as `None`.
                (None, None) => Ok(JsonValue::Null),
            };
            Ok(RpcMessage::Response { id, outcome })
        }
        (None, None) => Err(fail("neither a request nor a response".into())),
    }
}

/// Encodes a request (`id` set) or a notification (`id` absent).
pub fn encode_request(id: Option<&RequestId>, method: &str, params: &JsonValue) -> String {
    let mut message = serde_json::json!({ "jsonrpc": "2.0", "method": method, "params": params });
    if let Some(id) = id {
        message["id"] = serde_json::to_value(id).unwrap_or(JsonValue::Null);
    }
    message.to_string()
}

/// Encodes a response to request `id`.
pub fn encode_response(id: &RequestId, outcome: &Result<JsonValue, RpcError>) -> String {
    let id = serde_json::to_value(id).unwrap_or(JsonValue::Null);
    match outcome {
        Ok(result) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(error) => serde_json::json!({ "jsonrpc": "2.0", "id": id, "error": error }),
    }
    .to_string()
}

/// `initialize` parameters.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The module's absolute path.
    pub entry: String,
}

/// What a module exports, as the plugin reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exports {
    /// Tool handler names (`handlers` keys, or named function exports).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Whether the module exports `register(api, config)`.
    #[serde(default)]
    pub register: bool,
    /// Whether the module is a connector (a default-exported function and
    /// no handlers).
    #[serde(default)]
    pub connector: bool,
}

/// `initialize` result.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The version the plugin speaks; must equal [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// What the module exports.
    #[serde(default)]
    pub exports: Exports,
}

/// The `ToolContext` subset a plugin's handler receives.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WireToolContext {
    /// The agent.
    pub agent_name: String,
    /// Its instance.
    pub instance_key: String,
    /// The Turn.
    pub turn_id: String,
    /// The chain's trace id.
    pub trace_id: String,
    /// The call id.
    pub tool_call_id: String,
    /// The instance's working directory.
    pub workdir: String,
}

/// The middleware kinds on the wire: `turn`, `step`, `toolCall`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireMiddlewareKind {
    /// `turn`.
    #[serde(rename = "turn")]
    Turn,
    /// `step`.
    #[serde(rename = "step")]
    Step,
    /// `toolCall`.
    #[serde(rename = "toolCall")]
    ToolCall,
}

/// One middleware an extension registered.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RegisteredMiddleware {
    /// The plugin's id for it; `middleware.invoke` names it.
    pub id: String,
    /// Its kind.
    pub kind: WireMiddlewareKind,
    /// Its priority (default 0).
    #[serde(default)]
    pub priority: i32,
}

/// One tool an extension registered with `api.tools.register`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RegisteredTool {
    /// Its catalog item.
    pub item: ToolCatalogItem,
}

/// One `api.events.on` subscription.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RegisteredSubscription {
    /// The plugin's id for it; `events.dispatch` names it.
    pub id: String,
    /// The event name.
    pub event: String,
}

/// `extension.register` result: everything `register(api, config)` did.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Registrations {
    /// Middlewares, in registration order.
    #[serde(default)]
    pub middlewares: Vec<RegisteredMiddleware>,
    /// Tools.
    #[serde(default)]
    pub tools: Vec<RegisteredTool>,
    /// Event subscriptions.
    #[serde(default)]
    pub subscriptions: Vec<RegisteredSubscription>,
}

/// The context changes a plugin middleware sends with `middleware.next`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextChanges {
    /// A step's catalog as the layer left it.
    #[serde(default)]
    pub tool_catalog: Option<Vec<ToolCatalogItem>>,
    /// A tool call's arguments as the layer left them.
    #[serde(default)]
    pub args: Option<JsonObject>,
    /// The layer kind's shared metadata.
    #[serde(default)]
    pub metadata: Option<JsonObject>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decode_reads_requests_notifications_and_responses() {
        let check = |line: &str, expected: RpcMessage| assert_eq!(decode(line), Ok(expected));
        check(
            r#"{"jsonrpc":"2.0","id":7,"method":"state.get","params":{"extension":"x"}}"#,
            RpcMessage::Request {
                id: Some(RequestId::Number(7)),
                method: "state.get".into(),
                params: json!({"extension": "x"}),
            },
        );
        check(
            r#"{"jsonrpc":"2.0","method":"log","params":{"level":"info","message":"hi"}}"#,
            RpcMessage::Request {
                id: None,
                method: "log".into(),
                params: json!({"level": "info", "message": "hi"}),
            },
        );
        check(
            r#"{"jsonrpc":"2.0","id":"a","result":null}"#,
            RpcMessage::Response {
                id: RequestId::Text("a".into()),
                outcome: Ok(JsonValue::Null),
            },
        );
        check(
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"boom"}}"#,
            RpcMessage::Response {
                id: RequestId::Number(3),
                outcome: Err(RpcError::new(-32000, "boom")),
            },
        );
    }

    #[test]
    fn decode_refuses_what_is_not_json_rpc() {
        for line in [
            "hello",
            "{}",
            r#"{"jsonrpc":"1.0","id":1,"result":1}"#,
            r#"{"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"result":1}"#,
        ] {
            assert!(decode(line).is_err(), "{line}");
        }
    }

    #[test]
    fn encoded_messages_decode_to_themselves() {
        let id = RequestId::Number(1);
        let line = encode_request(Some(&id), "tool.invoke", &json!({"export": "x"}));
        assert_eq!(
            decode(&line).unwrap(),
            RpcMessage::Request {
                id: Some(id.clone()),
                method: "tool.invoke".into(),
                params: json!({"export": "x"}),
            }
        );
        let line = encode_response(&id, &Err(RpcError::new(error_codes::NEXT_TWICE, "twice")));
        assert_eq!(
            decode(&line).unwrap(),
            RpcMessage::Response {
                id,
                outcome: Err(RpcError::new(error_codes::NEXT_TWICE, "twice")),
            }
        );
    }
}
