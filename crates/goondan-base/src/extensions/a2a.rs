//! The `a2a` Extension (`builtin:a2a`): remote A2A agents as tools.
//!
//! Each agent of `config.agents` becomes the tool `<name>__send` (input
//! `text`, optional `contextId` and `taskId`), which sends the text to the
//! agent through `goondan_a2a`'s client and returns its answer with the
//! ids that continue the conversation. The card is fetched at the first
//! call, not at start, so an agent process pays nothing until it calls.
//! While a call runs, every streamed update (a status change, an answer
//! chunk) is reported as a `tool.progress` runtime event of the Turn.
//! Every failure (unreachable, timeout, a card without a JSON-RPC
//! interface, an oversized answer, a Task that failed or waits for input)
//! is a `status: "error"` tool result with an `E_A2A_*` code, never a
//! failed Turn.
//!
//! # Addresses
//!
//! The configured `url` is trusted: the operator wrote it, and it may be
//! on loopback or the private network. An endpoint the agent's *card*
//! names on another origin is checked by `http-fetch`'s rules
//! ([`HttpFetchTool::destination`]: public addresses only, unless its host
//! is in `GOONDAN_HTTP_FETCH_ALLOW`), and redirects outside the configured
//! origin are not followed.

use crate::tools::http_fetch::{Destination, HttpFetchConfig, HttpFetchTool};
use futures_util::future::BoxFuture;
use goondan_a2a::error::state_name;
use goondan_a2a::types::{texts, StreamResponse};
use goondan_a2a::{A2aError, EndpointGuard, RemoteAgent, RemoteConfig, SendArgs, Url};
use goondan_mcp::client::config::ConfigValue;
use goondan_runtime::tool::ToolOutcome;
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, ToolContext, ToolFailure, ToolHandler,
};
use goondan_types::{JsonObject, JsonValue, Secrets, ToolCatalogItem};
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The default deadline of one call, card included: a remote agent runs
/// its own model calls and tools.
pub const DEFAULT_TIMEOUT_MS: u64 = 120_000;
/// The default limit of one answer (a body or a whole stream), in bytes.
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 1_000_000;
/// The longest text of a progress line, in characters (the event's
/// `data` carries the whole of it).
const PROGRESS_LINE_CHARS: usize = 200;

/// `config` of the `a2a` extension.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct A2aConfig {
    /// The remote agents, by the name that prefixes their tool.
    #[serde(default)]
    pub agents: BTreeMap<String, AgentConfig>,
    /// The deadline of one call, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The most bytes one answer may have.
    #[serde(default = "default_max_answer_bytes")]
    pub max_answer_bytes: u64,
}

impl Default for A2aConfig {
    fn default() -> Self {
        A2aConfig {
            agents: BTreeMap::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
        }
    }
}

impl A2aConfig {
    /// Parses the extension's `config` (`null` is no agents).
    pub fn parse(config: &JsonValue) -> Result<A2aConfig, A2aError> {
        if config.is_null() {
            return Ok(A2aConfig::default());
        }
        serde_json::from_value(config.clone()).map_err(|error| A2aError::Config {
            message: error.to_string(),
        })
    }
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

fn default_max_answer_bytes() -> u64 {
    DEFAULT_MAX_ANSWER_BYTES
}

/// One remote agent.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AgentConfig {
    /// Its base URL; the card is at `<url>/.well-known/agent-card.json`.
    pub url: String,
    /// Headers sent with every request, inline or `valueFrom.env`.
    #[serde(default)]
    pub headers: BTreeMap<String, ConfigValue>,
    /// What the tool's description says the agent does.
    #[serde(default)]
    pub description: Option<String>,
    /// This agent's deadline, over the extension's `timeoutMs`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// This agent's answer limit, over the extension's `maxAnswerBytes`.
    #[serde(default)]
    pub max_answer_bytes: Option<u64>,
}

/// The extension. `valueFrom.env` in its config reads the secrets the
/// orchestrator handed to the agent first, then the process environment.
#[derive(Debug, Clone, Default)]
pub struct A2a {
    secrets: Secrets,
}

impl A2a {
    /// The extension, resolving `valueFrom.env` in `secrets` first.
    pub fn new(secrets: Secrets) -> Self {
        A2a { secrets }
    }

    fn lookup(&self, name: &str) -> Option<String> {
        self.secrets
            .get(name)
            .map(str::to_string)
            .or_else(|| std::env::var(name).ok())
    }

    /// Every agent of `config`, resolved.
    fn resolve(&self, config: &A2aConfig) -> Result<Vec<(RemoteConfig, String)>, A2aError> {
        config
            .agents
            .iter()
            .map(|(name, agent)| {
                let invalid = |message: String| A2aError::Config {
                    message: format!("agents.{name}: {message}"),
                };
                // The name prefixes `<name>__send`: one `__`, a plain
                // identifier a model can echo.
                let name_ok = goondan_types::tool::ToolName::is_plain_resource(name);
                if !name_ok {
                    return Err(invalid(
                        "an agent name uses letters, digits, `-` and `_`, without `__`".into(),
                    ));
                }
                let url = Url::parse(&agent.url)
                    .map_err(|error| invalid(format!("url `{}`: {error}", agent.url)))?;
                let headers = agent
                    .headers
                    .iter()
                    .map(|(key, value)| match value {
                        ConfigValue::Literal(text) => Ok((key.clone(), text.clone())),
                        ConfigValue::From { value_from } => self
                            .lookup(&value_from.env)
                            .map(|text| (key.clone(), text))
                            .ok_or_else(|| {
                                invalid(format!(
                                    "headers.{key}: variable `{}` is not set",
                                    value_from.env
                                ))
                            }),
                    })
                    .collect::<Result<_, _>>()?;
                let timeout_ms = agent.timeout_ms.unwrap_or(config.timeout_ms);
                let max_answer_bytes = agent.max_answer_bytes.unwrap_or(config.max_answer_bytes);
                if timeout_ms == 0 || max_answer_bytes == 0 {
                    return Err(invalid(
                        "`timeoutMs` and `maxAnswerBytes` must be at least 1".into(),
                    ));
                }
                let description = agent
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("the remote A2A agent `{name}` at {url}"));
                Ok((
                    RemoteConfig {
                        name: name.clone(),
                        url,
                        headers,
                        timeout: Duration::from_millis(timeout_ms),
                        max_answer_bytes,
                    },
                    description,
                ))
            })
            .collect()
    }
}

fn init_error(error: A2aError) -> ExtensionInitError {
    ExtensionInitError::new(format!("[{}] {error}", error.code()))
}

impl Extension for A2a {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let agents = A2aConfig::parse(config)
            .and_then(|config| self.resolve(&config))
            .map_err(init_error)?;
        if agents.is_empty() {
            return Ok(());
        }
        let guard: Arc<dyn EndpointGuard> =
            Arc::new(FetchRules(HttpFetchTool::new(HttpFetchConfig::default())));
        for (remote, description) in agents {
            let name = format!("{}__send", remote.name);
            let agent = RemoteAgent::new(remote, guard.clone()).map_err(init_error)?;
            let item = ToolCatalogItem {
                name: name.clone(),
                description: Some(format!(
                    "Send a message to {description} and return its answer (`text`, with `taskId`, `contextId` and `state`). To continue that conversation, pass the `contextId` of an earlier answer; to answer a question the agent asked (an E_A2A_INPUT_REQUIRED result), pass its `taskId` too."
                )),
                parameters: Some(parameters()),
                source: None,
            };
            api.tools()
                .register(item, Arc::new(SendTool { agent }))
                .map_err(|error| ExtensionInitError::new(format!("a2a: {error}")))?;
        }
        Ok(())
    }
}

fn parameters() -> JsonObject {
    let schema = json!({
        "type": "object",
        "required": ["text"],
        "additionalProperties": false,
        "properties": {
            "text": {"type": "string", "description": "The message to the agent."},
            "contextId": {"type": "string", "description": "The conversation to continue (from an earlier answer)."},
            "taskId": {"type": "string", "description": "The task to continue (one that asked for input)."}
        }
    });
    match schema {
        JsonValue::Object(object) => object,
        _ => JsonObject::new(),
    }
}

/// `http-fetch`'s rules for an endpoint a card names on another origin.
struct FetchRules(HttpFetchTool);

impl EndpointGuard for FetchRules {
    fn check<'a>(&'a self, url: &'a Url) -> BoxFuture<'a, Result<Vec<SocketAddr>, String>> {
        Box::pin(async move {
            match self.0.destination("POST", url).await {
                Ok(Destination::Literal) => Ok(Vec::new()),
                Ok(Destination::Resolved { addresses, .. }) => Ok(addresses),
                Err(error) => Err(error.to_string()),
            }
        })
    }
}

/// One remote agent's `<name>__send`.
struct SendTool {
    agent: RemoteAgent,
}

/// A tool argument that must be a string when given.
fn string_arg(args: &JsonObject, name: &str) -> Result<Option<String>, ToolFailure> {
    match args.get(name) {
        None | Some(JsonValue::Null) => Ok(None),
        Some(JsonValue::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(ToolFailure::new(
            "E_TOOL_INVALID_ARGS",
            format!("`{name}` must be a string"),
        )
        .with_name("ToolInputError")),
    }
}

/// One streamed item as a progress line and its data.
fn progress_of(item: &StreamResponse) -> (String, JsonValue) {
    let (line, data) = match item {
        StreamResponse::Task(task) => {
            let state = state_name(task.status.state);
            (
                format!("task {} {state}", task.id),
                json!({"kind": "task", "taskId": task.id, "contextId": task.context_id, "state": state}),
            )
        }
        StreamResponse::StatusUpdate(update) => {
            let state = state_name(update.status.state);
            let text = update
                .status
                .message
                .as_ref()
                .map(|message| message.text())
                .unwrap_or_default();
            let line = if text.is_empty() {
                state.to_string()
            } else {
                format!("{state}: {text}")
            };
            (
                line,
                json!({"kind": "status", "taskId": update.task_id, "contextId": update.context_id, "state": state, "text": text}),
            )
        }
        StreamResponse::ArtifactUpdate(update) => {
            let text = texts(&update.artifact.parts);
            (
                format!("answer: {text}"),
                json!({"kind": "artifact", "taskId": update.task_id, "artifactId": update.artifact.artifact_id, "append": update.append, "lastChunk": update.last_chunk, "text": text}),
            )
        }
        StreamResponse::Message(message) => {
            let text = message.text();
            (
                format!("message: {text}"),
                json!({"kind": "message", "contextId": message.context_id, "text": text}),
            )
        }
    };
    let mut line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some((cut, _)) = line.char_indices().nth(PROGRESS_LINE_CHARS) {
        line.truncate(cut);
        line.push('…');
    }
    (line, data)
}

impl ToolHandler for SendTool {
    fn call<'a>(&'a self, ctx: &'a ToolContext, args: JsonObject) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move {
            let send = SendArgs {
                text: string_arg(&args, "text")?.unwrap_or_default(),
                context_id: string_arg(&args, "contextId")?,
                task_id: string_arg(&args, "taskId")?,
            };
            let report = |item: &StreamResponse| {
                let (line, data) = progress_of(item);
                ctx.progress.report(line, Some(data));
            };
            match self.agent.send(&send, &report).await {
                Ok(answer) => Ok(json!({
                    "text": answer.text,
                    "taskId": answer.task_id,
                    "contextId": answer.context_id,
                    "state": state_name(answer.state),
                })),
                Err(error) => Err(ToolFailure::new(error.code(), error.to_string())
                    .with_name("A2aError")
                    .with_suggestion(error.suggestion())),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(config: JsonValue) -> Result<Vec<(RemoteConfig, String)>, String> {
        let mut secrets = Secrets::default();
        secrets.insert("A2A_TEST_TOKEN", "s3cret");
        A2aConfig::parse(&config)
            .and_then(|parsed| A2a::new(secrets).resolve(&parsed))
            .map_err(|error| format!("[{}] {error}", error.code()))
    }

    #[test]
    fn config_resolves_headers_from_secrets_and_defaults_per_agent() {
        let agents = resolve(json!({"timeoutMs": 5000, "agents": {
            "echo": {"url": "http://127.0.0.1:9/a2a", "headers": {"Authorization": {"valueFrom": {"env": "A2A_TEST_TOKEN"}}}},
            "slow": {"url": "https://agents.example/x", "timeoutMs": 9, "maxAnswerBytes": 10, "description": "the slow one"}
        }}))
        .unwrap();
        let (echo, echo_description) = &agents[0];
        assert_eq!(
            echo.headers,
            [("Authorization".to_string(), "s3cret".to_string())]
        );
        assert_eq!(echo.timeout, Duration::from_millis(5000));
        assert_eq!(echo.max_answer_bytes, DEFAULT_MAX_ANSWER_BYTES);
        assert!(echo_description.contains("`echo` at http://127.0.0.1:9/a2a"));
        assert!(!format!("{echo:?}").contains("s3cret"));
        let (slow, slow_description) = &agents[1];
        assert_eq!(
            (
                slow.timeout,
                slow.max_answer_bytes,
                slow_description.as_str()
            ),
            (Duration::from_millis(9), 10, "the slow one")
        );
    }

    #[test]
    fn bad_config_names_the_field() {
        for (config, expected) in [
            (json!({"agents": {"a": {}}}), "missing field `url`"),
            (
                json!({"agents": {"a": {"url": "http://h", "nope": 1}}}),
                "unknown field `nope`",
            ),
            (
                json!({"agents": {"a__b": {"url": "http://h"}}}),
                "agents.a__b: an agent name",
            ),
            (
                json!({"agents": {"a": {"url": "not a url"}}}),
                "agents.a: url `not a url`",
            ),
            (
                json!({"agents": {"a": {"url": "http://h", "headers": {"X": {"valueFrom": {"env": "A2A_NOPE_UNSET"}}}}}}),
                "headers.X: variable `A2A_NOPE_UNSET` is not set",
            ),
            (
                json!({"agents": {"a": {"url": "http://h", "timeoutMs": 0}}}),
                "at least 1",
            ),
        ] {
            let error = resolve(config.clone()).unwrap_err();
            assert!(error.starts_with("[E_A2A_CONFIG] "), "{error}");
            assert!(error.contains(expected), "{config}: {error}");
        }
    }

    #[test]
    fn progress_lines_are_one_short_line() {
        let item: StreamResponse = serde_json::from_value(json!({"statusUpdate": {
            "taskId": "t", "contextId": "c", "status": {"state": "TASK_STATE_WORKING",
            "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "step one\nstep two"}]}}}}))
        .unwrap();
        let (line, data) = progress_of(&item);
        assert_eq!(line, "working: step one step two");
        assert_eq!(data["state"], "working");
        let item: StreamResponse = serde_json::from_value(json!({"artifactUpdate": {
            "taskId": "t", "contextId": "c", "artifact": {"artifactId": "a", "parts": [{"text": "x".repeat(500)}]}}}))
        .unwrap();
        let (line, data) = progress_of(&item);
        assert_eq!(line.chars().count(), PROGRESS_LINE_CHARS + 1);
        assert_eq!(data["text"].as_str().unwrap().len(), 500);
    }
}
