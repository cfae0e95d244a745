//! Every agent of the Swarm as an A2A agent (protocol version
//! [`goondan_a2a::PROTOCOL_VERSION`], JSON-RPC binding).
//!
//! * `GET /a2a/<agent>/.well-known/agent-card.json`: its Agent Card
//!   (the entry agent's also at `/.well-known/agent-card.json`): its
//!   JSON-RPC endpoint, streaming offered, the bearer scheme when the
//!   server requires a token, a skill for the agent and one per tool.
//! * `POST /a2a/<agent>`: one JSON-RPC request per body. `SendMessage`
//!   (answers when the Task ends or needs a person, or at once with
//!   `returnImmediately`), `SendStreamingMessage` (an event stream: the
//!   Task, then its status and artifact updates until it ends),
//!   `GetTask`, `CancelTask` (the Turn is cancelled, what it stored is
//!   kept), `SubscribeToTask`. The methods of A2A 0.3 (`message/send`,
//!   `message/stream`, `tasks/get`, `tasks/cancel`, `tasks/resubscribe`)
//!   are served too, in 0.3's form ([`v0_3`]); an `A2A-Version` header
//!   other than 1.x or 0.3 is refused with `VersionNotSupported`.
//!
//! A message's context id is the instance key of the conversation (a new
//! instance `a2a-<hex>` when the client sends none), so a client that
//! keeps its context id keeps talking to the same instance. Only text
//! parts are read; a message with another kind of part is refused
//! (`ContentTypeNotSupported`) rather than half-read, and one that is not
//! the user's (`ROLE_AGENT`) is refused as invalid params. A Task is
//! reached only at its agent's endpoint and, when the request names a
//! context, from its own context; any other is `TaskNotFound`, as if it
//! did not exist.

mod tasks;
mod v0_3;

pub(crate) use tasks::Tasks;

use crate::instance::{fresh_key, is_valid_key};
use crate::swarm::{AgentInfo, TurnFailure, TurnRequest};
use crate::turn::DetachedTurn;
use crate::Shared;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use goondan_a2a::jsonrpc::{self, Response as RpcResponse};
use goondan_a2a::types::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme, Message,
    Role, SecurityRequirement, SecurityScheme, SendMessageConfiguration, SendMessageRequest,
    SendMessageResponse, StreamResponse, Task, TaskIdRequest, TaskState,
};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tasks::{CancelRefused, Subscription};
use tokio::sync::broadcast::error::RecvError;

/// The longest a `CancelTask` waits for the Turn to be over before it
/// answers with the Task as it is.
const CANCEL_SETTLE: Duration = Duration::from_secs(5);

/// The A2A routes.
pub(crate) fn routes() -> Router<Arc<Shared>> {
    Router::new()
        .route(goondan_a2a::AGENT_CARD_PATH, get(entry_card))
        .route("/a2a/{agent}/.well-known/agent-card.json", get(agent_card))
        .route("/a2a/{agent}", post(rpc))
}

async fn entry_card(State(shared): State<Arc<Shared>>) -> Response {
    match shared.swarm.agents().iter().find(|agent| agent.entry) {
        Some(agent) => card_response(&shared, agent),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn agent_card(State(shared): State<Arc<Shared>>, Path(agent): Path<String>) -> Response {
    match shared.swarm.agent(&agent) {
        Some(agent) => card_response(&shared, agent),
        None => unknown_agent(&agent),
    }
}

/// The card of `agent` as served: the 1.0 card with the fields a 0.3
/// client reads beside it.
fn card_response(shared: &Shared, agent: &AgentInfo) -> Response {
    let card = card(shared, agent);
    let mut value = serde_json::to_value(&card).unwrap_or_default();
    if let (Some(fields), Some(url)) = (value.as_object_mut(), card.jsonrpc_url()) {
        if let Value::Object(earlier) = v0_3::card_fields(url) {
            fields.extend(earlier);
        }
    }
    Json(value).into_response()
}

fn unknown_agent(agent: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(RpcResponse::error(
            Value::Null,
            jsonrpc::INVALID_REQUEST,
            format!("this Swarm has no agent `{agent}`"),
            Some("E_SERVE_UNKNOWN_AGENT"),
        )),
    )
        .into_response()
}

/// The Agent Card of `agent`.
fn card(shared: &Shared, agent: &AgentInfo) -> AgentCard {
    let swarm = shared.swarm.name();
    let description = agent.description.clone().unwrap_or_else(|| {
        let role = if agent.entry {
            "the entry agent"
        } else {
            "an agent"
        };
        format!("{role} `{}` of the Goondan Swarm `{swarm}`", agent.name)
    });
    let mut skills = vec![AgentSkill {
        id: agent.name.clone(),
        name: agent.name.clone(),
        description: description.clone(),
        tags: vec!["goondan".into(), format!("swarm:{swarm}")],
    }];
    skills.extend(agent.tools.iter().map(|tool| AgentSkill {
        id: format!("tool:{}", tool.name),
        name: tool.name.clone(),
        description: tool.description.clone().unwrap_or_default(),
        tags: vec!["tool".into()],
    }));
    let (security_schemes, security_requirements) = if shared.token_required {
        let scheme = SecurityScheme {
            http_auth_security_scheme: Some(HttpAuthSecurityScheme {
                scheme: "Bearer".into(),
                bearer_format: None,
                description: Some("the token `gdn serve --token-env` names".into()),
            }),
            other: Default::default(),
        };
        (
            BTreeMap::from([("bearer".to_string(), scheme)]),
            vec![SecurityRequirement {
                schemes: BTreeMap::from([(
                    "bearer".to_string(),
                    Value::Object(Default::default()),
                )]),
            }],
        )
    } else {
        (BTreeMap::new(), Vec::new())
    };
    AgentCard {
        name: agent.name.clone(),
        description,
        supported_interfaces: [goondan_a2a::PROTOCOL_VERSION, "0.3"]
            .into_iter()
            .map(|version| AgentInterface {
                url: format!("{}/a2a/{}", shared.public_url, agent.name),
                protocol_binding: goondan_a2a::JSONRPC_BINDING.into(),
                protocol_version: Some(version.into()),
            })
            .collect(),
        version: env!("CARGO_PKG_VERSION").into(),
        capabilities: AgentCapabilities {
            streaming: true,
            push_notifications: false,
        },
        security_schemes,
        security_requirements,
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/plain".into()],
        skills,
    }
}

/// A JSON-RPC refusal of request `id`.
fn refusal(
    id: Value,
    code: i64,
    message: impl Into<String>,
    goondan_code: Option<&str>,
) -> Response {
    Json(RpcResponse::error(id, code, message, goondan_code)).into_response()
}

fn result(id: Value, value: Value) -> Response {
    Json(RpcResponse::result(id, value)).into_response()
}

/// Which version of the protocol a request speaks, so its answer is
/// written in the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Current,
    Earlier,
}

impl Dialect {
    /// A `oneof` answer (`SendMessageResponse`, `StreamResponse`).
    fn wrapped(self, value: impl serde::Serialize) -> Value {
        let value = serde_json::to_value(value).unwrap_or_default();
        match self {
            Dialect::Current => value,
            Dialect::Earlier => v0_3::wrapped_to_earlier(value),
        }
    }

    /// A Task.
    fn task(self, task: Task) -> Value {
        let value = serde_json::to_value(task).unwrap_or_default();
        match self {
            Dialect::Current => value,
            Dialect::Earlier => v0_3::task_to_earlier(value),
        }
    }
}

/// A Turn that could not start, as a JSON-RPC error carrying its code.
fn turn_refusal(id: Value, failure: TurnFailure) -> Response {
    let failure = failure.for_port();
    let mut message = format!("error[{}]: {}", failure.code, failure.message);
    if let Some(suggestion) = &failure.suggestion {
        message.push_str("; ");
        message.push_str(suggestion);
    }
    // An instance key the orchestrator refuses is the client's fault (its
    // contextId), not the server's.
    let code = match failure.code.as_str() {
        "E_INSTANCE_KEY_INVALID" => jsonrpc::INVALID_PARAMS,
        _ => jsonrpc::INTERNAL_ERROR,
    };
    refusal(id, code, message, Some(&failure.code))
}

async fn rpc(
    State(shared): State<Arc<Shared>>,
    Path(agent): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(agent) = shared.swarm.agent(&agent).cloned() else {
        return unknown_agent(&agent);
    };
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        return refusal(
            Value::Null,
            jsonrpc::PARSE_ERROR,
            "the body is not JSON",
            None,
        );
    };
    let request = match serde_json::from_value::<jsonrpc::Request>(value) {
        Ok(request) if request.jsonrpc == "2.0" => request,
        _ => {
            return refusal(
                Value::Null,
                jsonrpc::INVALID_REQUEST,
                "not a JSON-RPC 2.0 request (one object with `jsonrpc`, `method`, `id`)",
                None,
            )
        }
    };
    let id = request.id.clone().unwrap_or(Value::Null);
    let version = headers
        .get(goondan_a2a::VERSION_HEADER)
        .and_then(|value| value.to_str().ok());
    let spoken = |version: &str| {
        let version = version.trim();
        version.starts_with('1') || version.starts_with("0.3")
    };
    if let Some(version) = version.filter(|version| !spoken(version)) {
        return refusal(
            id,
            jsonrpc::VERSION_NOT_SUPPORTED,
            format!(
                "A2A version {version} is not spoken here; this server speaks {} and 0.3",
                goondan_a2a::PROTOCOL_VERSION
            ),
            Some("E_SERVE_A2A_VERSION"),
        );
    }
    let (method, dialect, params) = match v0_3::current_method(&request.method) {
        Some(current) => (
            current.to_string(),
            Dialect::Earlier,
            v0_3::params_to_current(request.params),
        ),
        None => (request.method, Dialect::Current, request.params),
    };
    // The context a Task request names (`contextId` beside `id`, which
    // A2A's GetTask does not define and a client may add): a Task of
    // another context is not found from it.
    let context = params
        .get("contextId")
        .and_then(Value::as_str)
        .map(str::to_string);
    let reachable = |task_id: &str| reachable(&shared, task_id, &agent, context.as_deref());
    match method.as_str() {
        jsonrpc::SEND_MESSAGE => send(shared, agent, id, params, false, dialect).await,
        jsonrpc::SEND_STREAMING_MESSAGE => send(shared, agent, id, params, true, dialect).await,
        jsonrpc::GET_TASK => match task_id_request(&params) {
            Ok(asked) => match shared.tasks.get(&asked.id, asked.history_length) {
                Some(task) if reachable(&asked.id) => result(id, dialect.task(task)),
                _ => task_not_found(id, &asked.id),
            },
            Err(message) => refusal(id, jsonrpc::INVALID_PARAMS, message, None),
        },
        jsonrpc::CANCEL_TASK => match task_id_request(&params) {
            Ok(asked) if reachable(&asked.id) => cancel(&shared, id, &asked.id, dialect).await,
            Ok(asked) => task_not_found(id, &asked.id),
            Err(message) => refusal(id, jsonrpc::INVALID_PARAMS, message, None),
        },
        jsonrpc::SUBSCRIBE_TO_TASK => match task_id_request(&params) {
            Ok(asked) if reachable(&asked.id) => match shared.tasks.subscribe(&asked.id) {
                Some(subscription) if subscription.task.status.state.is_terminal() => refusal(
                    id,
                    jsonrpc::UNSUPPORTED_OPERATION,
                    format!("Task {} has ended ({:?}); `GetTask` reads it", asked.id, subscription.task.status.state),
                    None,
                ),
                Some(subscription) => stream(id, shared.tasks.clone(), subscription, dialect),
                None => task_not_found(id, &asked.id),
            },
            Ok(asked) => task_not_found(id, &asked.id),
            Err(message) => refusal(id, jsonrpc::INVALID_PARAMS, message, None),
        },
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => refusal(
            id,
            jsonrpc::PUSH_NOTIFICATION_NOT_SUPPORTED,
            "push notifications are not offered; stream with `SendStreamingMessage` or poll `GetTask`",
            None,
        ),
        method => refusal(
            id,
            jsonrpc::METHOD_NOT_FOUND,
            format!("method `{method}` is not offered"),
            None,
        ),
    }
}

/// Whether Task `task_id` may be reached by a request at `agent`'s
/// endpoint naming `context`: the Task was sent to that agent, and, when
/// the request names a context, in that context. Anything else is
/// answered as a Task that does not exist, so a request learns nothing
/// about other agents' or contexts' Tasks.
fn reachable(shared: &Shared, task_id: &str, agent: &AgentInfo, context: Option<&str>) -> bool {
    match shared.tasks.scope_of(task_id) {
        Some((owner, task_context)) => {
            owner == agent.name && context.is_none_or(|context| context == task_context)
        }
        None => false,
    }
}

fn task_id_request(params: &Value) -> Result<TaskIdRequest, String> {
    serde_json::from_value::<TaskIdRequest>(params.clone())
        .map_err(|error| format!("the parameters are not `{{\"id\": \"<task id>\"}}`: {error}"))
}

fn task_not_found(id: Value, task_id: &str) -> Response {
    refusal(
        id,
        jsonrpc::TASK_NOT_FOUND,
        format!("no Task {task_id} is remembered here (Tasks are forgotten when `gdn serve` restarts, and the oldest ended ones past its limit)"),
        None,
    )
}

async fn cancel(shared: &Shared, id: Value, task_id: &str, dialect: Dialect) -> Response {
    match shared.tasks.cancel(task_id) {
        Ok(mut state) => {
            let _ =
                tokio::time::timeout(CANCEL_SETTLE, state.wait_for(|state| state.is_terminal()))
                    .await;
            match shared.tasks.get(task_id, None) {
                Some(task) => result(id, dialect.task(task)),
                None => task_not_found(id, task_id),
            }
        }
        Err(CancelRefused::NotFound) => task_not_found(id, task_id),
        Err(CancelRefused::Ended(task)) => refusal(
            id,
            jsonrpc::TASK_NOT_CANCELABLE,
            format!("Task {task_id} has ended ({:?})", task.status.state),
            None,
        ),
    }
}

/// `SendMessage` and `SendStreamingMessage`.
async fn send(
    shared: Arc<Shared>,
    agent: AgentInfo,
    id: Value,
    params: Value,
    streams: bool,
    dialect: Dialect,
) -> Response {
    let request = match serde_json::from_value::<SendMessageRequest>(params) {
        Ok(request) => request,
        Err(error) => {
            return refusal(
                id,
                jsonrpc::INVALID_PARAMS,
                format!("the parameters are not a SendMessageRequest: {error}"),
                None,
            )
        }
    };
    let message = request.message;
    // Only the client's own words are input: a message that says it is
    // the agent's (`ROLE_AGENT`, 0.3's `"agent"`) or names no role would
    // put words in the agent's mouth as the user's.
    if message.role != Role::User {
        return refusal(
            id,
            jsonrpc::INVALID_PARAMS,
            format!(
                "the message's role is {}; a message sent to an agent is the user's (`ROLE_USER`, in A2A 0.3 `\"user\"`)",
                serde_json::to_string(&message.role).unwrap_or_default()
            ),
            Some("E_SERVE_A2A_ROLE"),
        );
    }
    if let Some(part) = message.parts.iter().find(|part| part.text.is_none()) {
        let kind = part
            .media_type
            .as_deref()
            .unwrap_or(if part.data.is_some() { "data" } else { "file" });
        return refusal(
            id,
            jsonrpc::CONTENT_TYPE_NOT_SUPPORTED,
            format!("only text parts are read; this message has a `{kind}` part"),
            None,
        );
    }
    let text = message.text();
    if text.trim().is_empty() {
        return refusal(id, jsonrpc::INVALID_PARAMS, "the message has no text", None);
    }
    if let Some(task_id) = &message.task_id {
        // A Goondan Task is one Turn; what follows it is a new Task in the
        // same context. A Task waiting for a person waits for a decision
        // (`gdn approve`), not for a message.
        let context = message.context_id.as_deref();
        let said = match shared.tasks.get(task_id, Some(0)) {
            Some(_) if !reachable(&shared, task_id, &agent, context) => {
                return task_not_found(id, task_id)
            }
            None => return task_not_found(id, task_id),
            Some(task) if task.status.state == TaskState::InputRequired => format!(
                "Task {task_id} waits for a person to decide an approval (`gdn approve` / `gdn deny`), not for a message"
            ),
            Some(task) => format!(
                "Task {task_id} is {:?}; a Task here is one Turn: send the next message with its contextId `{}` and no taskId",
                task.status.state, task.context_id
            ),
        };
        return refusal(id, jsonrpc::UNSUPPORTED_OPERATION, said, None);
    }
    let instance_key = match &message.context_id {
        Some(context) if is_valid_key(context) => context.clone(),
        Some(_) => {
            return refusal(
                id,
                jsonrpc::INVALID_PARAMS,
                "a contextId is 1 to 128 characters without control characters",
                None,
            )
        }
        None => fresh_key("a2a"),
    };
    // A message sent again (a client's retry: same agent, same context
    // as the client named it, same `messageId`) gets the Task the first
    // one became, never a second Turn.
    let message_key = format!(
        "{}\u{0}{}",
        message.context_id.as_deref().unwrap_or_default(),
        message.message_id
    );
    let claim = (!message.message_id.is_empty())
        .then(|| shared.tasks.claim_message(&agent.name, &message_key));
    let slot = match claim {
        Some(tasks::MessageClaim::Again(mut sent)) => {
            let became = sent
                .wait_for(Option::is_some)
                .await
                .map(|sent| sent.clone());
            return match became {
                Ok(Some(Ok(task_id))) => {
                    answer_task(
                        &shared,
                        id,
                        &task_id,
                        request.configuration.as_ref(),
                        streams,
                        dialect,
                    )
                    .await
                }
                Ok(Some(Err(failure))) => turn_refusal(id, failure),
                _ => task_not_found(id, &message.message_id),
            };
        }
        Some(tasks::MessageClaim::First(slot)) => Some(slot),
        None => None,
    };
    let running = shared
        .swarm
        .start(TurnRequest {
            agent: agent.name.clone(),
            instance_key: instance_key.clone(),
            text,
            history: Vec::new(),
            source: "a2a".into(),
        })
        .await;
    let running = match running {
        Ok(running) => running,
        Err(failure) => {
            if let Some(slot) = &slot {
                shared
                    .tasks
                    .message_refused(&agent.name, &message_key, slot, failure.clone());
            }
            return turn_refusal(id, failure);
        }
    };
    let (event_id, updates, canceller) = DetachedTurn::spawn(running).into_parts();
    let user_message = Message {
        context_id: Some(instance_key.clone()),
        task_id: Some(event_id.clone()),
        role: Role::User,
        ..message
    };
    let mut task = Task {
        id: event_id,
        context_id: instance_key,
        history: vec![user_message],
        ..Task::default()
    };
    task.status = tasks::status(TaskState::Submitted, &task, None);
    let subscription = shared
        .tasks
        .insert(task.clone(), agent.name.clone(), canceller);
    if let Some(slot) = &slot {
        slot.send_replace(Some(Ok(task.id.clone())));
    }
    tokio::spawn(tasks::drive(
        shared.tasks.clone(),
        shared.swarm.clone(),
        task,
        agent.name,
        updates,
        shared.limits.approval_poll,
    ));
    respond(
        &shared,
        id,
        subscription,
        request.configuration.as_ref(),
        streams,
        dialect,
    )
    .await
}

/// The answer to a `SendMessage` (or its stream) whose message became the
/// Task `task_id` before.
async fn answer_task(
    shared: &Arc<Shared>,
    id: Value,
    task_id: &str,
    configuration: Option<&SendMessageConfiguration>,
    streams: bool,
    dialect: Dialect,
) -> Response {
    match shared.tasks.subscribe(task_id) {
        Some(subscription) => {
            respond(shared, id, subscription, configuration, streams, dialect).await
        }
        None => task_not_found(id, task_id),
    }
}

/// The Task of `subscription` as the request asks: its stream, or the Task
/// once it ended or needs a person (at once with `returnImmediately`).
async fn respond(
    shared: &Arc<Shared>,
    id: Value,
    subscription: Subscription,
    configuration: Option<&SendMessageConfiguration>,
    streams: bool,
    dialect: Dialect,
) -> Response {
    if streams {
        return stream(id, shared.tasks.clone(), subscription, dialect);
    }
    let return_immediately =
        configuration.is_some_and(|configuration| configuration.return_immediately);
    let task_id = subscription.task.id.clone();
    if !return_immediately {
        let mut state = subscription.state;
        let _ = state
            .wait_for(|state| state.is_terminal() || *state == TaskState::InputRequired)
            .await;
    }
    let history_length = configuration.and_then(|configuration| configuration.history_length);
    match shared.tasks.get(&task_id, history_length) {
        Some(task) => result(id, dialect.wrapped(SendMessageResponse::Task(task))),
        None => task_not_found(id, &task_id),
    }
}

/// The Task and its updates as an event stream of JSON-RPC responses,
/// ending with its final state. A client that goes away ends only the
/// stream.
fn stream(id: Value, tasks: Arc<Tasks>, subscription: Subscription, dialect: Dialect) -> Response {
    let Subscription { task, updates, .. } = subscription;
    let task_id = task.id.clone();
    let first = StreamResponse::Task(task);
    let events =
        futures_util::stream::unfold((Some(first), Some(updates)), move |(first, updates)| {
            let (id, tasks, task_id) = (id.clone(), tasks.clone(), task_id.clone());
            async move {
                let mut updates = updates?;
                let item = match first {
                    Some(first) => first,
                    None => match updates.recv().await {
                        Ok(item) => item,
                        // Behind by more than the backlog: what was
                        // missed is in the Task as it is now.
                        Err(RecvError::Lagged(_)) => {
                            StreamResponse::Task(tasks.get(&task_id, None)?)
                        }
                        Err(RecvError::Closed) => return None,
                    },
                };
                let last = is_final(&item);
                let data = serde_json::to_string(&RpcResponse::result(id, dialect.wrapped(&item)))
                    .unwrap_or_default();
                let event = Ok::<_, std::convert::Infallible>(Event::default().data(data));
                Some((event, (None, (!last).then_some(updates))))
            }
        });
    ([(header::CACHE_CONTROL, "no-cache")], Sse::new(events)).into_response()
}

/// Whether `item` ends a Task's stream: a terminal state, or one that
/// waits for a person (the client may subscribe again).
fn is_final(item: &StreamResponse) -> bool {
    match item {
        StreamResponse::StatusUpdate(update) => {
            update.status.state.is_terminal() || update.status.state == TaskState::InputRequired
        }
        StreamResponse::Task(task) => {
            task.status.state.is_terminal() || task.status.state == TaskState::InputRequired
        }
        StreamResponse::Message(_) => true,
        StreamResponse::ArtifactUpdate(_) => false,
    }
}
