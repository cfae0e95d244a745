//! The A2A client: one [`RemoteAgent`] per remote agent the `a2a`
//! extension names. It resolves the agent's card (cached until a failure
//! says it may be stale), sends a message over the card's JSON-RPC
//! interface (`SendStreamingMessage` when the card offers streaming,
//! else `SendMessage`, then `GetTask` while the Task is still working),
//! and folds what comes back into an [`Answer`].
//!
//! # What it will not do
//!
//! * Read without bound: the card, a body and a whole stream each stop at
//!   a byte limit ([`MAX_CARD_BYTES`], [`RemoteConfig::max_answer_bytes`]),
//!   and the whole exchange (card included) has one deadline
//!   ([`RemoteConfig::timeout`]), so an endless stream ends there.
//! * Reach an address the operator did not name: the configured `url`'s
//!   origin is trusted (the operator wrote it), but an endpoint a card
//!   names on another origin passes the caller's [`EndpointGuard`] first
//!   and is then connected to at exactly the addresses the guard checked.
//!   Redirects are followed only within the configured origin; any other
//!   is refused ([`A2aError::Blocked`]), since a redirect cannot be
//!   checked before it is followed.

use crate::error::A2aError;
use crate::jsonrpc::{self, Request, Response};
use crate::types::{
    texts, AgentCard, Message, Part, Role, SendMessageRequest, SendMessageResponse, StreamResponse,
    Task, TaskIdRequest, TaskState,
};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use goondan_types::sse::SseDecoder;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;
/// URLs as the client takes them.
pub use reqwest::Url;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The largest Agent Card read, in bytes.
pub const MAX_CARD_BYTES: u64 = 1 << 20;
/// How many redirects within the configured origin one request follows.
const MAX_REDIRECTS: usize = 5;
/// The first wait between two `GetTask`s of a Task still working; it
/// doubles up to [`MAX_POLL`].
const FIRST_POLL: Duration = Duration::from_millis(100);
const MAX_POLL: Duration = Duration::from_secs(2);

/// Checks an endpoint URL on another origin than the configured one.
/// `Ok` holds the addresses to connect to (empty for a URL whose host is
/// an address, or one the operator allowed by name); `Err` says why the
/// URL is refused.
pub trait EndpointGuard: Send + Sync {
    /// Checks `url`.
    fn check<'a>(&'a self, url: &'a Url) -> BoxFuture<'a, Result<Vec<SocketAddr>, String>>;
}

/// One remote agent, resolved from the extension's config.
#[derive(Clone)]
pub struct RemoteConfig {
    /// Its name in the config (the tool is `<name>__send`).
    pub name: String,
    /// Its base URL; the card is at `<url>/.well-known/agent-card.json`.
    pub url: Url,
    /// Headers sent with every request (an `Authorization` token).
    pub headers: Vec<(String, String)>,
    /// The deadline of one call, card included.
    pub timeout: Duration,
    /// The most bytes one answer (a body or a whole stream) may have.
    pub max_answer_bytes: u64,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may be secrets: only their names are shown.
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("RemoteConfig")
            .field("name", &self.name)
            .field("url", &self.url.as_str())
            .field("headers", &names)
            .field("timeout", &self.timeout)
            .field("max_answer_bytes", &self.max_answer_bytes)
            .finish()
    }
}

/// What a call sends.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SendArgs {
    /// The message's text.
    pub text: String,
    /// The conversation to continue.
    pub context_id: Option<String>,
    /// The Task to continue (one waiting for input).
    pub task_id: Option<String>,
}

/// The remote agent's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// Its text: the artifacts' text, else the final status message's,
    /// else the direct message's.
    pub text: String,
    /// The Task, when the agent made one.
    pub task_id: Option<String>,
    /// The conversation.
    pub context_id: Option<String>,
    /// The Task's final state (`Completed` for a direct message).
    pub state: TaskState,
}

/// The card and where its JSON-RPC interface is reached.
#[derive(Debug)]
pub struct Endpoint {
    /// The card as fetched.
    pub card: AgentCard,
    /// Its JSON-RPC interface.
    pub url: Url,
    client: reqwest::Client,
}

/// A remote A2A agent.
pub struct RemoteAgent {
    config: RemoteConfig,
    headers: HeaderMap,
    guard: Arc<dyn EndpointGuard>,
    /// For the configured origin; built on first use (building reads the
    /// platform's trust store for https).
    client: std::sync::OnceLock<reqwest::Client>,
    endpoint: tokio::sync::Mutex<Option<Arc<Endpoint>>>,
    next_id: AtomicU64,
}

impl std::fmt::Debug for RemoteAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteAgent")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl RemoteAgent {
    /// The agent of `config`; endpoints on other origins pass `guard`.
    pub fn new(config: RemoteConfig, guard: Arc<dyn EndpointGuard>) -> Result<Self, A2aError> {
        if !matches!(config.url.scheme(), "http" | "https") {
            return Err(A2aError::Config {
                message: format!(
                    "agents.{}.url: `{}` is not http(s)",
                    config.name, config.url
                ),
            });
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &config.headers {
            let invalid = |what: String| A2aError::Config {
                message: format!("agents.{}.headers: {what}", config.name),
            };
            let header = HeaderName::try_from(name.as_str())
                .map_err(|_| invalid(format!("`{name}` is not a header name")))?;
            // The value may be a secret: never echo it.
            let mut value = HeaderValue::try_from(value.as_str()).map_err(|_| {
                invalid(format!("the value of `{name}` is not a valid header value"))
            })?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        headers.insert(
            HeaderName::from_static("a2a-version"),
            HeaderValue::from_static(crate::PROTOCOL_VERSION),
        );
        Ok(RemoteAgent {
            config,
            headers,
            guard,
            client: std::sync::OnceLock::new(),
            endpoint: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
        })
    }

    /// Its config.
    pub fn config(&self) -> &RemoteConfig {
        &self.config
    }

    /// Sends `args` and waits for the answer, within the deadline;
    /// `on_update` sees every streamed item as it arrives.
    pub async fn send(
        &self,
        args: &SendArgs,
        on_update: &(dyn Fn(&StreamResponse) + Send + Sync),
    ) -> Result<Answer, A2aError> {
        let outcome = tokio::time::timeout(self.config.timeout, self.exchange(args, on_update))
            .await
            .unwrap_or_else(|_| {
                Err(A2aError::Timeout {
                    agent: self.config.name.clone(),
                    timeout_ms: self.config.timeout.as_millis() as u64,
                })
            });
        if let Err(error) = &outcome {
            if error.forgets_card() {
                *self.endpoint.lock().await = None;
            }
        }
        outcome
    }

    /// The card and its endpoint, fetched once and kept.
    pub async fn endpoint(&self) -> Result<Arc<Endpoint>, A2aError> {
        let mut slot = self.endpoint.lock().await;
        if let Some(endpoint) = slot.as_ref() {
            return Ok(endpoint.clone());
        }
        let endpoint = Arc::new(self.resolve().await?);
        *slot = Some(endpoint.clone());
        Ok(endpoint)
    }

    async fn exchange(
        &self,
        args: &SendArgs,
        on_update: &(dyn Fn(&StreamResponse) + Send + Sync),
    ) -> Result<Answer, A2aError> {
        let endpoint = self.endpoint().await?;
        let request = SendMessageRequest {
            message: Message {
                message_id: goondan_types::message::new_message_id(),
                context_id: args.context_id.clone(),
                task_id: args.task_id.clone(),
                role: Role::User,
                parts: vec![Part::text(args.text.clone())],
                ..Message::default()
            },
            configuration: None,
            metadata: None,
        };
        let params = self.to_params(&request)?;
        let mut fold = Fold::default();
        if endpoint.card.capabilities.streaming {
            self.stream(&endpoint, params, &mut fold, on_update).await?;
        } else {
            let answer: SendMessageResponse =
                self.call(&endpoint, jsonrpc::SEND_MESSAGE, params).await?;
            match answer {
                SendMessageResponse::Task(task) => fold.task(task),
                SendMessageResponse::Message(message) => fold.message(message),
            }
        }
        let mut wait = FIRST_POLL;
        while !fold.settled() {
            // A Task still working after `SendMessage` (or a stream that
            // ended early) is asked for until it settles or time is up.
            let Some(id) = fold.task_id.clone() else {
                return Err(self.protocol("the answer is neither a message nor a task"));
            };
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_POLL);
            let params = self.to_params(&TaskIdRequest {
                id,
                history_length: None,
            })?;
            let task: Task = self.call(&endpoint, jsonrpc::GET_TASK, params).await?;
            fold.task(task);
        }
        fold.finish(&self.config.name)
    }

    fn to_params(&self, value: &impl serde::Serialize) -> Result<Value, A2aError> {
        serde_json::to_value(value).map_err(|error| self.protocol(error.to_string()))
    }

    fn protocol(&self, message: impl Into<String>) -> A2aError {
        A2aError::Protocol {
            agent: self.config.name.clone(),
            message: message.into(),
        }
    }

    fn unreachable(&self, message: impl Into<String>) -> A2aError {
        A2aError::Unreachable {
            agent: self.config.name.clone(),
            message: message.into(),
        }
    }

    fn too_large(&self) -> A2aError {
        A2aError::TooLarge {
            agent: self.config.name.clone(),
            limit: self.config.max_answer_bytes,
        }
    }

    /// The client for the configured origin: redirects within it are
    /// followed, any other stops (and is refused by [`Self::checked`]).
    fn origin_client(&self) -> Result<reqwest::Client, A2aError> {
        if let Some(client) = self.client.get() {
            return Ok(client.clone());
        }
        let origin = self.config.url.origin();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS || attempt.url().origin() != origin {
                attempt.stop()
            } else {
                attempt.follow()
            }
        });
        let client = client_builder(&self.config.url)
            .redirect(policy)
            .build()
            .map_err(|error| self.unreachable(format!("building the HTTP client: {error}")))?;
        Ok(self.client.get_or_init(|| client).clone())
    }

    /// Fetches the card and settles where its JSON-RPC interface is.
    async fn resolve(&self) -> Result<Endpoint, A2aError> {
        let card_url = card_url(&self.config.url);
        let client = self.origin_client()?;
        let response = client
            .get(card_url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(|error| self.unreachable(format!("GET {card_url}: {}", chain(&error))))?;
        let response = self.checked(response, &card_url)?;
        let body =
            read_capped(response, MAX_CARD_BYTES)
                .await
                .map_err(|problem| match problem {
                    ReadProblem::TooLarge => A2aError::Card {
                        agent: self.config.name.clone(),
                        message: format!("it is larger than {MAX_CARD_BYTES} bytes"),
                    },
                    ReadProblem::Broken(message) => self.unreachable(message),
                })?;
        let card: AgentCard = serde_json::from_slice(&body).map_err(|error| A2aError::Card {
            agent: self.config.name.clone(),
            message: format!("{card_url} is not an Agent Card: {error}"),
        })?;
        let card_error = |message: String| A2aError::Card {
            agent: self.config.name.clone(),
            message,
        };
        let Some(raw) = card.jsonrpc_url() else {
            let offered: Vec<&str> = card
                .supported_interfaces
                .iter()
                .map(|interface| interface.protocol_binding.as_str())
                .collect();
            return Err(card_error(format!(
                "it names no JSONRPC interface in `supportedInterfaces` (offered: [{}]; a card of A2A 0.x has none)",
                offered.join(", ")
            )));
        };
        let url = Url::parse(raw).map_err(|error| {
            card_error(format!(
                "its JSONRPC url `{raw}` is not an absolute URL: {error}"
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(card_error(format!(
                "its JSONRPC url `{url}` is not http(s)"
            )));
        }
        let client = if url.origin() == self.config.url.origin() {
            client
        } else {
            self.foreign_client(&url).await?
        };
        Ok(Endpoint { card, url, client })
    }

    /// A client for an endpoint on another origin: checked by the guard,
    /// pinned to the addresses it checked, no redirects.
    async fn foreign_client(&self, url: &Url) -> Result<reqwest::Client, A2aError> {
        let addresses = self
            .guard
            .check(url)
            .await
            .map_err(|reason| A2aError::Blocked {
                agent: self.config.name.clone(),
                url: url.to_string(),
                reason,
            })?;
        let mut builder = client_builder(url).redirect(reqwest::redirect::Policy::none());
        if let (Some(host), false) = (url.host_str(), addresses.is_empty()) {
            builder = builder.resolve_to_addrs(host, &addresses);
        }
        builder
            .build()
            .map_err(|error| self.unreachable(format!("building the HTTP client: {error}")))
    }

    /// `response` if it succeeded; a redirect that was not followed and
    /// an HTTP error are errors.
    fn checked(
        &self,
        response: reqwest::Response,
        url: &Url,
    ) -> Result<reqwest::Response, A2aError> {
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("?")
                .to_string();
            return Err(A2aError::Blocked {
                agent: self.config.name.clone(),
                url: location,
                reason: format!(
                    "{url} redirects there, outside the configured origin (or past {MAX_REDIRECTS} redirects)"
                ),
            });
        }
        if !status.is_success() {
            let hint = match status {
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => " (check `headers`)",
                _ => "",
            };
            return Err(self.unreachable(format!("{url} answered {status}{hint}")));
        }
        Ok(response)
    }

    fn request(&self, method: &str, params: Value) -> Request {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        Request::new(id, method, params)
    }

    async fn post(
        &self,
        endpoint: &Endpoint,
        request: &Request,
        accept: &'static str,
    ) -> Result<reqwest::Response, A2aError> {
        let response = endpoint
            .client
            .post(endpoint.url.clone())
            .headers(self.headers.clone())
            .header(ACCEPT, accept)
            .header(CONTENT_TYPE, "application/json")
            .json(request)
            .send()
            .await
            .map_err(|error| {
                self.unreachable(format!(
                    "POST {} ({}): {}",
                    endpoint.url,
                    request.method,
                    chain(&error)
                ))
            })?;
        self.checked(response, &endpoint.url)
    }

    /// One JSON-RPC call answered by one JSON body.
    async fn call<T: DeserializeOwned>(
        &self,
        endpoint: &Endpoint,
        method: &str,
        params: Value,
    ) -> Result<T, A2aError> {
        let request = self.request(method, params);
        let response = self.post(endpoint, &request, "application/json").await?;
        let body = read_capped(response, self.config.max_answer_bytes)
            .await
            .map_err(|problem| self.read_error(problem))?;
        let result = self.result_of(&body)?;
        serde_json::from_value(result)
            .map_err(|error| self.protocol(format!("the {method} result does not read: {error}")))
    }

    /// The `result` of one JSON-RPC response, or the error it carries.
    fn result_of(&self, body: &[u8]) -> Result<Value, A2aError> {
        let response: Response = serde_json::from_slice(body).map_err(|error| {
            self.protocol(format!(
                "the answer is not a JSON-RPC response ({error}): {}",
                preview(body)
            ))
        })?;
        if let Some(error) = response.error {
            return Err(A2aError::Remote {
                agent: self.config.name.clone(),
                code: error.code,
                message: error.message,
            });
        }
        response
            .result
            .ok_or_else(|| self.protocol("the response has neither `result` nor `error`"))
    }

    fn read_error(&self, problem: ReadProblem) -> A2aError {
        match problem {
            ReadProblem::TooLarge => self.too_large(),
            ReadProblem::Broken(message) => self.unreachable(message),
        }
    }

    /// `SendStreamingMessage`: every item folded and shown to
    /// `on_update`, until the Task settles or the stream ends.
    async fn stream(
        &self,
        endpoint: &Endpoint,
        params: Value,
        fold: &mut Fold,
        on_update: &(dyn Fn(&StreamResponse) + Send + Sync),
    ) -> Result<(), A2aError> {
        let request = self.request(jsonrpc::SEND_STREAMING_MESSAGE, params);
        let response = self.post(endpoint, &request, "text/event-stream").await?;
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        if !is_stream {
            // A refusal before the stream starts comes as one JSON body.
            let body = read_capped(response, self.config.max_answer_bytes)
                .await
                .map_err(|problem| self.read_error(problem))?;
            let item: StreamResponse = serde_json::from_value(self.result_of(&body)?)
                .map_err(|error| self.protocol(format!("a stream item does not read: {error}")))?;
            on_update(&item);
            fold.item(item);
            return Ok(());
        }
        let mut chunks = response.bytes_stream();
        let mut decoder = SseDecoder::default();
        let mut n_bytes: u64 = 0;
        while let Some(chunk) = chunks.next().await {
            let chunk =
                chunk.map_err(|error| self.unreachable(format!("reading the stream: {error}")))?;
            n_bytes += chunk.len() as u64;
            if n_bytes > self.config.max_answer_bytes {
                return Err(self.too_large());
            }
            for event in decoder.feed(&chunk) {
                let item: StreamResponse = serde_json::from_value(
                    self.result_of(event.data.as_bytes())?,
                )
                .map_err(|error| self.protocol(format!("a stream item does not read: {error}")))?;
                on_update(&item);
                fold.item(item);
                if fold.settled() {
                    return Ok(());
                }
            }
        }
        if let Some(event) = decoder.finish() {
            let item: StreamResponse = serde_json::from_value(
                self.result_of(event.data.as_bytes())?,
            )
            .map_err(|error| self.protocol(format!("a stream item does not read: {error}")))?;
            on_update(&item);
            fold.item(item);
        }
        Ok(())
    }
}

/// `<url>/.well-known/agent-card.json`.
fn card_url(base: &Url) -> Url {
    let mut url = base.clone();
    let path = format!(
        "{}{}",
        base.path().trim_end_matches('/'),
        crate::AGENT_CARD_PATH
    );
    url.set_path(&path);
    url.set_query(None);
    url
}

fn client_builder(url: &Url) -> reqwest::ClientBuilder {
    let builder =
        reqwest::Client::builder().user_agent(concat!("goondan-a2a/", env!("CARGO_PKG_VERSION")));
    if url.scheme() == "http" {
        // A plain-HTTP agent never shows a certificate: the trust store
        // is not loaded for it.
        builder.tls_certs_only(std::iter::empty())
    } else {
        builder
    }
}

/// An error with its causes, which say what actually failed (refused,
/// DNS, TLS).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The start of a body that did not read, for the error.
fn preview(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned()
}

enum ReadProblem {
    TooLarge,
    Broken(String),
}

/// The whole body, refused once it passes `limit` (the connection is
/// dropped there, so a huge body costs at most `limit`).
async fn read_capped(response: reqwest::Response, limit: u64) -> Result<Vec<u8>, ReadProblem> {
    if response
        .content_length()
        .is_some_and(|length| length > limit)
    {
        return Err(ReadProblem::TooLarge);
    }
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|error| ReadProblem::Broken(format!("reading: {error}")))?;
        if (body.len() + chunk.len()) as u64 > limit {
            return Err(ReadProblem::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What the answer has said so far.
#[derive(Debug, Default)]
struct Fold {
    task_id: Option<String>,
    context_id: Option<String>,
    state: Option<TaskState>,
    status_text: String,
    /// Each artifact's text, in the order they first came.
    artifacts: Vec<(String, String)>,
    message: Option<String>,
}

impl Fold {
    fn ids(&mut self, task_id: &str, context_id: &str) {
        if !task_id.is_empty() {
            self.task_id = Some(task_id.to_string());
        }
        if !context_id.is_empty() {
            self.context_id = Some(context_id.to_string());
        }
    }

    fn item(&mut self, item: StreamResponse) {
        match item {
            StreamResponse::Task(task) => self.task(task),
            StreamResponse::Message(message) => self.message(message),
            StreamResponse::StatusUpdate(update) => {
                self.ids(&update.task_id, &update.context_id);
                self.state = Some(update.status.state);
                if let Some(message) = &update.status.message {
                    self.status_text = message.text();
                }
            }
            StreamResponse::ArtifactUpdate(update) => {
                self.ids(&update.task_id, &update.context_id);
                let text = texts(&update.artifact.parts);
                let id = update.artifact.artifact_id;
                match self.artifacts.iter_mut().find(|(known, _)| *known == id) {
                    Some((_, existing)) if update.append => existing.push_str(&text),
                    Some((_, existing)) => *existing = text,
                    None => self.artifacts.push((id, text)),
                }
            }
        }
    }

    fn task(&mut self, task: Task) {
        self.ids(&task.id, &task.context_id);
        self.state = Some(task.status.state);
        if let Some(message) = &task.status.message {
            self.status_text = message.text();
        }
        if !task.artifacts.is_empty() {
            self.artifacts = task
                .artifacts
                .iter()
                .map(|artifact| (artifact.artifact_id.clone(), texts(&artifact.parts)))
                .collect();
        }
    }

    fn message(&mut self, message: Message) {
        if let Some(task_id) = &message.task_id {
            self.task_id = Some(task_id.clone());
        }
        if let Some(context_id) = &message.context_id {
            self.context_id = Some(context_id.clone());
        }
        self.message = Some(message.text());
    }

    /// Whether nothing more is to come: a direct message, a final state,
    /// or a Task waiting for its client.
    fn settled(&self) -> bool {
        self.message.is_some()
            || self.state.is_some_and(|state| {
                state.is_terminal()
                    || matches!(state, TaskState::InputRequired | TaskState::AuthRequired)
            })
    }

    fn text(&self) -> String {
        let artifacts: Vec<&str> = self
            .artifacts
            .iter()
            .map(|(_, text)| text.as_str())
            .filter(|text| !text.is_empty())
            .collect();
        if !artifacts.is_empty() {
            return artifacts.join("\n");
        }
        if !self.status_text.is_empty() {
            return self.status_text.clone();
        }
        self.message.clone().unwrap_or_default()
    }

    fn finish(self, agent: &str) -> Result<Answer, A2aError> {
        let state = match (&self.message, self.state) {
            (Some(_), _) => TaskState::Completed,
            (None, Some(state)) => state,
            (None, None) => TaskState::Unspecified,
        };
        if state != TaskState::Completed {
            return Err(A2aError::Task {
                agent: agent.to_string(),
                state,
                task_id: self.task_id.clone().unwrap_or_default(),
                context_id: self.context_id.clone().unwrap_or_default(),
                message: self.text(),
            });
        }
        Ok(Answer {
            text: self.text(),
            task_id: self.task_id,
            context_id: self.context_id,
            state,
        })
    }
}
