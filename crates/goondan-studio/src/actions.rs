//! What the Studio may do, with `gdn studio --allow-actions`: send a
//! message to an instance, approve or deny a pending approval, cancel an
//! instance's running Turn, fork an instance from one of its Turns, and
//! rewind it to one. All go through the running orchestrator's control
//! socket, the ops `gdn approve` and `gdn instance cancel|fork|rewind`
//! use, so the Studio itself writes no file: the orchestrator and the
//! instance record what happened, with who did it, `studio:<client
//! address>` (a decision's `by`, a cancelled Turn's `cancelledBy`, a
//! fork's `forkedFrom.by`, a rewind's manifest); a sent message comes
//! from the source `studio` and carries the properties `sentBy: studio`
//! and `client`.
//!
//! What it does not own: who may act (the gate in `server.rs` checks the
//! token, the CSRF token and the `Origin` before any of this runs), and
//! how a history is cut (the orchestrator's, through `goondan-store`).

use crate::data::{self, ReadError};
use goondan_orchestrator::control::{self, ControlRequest, ControlResponse, EditChange};
use goondan_orchestrator::ingress::CLI_EVENT;
use goondan_orchestrator::orchestrator::CancelledTurn;
use goondan_store::{
    ActiveSwarm, ForkReport, InstancePaths, InstanceStore, RewindReport, StateRoot, WorkspacePaths,
};
use goondan_types::{ApprovalDecision, ConnectorEvent, ErrorBody, Verdict};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The largest action body accepted, in bytes (a message's text and its
/// envelope); a larger one is refused before it is read whole.
pub(crate) const MAX_ACTION_BODY_BYTES: usize = 64 * 1024;
/// The longest reason a denial may give, in characters.
const MAX_REASON_CHARS: usize = 2000;
/// How long a sent message's answer is waited for; after it the answer
/// still comes (the Turn goes on) and shows up in the live view.
const ANSWER_WAIT: Duration = Duration::from_secs(300);
/// The source a message sent from the Studio is recorded as coming from
/// (the event's `source.name`, as a Connection's name is for its events).
pub(crate) const STUDIO_SOURCE: &str = "studio";
/// The longest Turn reference (a position or a Turn id) an action takes.
const MAX_TURN_CHARS: usize = 100;
/// The longest instance key a fork may be given.
const MAX_KEY_CHARS: usize = 128;

/// An action that could not be done, as its HTTP answer will say.
#[derive(Debug)]
pub(crate) enum ActionError {
    /// The body is not the JSON the action takes (400).
    BadRequest(String),
    /// The arguments an approval gives do not match the gated tool's
    /// parameters (400 `E_APPROVAL_ARGS`, with each problem).
    Arguments {
        message: String,
        problems: Vec<String>,
    },
    /// The body is over [`MAX_ACTION_BODY_BYTES`] (413).
    TooLarge,
    /// Every action permit is taken (503).
    Busy,
    /// No such swarm, instance or waiting approval (404).
    NotFound(&'static str, String),
    /// No orchestrator serves the swarm (503).
    NotRunning(String),
    /// The orchestrator refused or failed it, or a re-run's stored run
    /// or its `gdn eval` did (409, its own code).
    Refused(ErrorBody),
    /// A re-run of an eval case outlived its bound and was stopped (504).
    TimedOut(String),
    /// The state could not be read, or the socket answered nonsense (500).
    Internal(String),
}

impl From<ReadError> for ActionError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::NotFound(message) | ReadError::NoBundle(message) => {
                ActionError::NotFound("E_STUDIO_NOT_FOUND", message)
            }
            ReadError::Store(error) => ActionError::Internal(error.to_string()),
        }
    }
}

impl From<goondan_store::StoreError> for ActionError {
    fn from(error: goondan_store::StoreError) -> Self {
        ActionError::Internal(error.to_string())
    }
}

/// An action's body as a JSON object.
fn body_json(body: &[u8]) -> Result<Value, ActionError> {
    serde_json::from_slice(body)
        .map_err(|error| ActionError::BadRequest(format!("the body is not JSON: {error}")))
}

/// The string field `name` of an action's body.
fn text_field(value: &Value, name: &str) -> Result<String, ActionError> {
    value[name]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| ActionError::BadRequest(format!("`{name}` must be a string")))
}

/// A decision asked for by the page: `{"swarm", "id", "verdict", "reason"}`,
/// and for an approval `"arguments"` (an object: the call runs with these
/// instead of the ones the model gave).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DecisionAsk {
    pub(crate) swarm: String,
    pub(crate) id: String,
    pub(crate) verdict: Verdict,
    reason: Option<String>,
    arguments: Option<goondan_types::JsonObject>,
}

/// Reads a decision's body.
pub(crate) fn parse_decision(body: &[u8]) -> Result<DecisionAsk, ActionError> {
    let value = body_json(body)?;
    let verdict = match text_field(&value, "verdict")?.as_str() {
        "approve" => Verdict::Approve,
        "deny" => Verdict::Deny,
        other => {
            return Err(ActionError::BadRequest(format!(
                "`verdict` is `approve` or `deny`, not `{other}`"
            )))
        }
    };
    let reason = match &value["reason"] {
        Value::Null => None,
        Value::String(reason) if reason.trim().is_empty() => None,
        Value::String(reason) if reason.chars().count() <= MAX_REASON_CHARS => Some(reason.clone()),
        Value::String(_) => {
            return Err(ActionError::BadRequest(format!(
                "`reason` holds at most {MAX_REASON_CHARS} characters"
            )))
        }
        _ => return Err(ActionError::BadRequest("`reason` must be a string".into())),
    };
    let arguments = match (&value["arguments"], verdict) {
        (Value::Null, _) => None,
        (Value::Object(arguments), Verdict::Approve) => Some(arguments.clone()),
        (Value::Object(_), _) => {
            return Err(ActionError::BadRequest(
                "only an approval takes `arguments`".into(),
            ))
        }
        _ => {
            return Err(ActionError::BadRequest(
                "`arguments` must be an object".into(),
            ))
        }
    };
    Ok(DecisionAsk {
        swarm: text_field(&value, "swarm")?,
        id: text_field(&value, "id")?,
        verdict,
        reason,
        arguments,
    })
}

/// A message asked for by the page: `{"swarm", "instance", "text"}`.
pub(crate) fn parse_message(body: &[u8]) -> Result<(String, String, String), ActionError> {
    let value = body_json(body)?;
    let message = text_field(&value, "text")?;
    if message.trim().is_empty() {
        return Err(ActionError::BadRequest("`text` is empty".into()));
    }
    Ok((
        text_field(&value, "swarm")?,
        text_field(&value, "instance")?,
        message,
    ))
}

/// What a person does to an instance's Turns from the Studio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Steer {
    /// Cancel the Turn it runs.
    Cancel,
    /// Fork it from one of its Turns.
    Fork,
    /// Rewind it to one of its Turns.
    Rewind,
}

/// A [`Steer`] asked for by the page: `{"swarm", "instance"}`, and for a
/// fork or a rewind `"turn"` (a position or a Turn id) and `"cancel"`
/// (cancel a running Turn first), and for a fork `"newKey"` (made up
/// when absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SteerAsk {
    pub(crate) swarm: String,
    pub(crate) instance: String,
    turn: String,
    new_key: Option<String>,
    cancel: bool,
}

/// Reads a [`Steer`]'s body.
pub(crate) fn parse_steer(steer: Steer, body: &[u8]) -> Result<SteerAsk, ActionError> {
    let value = body_json(body)?;
    let turn = match steer {
        Steer::Cancel => String::new(),
        Steer::Fork | Steer::Rewind => {
            let turn = text_field(&value, "turn")?.trim().to_string();
            if turn.is_empty() || turn.chars().count() > MAX_TURN_CHARS {
                return Err(ActionError::BadRequest(format!(
                    "`turn` is a Turn's position or id, of 1 to {MAX_TURN_CHARS} characters"
                )));
            }
            turn
        }
    };
    let new_key = match (steer, &value["newKey"]) {
        (_, Value::Null) => None,
        (Steer::Fork, Value::String(key)) if key.trim().is_empty() => None,
        (Steer::Fork, Value::String(key))
            if key.chars().count() <= MAX_KEY_CHARS && !key.chars().any(char::is_control) =>
        {
            Some(key.clone())
        }
        (Steer::Fork, _) => {
            return Err(ActionError::BadRequest(format!(
                "`newKey` is an instance key of at most {MAX_KEY_CHARS} characters, without control characters"
            )))
        }
        _ => return Err(ActionError::BadRequest("only a fork takes `newKey`".into())),
    };
    let cancel = cancel_field(&value)?;
    Ok(SteerAsk {
        swarm: text_field(&value, "swarm")?,
        instance: text_field(&value, "instance")?,
        turn,
        new_key,
        cancel,
    })
}

/// An edit asked for by the page: `{"swarm", "instance", "cancel"}` and
/// either `"messageId"` with `"text"` (the message's new text) or
/// `"extension"` with `"state"` (its new state, any JSON value but
/// `null`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct EditAsk {
    pub(crate) swarm: String,
    pub(crate) instance: String,
    change: EditChange,
    cancel: bool,
}

/// Reads an edit's body.
pub(crate) fn parse_edit(body: &[u8]) -> Result<EditAsk, ActionError> {
    let value = body_json(body)?;
    let change = match (&value["messageId"], &value["extension"]) {
        (Value::String(message_id), Value::Null) => {
            let text = text_field(&value, "text")?;
            if text.trim().is_empty() {
                return Err(ActionError::BadRequest("`text` is empty".into()));
            }
            if message_id.is_empty() || message_id.chars().count() > MAX_KEY_CHARS {
                return Err(ActionError::BadRequest(format!(
                    "`messageId` is a message's id, of 1 to {MAX_KEY_CHARS} characters"
                )));
            }
            EditChange::Message {
                message_id: message_id.clone(),
                text,
            }
        }
        (Value::Null, Value::String(extension)) => {
            if extension.is_empty() || extension.chars().count() > MAX_KEY_CHARS {
                return Err(ActionError::BadRequest(format!(
                    "`extension` is an extension's name, of 1 to {MAX_KEY_CHARS} characters"
                )));
            }
            let state = value["state"].clone();
            if state.is_null() {
                return Err(ActionError::BadRequest(
                    "`state` is the extension's new state, any JSON value but null".into(),
                ));
            }
            EditChange::ExtensionState {
                extension: extension.clone(),
                state,
            }
        }
        _ => {
            return Err(ActionError::BadRequest(
                "an edit names a `messageId` (with `text`) or an `extension` (with `state`), one of the two"
                    .into(),
            ))
        }
    };
    Ok(EditAsk {
        swarm: text_field(&value, "swarm")?,
        instance: text_field(&value, "instance")?,
        change,
        cancel: cancel_field(&value)?,
    })
}

/// The optional `"cancel"` of a body: cancel a running Turn first.
fn cancel_field(value: &Value) -> Result<bool, ActionError> {
    match &value["cancel"] {
        Value::Null => Ok(false),
        Value::Bool(cancel) => Ok(*cancel),
        _ => Err(ActionError::BadRequest(
            "`cancel` must be true or false".into(),
        )),
    }
}

/// Edits one message or extension state of the instance through the
/// orchestrator (which holds it while it is written), in the client's
/// name; the edit, as JSON, without the record's path.
pub(crate) async fn edit(
    target: InstanceTarget,
    asked: EditAsk,
    client: SocketAddr,
) -> Result<Value, ActionError> {
    let request = ControlRequest::Edit {
        key: target.key(),
        change: asked.change,
        by: by(client),
        cancel: asked.cancel,
    };
    match call(&target.socket, &request).await? {
        ControlResponse::Edited { report, cancelled } => Ok(json!({
            "edited": report.record,
            "cancelled": cancelled_json(&cancelled),
        })),
        ControlResponse::Failed(body) => Err(ActionError::Refused(body)),
        other => Err(ActionError::Internal(format!(
            "the orchestrator answered an edit with {other:?}"
        ))),
    }
}

/// Who the log names for an action of the Studio's page: the Studio and
/// the client's address.
fn by(client: SocketAddr) -> String {
    format!("{STUDIO_SOURCE}:{client}")
}

/// The socket of the orchestrator serving `workspace`: the one its
/// active record names, else where it would listen.
pub(crate) fn control_socket(workspace: &WorkspacePaths) -> PathBuf {
    ActiveSwarm::read(&workspace.active_file())
        .map(|record| record.control_socket)
        .unwrap_or_else(|| workspace.control_socket())
}

/// Where one decision goes: the instance's routing key and the socket.
pub(crate) struct DecisionTarget {
    key: String,
    socket: PathBuf,
}

/// Finds the waiting approval the page decides in its swarm (blocking
/// reads), and checks the arguments it gives against the gated tool's
/// parameters as the swarm's bundle declares them (the check `gdn approve
/// --args` makes): arguments that do not match are refused with
/// `E_APPROVAL_ARGS` and each problem, before anything is sent.
pub(crate) fn find_approval(
    root: &StateRoot,
    ask: &DecisionAsk,
) -> Result<DecisionTarget, ActionError> {
    let (swarm, id) = (ask.swarm.as_str(), ask.id.as_str());
    let workspace = data::workspace(root, swarm)?;
    for (_, dir) in data::instance_dirs(&workspace) {
        let waiting = goondan_store::undecided_approvals(&InstancePaths::from_dir(&dir))?;
        if let Some(request) = waiting.into_iter().find(|request| request.id == id) {
            if let Some(arguments) = &ask.arguments {
                argument_refusal(&workspace, &request, arguments)?;
            }
            return Ok(DecisionTarget {
                key: format!("{}:{}", request.agent, request.instance_key),
                socket: control_socket(&workspace),
            });
        }
    }
    let found = goondan_store::workspace_approvals(&workspace)?;
    if found.cancelled.iter().any(|cancelled| cancelled == id) {
        return Err(ActionError::Refused(goondan_store::closed_by_cancel(id)));
    }
    Err(ActionError::NotFound(
        "E_APPROVAL_NOT_FOUND",
        format!("no approval {id} waits for a decision in swarm `{swarm}`"),
    ))
}

/// Refuses `arguments` for `request` when the gated tool's parameters,
/// as the bundle the swarm last started from declares them, do not take
/// them.
fn argument_refusal(
    workspace: &WorkspacePaths,
    request: &goondan_types::ApprovalRequest,
    arguments: &goondan_types::JsonObject,
) -> Result<(), ActionError> {
    let Some(tool) = request.tool.as_deref() else {
        return Err(ActionError::BadRequest(
            "a question takes no `arguments`; only a gated tool call does".into(),
        ));
    };
    let Some(identity) = goondan_store::WorkspaceIdentity::read(&workspace.identity_file()) else {
        return Ok(());
    };
    match goondan_runtime::tool::gated_argument_problems(
        &identity.bundle_dir,
        &request.agent,
        tool,
        arguments,
    ) {
        None => Ok(()),
        Some(problems) => Err(ActionError::Arguments {
            message: format!(
                "the arguments do not match the parameters of {tool}: {}",
                problems.join("; ")
            ),
            problems,
        }),
    }
}

/// How long an orchestrator has to answer a `status` before the Studio
/// calls it not running.
const STATUS_WAIT: Duration = Duration::from_secs(1);

/// Whether an orchestrator answers on `socket` now (a `status` request,
/// the read-only one): an active record left by a killed orchestrator, or
/// a stale socket file, is not a running swarm.
pub(crate) async fn orchestrator_answers(socket: PathBuf) -> bool {
    matches!(
        tokio::time::timeout(STATUS_WAIT, control::call(&socket, &ControlRequest::Status)).await,
        Ok(Ok(ControlResponse::Status { .. }))
    )
}

/// Hands the decision to the orchestrator and waits until the instance
/// recorded it.
pub(crate) async fn decide(
    target: DecisionTarget,
    ask: DecisionAsk,
    client: SocketAddr,
) -> Result<Value, ActionError> {
    let DecisionAsk {
        id,
        verdict,
        reason,
        arguments,
        ..
    } = ask;
    let edited = arguments.is_some();
    let decision = ApprovalDecision {
        id: id.clone(),
        verdict,
        arguments: arguments.map(Value::Object),
        reason,
        by: by(client),
        decided_at: goondan_types::now_iso(),
    };
    let request = ControlRequest::Decide {
        key: target.key.clone(),
        decision,
    };
    match call(&target.socket, &request).await? {
        ControlResponse::Decided => Ok(json!({
            "id": id,
            "instance": target.key,
            "verdict": verdict.as_str(),
            "editedArguments": edited,
        })),
        ControlResponse::Failed(body) => Err(ActionError::Refused(body)),
        other => Err(ActionError::Internal(format!(
            "the orchestrator answered a decision with {other:?}"
        ))),
    }
}

/// The instance an action is for: its agent, its instance key and the
/// socket of the orchestrator serving it.
pub(crate) struct InstanceTarget {
    agent: String,
    instance_key: String,
    socket: PathBuf,
}

impl InstanceTarget {
    /// `agent:instanceKey`, as the control socket names it.
    fn key(&self) -> String {
        format!("{}:{}", self.agent, self.instance_key)
    }
}

/// Finds the instance named by its folder `instance` in `swarm`
/// (blocking reads).
pub(crate) fn find_instance(
    root: &StateRoot,
    swarm: &str,
    instance: &str,
) -> Result<InstanceTarget, ActionError> {
    let workspace = data::workspace(root, swarm)?;
    let dir = data::instance_dir(&workspace, instance)?;
    let summary = InstanceStore::new(workspace.clone())
        .list()?
        .into_iter()
        .find(|summary| summary.dir == dir)
        .ok_or_else(|| {
            ActionError::NotFound(
                "E_STUDIO_NOT_FOUND",
                format!("instance `{instance}` has no metadata to address it by"),
            )
        })?;
    Ok(InstanceTarget {
        agent: summary.agent_name,
        instance_key: summary.instance_key,
        socket: control_socket(&workspace),
    })
}

/// Sends `text` to exactly the instance, as typed input (the event
/// `gdn run --input` sends) from the source `studio`, and waits (at most
/// [`ANSWER_WAIT`]) for its answer. A closed tab does not cancel what
/// was asked.
pub(crate) async fn send(
    target: InstanceTarget,
    text: String,
    client: SocketAddr,
) -> Result<Value, ActionError> {
    let mut event = ConnectorEvent::text(CLI_EVENT, text);
    // The input's metadata says who sent it, from where.
    event
        .properties
        .insert("sentBy".into(), STUDIO_SOURCE.into());
    event.properties.insert("client".into(), client.to_string());
    let request = ControlRequest::Deliver {
        key: target.key(),
        event,
        source: STUDIO_SOURCE.to_string(),
    };
    let Ok(answer) = tokio::time::timeout(ANSWER_WAIT, call(&target.socket, &request)).await else {
        return Ok(json!({"pending": true}));
    };
    match answer? {
        ControlResponse::Answer { response } => Ok(json!({
            "answer": serde_json::to_value(&response).unwrap_or(Value::Null),
        })),
        ControlResponse::Failed(body) => Err(ActionError::Refused(body)),
        other => Err(ActionError::Internal(format!(
            "the orchestrator answered a message with {other:?}"
        ))),
    }
}

/// Cancels the instance's running Turn, forks it or rewinds it, through
/// the orchestrator, in the client's name; what was done, as JSON.
pub(crate) async fn steer(
    steer: Steer,
    target: InstanceTarget,
    asked: SteerAsk,
    client: SocketAddr,
) -> Result<Value, ActionError> {
    let key = target.key();
    let request = match steer {
        Steer::Cancel => ControlRequest::Cancel {
            key: key.clone(),
            by: by(client),
        },
        Steer::Fork => ControlRequest::Fork {
            key: key.clone(),
            at: asked.turn,
            new_key: asked.new_key,
            by: by(client),
            cancel: asked.cancel,
        },
        Steer::Rewind => ControlRequest::Rewind {
            key: key.clone(),
            to: asked.turn,
            by: by(client),
            cancel: asked.cancel,
        },
    };
    match call(&target.socket, &request).await? {
        ControlResponse::Cancelled(outcome) => Ok(json!({
            "instance": key,
            "cancelled": cancelled_json(&outcome.cancelled),
            "ended": outcome.ended,
        })),
        ControlResponse::Forked { report, cancelled } => Ok(json!({
            "forked": fork_json(&report),
            "cancelled": cancelled_json(&cancelled),
        })),
        ControlResponse::Rewound { report, cancelled } => Ok(json!({
            "rewound": rewind_json(&report),
            "cancelled": cancelled_json(&cancelled),
        })),
        ControlResponse::Failed(body) => Err(ActionError::Refused(body)),
        other => Err(ActionError::Internal(format!(
            "the orchestrator answered {steer:?} with {other:?}"
        ))),
    }
}

fn cancelled_json(cancelled: &[CancelledTurn]) -> Value {
    serde_json::to_value(cancelled).unwrap_or(Value::Null)
}

/// What a fork made, for the page: the new instance by its folder name
/// (the id the page links to), never the folder's path on this machine.
fn fork_json(report: &ForkReport) -> Value {
    json!({
        "agentName": report.agent_name,
        "instanceKey": report.instance_key,
        "instance": report.dir.file_name().map(|name| name.to_string_lossy().into_owned()),
        "forkedFrom": report.forked_from,
        "at": report.at,
        "nMessages": report.n_messages,
        "extensionState": report.extension_state,
    })
}

/// What a rewind did, for the page: its archive by id, without its path.
fn rewind_json(report: &RewindReport) -> Value {
    json!({
        "agentName": report.agent_name,
        "instanceKey": report.instance_key,
        "to": report.to,
        "archive": report.archive.as_ref().map(|archive| json!({
            "id": archive.id,
            "nTurns": archive.n_turns,
            "nMessages": archive.n_messages,
            "nPendingEvents": archive.n_pending_events,
        })),
        "extensionState": report.extension_state,
    })
}

async fn call(
    socket: &std::path::Path,
    request: &ControlRequest,
) -> Result<ControlResponse, ActionError> {
    control::call(socket, request).await.map_err(|error| {
        ActionError::NotRunning(format!(
            "no orchestrator answers for this swarm ({error}); start one that stays with `gdn run --detach` in the bundle's folder"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edit_body_names_a_message_with_its_text_or_an_extension_with_its_state() {
        let message =
            parse_edit(br#"{"swarm":"s","instance":"i","messageId":"msg_1","text":"new"}"#)
                .unwrap();
        assert_eq!(
            message.change,
            EditChange::Message {
                message_id: "msg_1".into(),
                text: "new".into()
            }
        );
        assert!(!message.cancel);
        let state = parse_edit(
            br#"{"swarm":"s","instance":"i","extension":"memory","state":{"a":1},"cancel":true}"#,
        )
        .unwrap();
        assert_eq!(
            state.change,
            EditChange::ExtensionState {
                extension: "memory".into(),
                state: json!({"a": 1})
            }
        );
        assert!(state.cancel);
        for bad in [
            &b"not json"[..],
            br#"{"swarm":"s","instance":"i"}"#,
            br#"{"swarm":"s","instance":"i","messageId":"m"}"#,
            br#"{"swarm":"s","instance":"i","messageId":"m","text":"  "}"#,
            br#"{"swarm":"s","instance":"i","messageId":"","text":"x"}"#,
            br#"{"swarm":"s","instance":"i","messageId":"m","text":"x","extension":"e","state":{}}"#,
            br#"{"swarm":"s","instance":"i","extension":"e"}"#,
            br#"{"swarm":"s","instance":"i","extension":"e","state":null}"#,
            br#"{"swarm":"s","instance":"i","extension":7,"state":{}}"#,
            br#"{"swarm":"s","instance":"i","extension":"e","state":{},"cancel":"yes"}"#,
            br#"{"instance":"i","messageId":"m","text":"x"}"#,
        ] {
            assert!(
                matches!(parse_edit(bad), Err(ActionError::BadRequest(_))),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn a_decision_body_is_checked_field_by_field() {
        let ok =
            parse_decision(br#"{"swarm":"s","id":"a","verdict":"deny","reason":"no"}"#).unwrap();
        assert_eq!(ok.verdict, Verdict::Deny);
        assert_eq!(ok.reason.as_deref(), Some("no"));
        assert_eq!(ok.arguments, None);
        let edited = parse_decision(
            br#"{"swarm":"s","id":"a","verdict":"approve","arguments":{"command":"ls"}}"#,
        )
        .unwrap();
        assert_eq!(
            edited.arguments.map(Value::Object),
            Some(json!({"command": "ls"}))
        );
        for bad in [
            &b"not json"[..],
            br#"{"swarm":"s","id":"a","verdict":"maybe"}"#,
            br#"{"swarm":"s","id":"a","verdict":"approve","arguments":"ls"}"#,
            br#"{"swarm":"s","id":"a","verdict":"deny","arguments":{}}"#,
            br#"{"swarm":"s","verdict":"approve"}"#,
            br#"{"swarm":"s","id":"a","verdict":"deny","reason":7}"#,
        ] {
            assert!(matches!(
                parse_decision(bad),
                Err(ActionError::BadRequest(_))
            ));
        }
        let long = format!(
            r#"{{"swarm":"s","id":"a","verdict":"deny","reason":"{}"}}"#,
            "x".repeat(MAX_REASON_CHARS + 1)
        );
        assert!(parse_decision(long.as_bytes()).is_err());
        assert!(parse_message(br#"{"swarm":"s","instance":"i","text":"  "}"#).is_err());
        assert!(parse_message(br#"{"swarm":"s","instance":"i","text":"hi"}"#).is_ok());
    }

    #[test]
    fn a_cancel_fork_or_rewind_body_is_checked_field_by_field() {
        let ask = |swarm: &str, turn: &str, new_key: Option<&str>, cancel: bool| SteerAsk {
            swarm: swarm.into(),
            instance: "alpha:default".into(),
            turn: turn.into(),
            new_key: new_key.map(str::to_string),
            cancel,
        };
        let accepted: [(Steer, &[u8], SteerAsk); 5] = [
            (
                Steer::Cancel,
                br#"{"swarm":"s","instance":"alpha:default"}"#,
                ask("s", "", None, false),
            ),
            (
                Steer::Fork,
                br#"{"swarm":"s","instance":"alpha:default","turn":" 2 ","newKey":"try-2"}"#,
                ask("s", "2", Some("try-2"), false),
            ),
            (
                Steer::Fork,
                br#"{"swarm":"s","instance":"alpha:default","turn":"turn_1","newKey":"  ","cancel":true}"#,
                ask("s", "turn_1", None, true),
            ),
            (
                Steer::Rewind,
                br#"{"swarm":"s","instance":"alpha:default","turn":"1","cancel":false}"#,
                ask("s", "1", None, false),
            ),
            (
                Steer::Rewind,
                br#"{"swarm":"s","instance":"alpha:default","turn":"1","newKey":null}"#,
                ask("s", "1", None, false),
            ),
        ];
        for (steer, body, expected) in accepted {
            assert_eq!(parse_steer(steer, body).unwrap(), expected, "{steer:?}");
        }
        let long_turn = format!(
            r#"{{"swarm":"s","instance":"i","turn":"{}"}}"#,
            "1".repeat(MAX_TURN_CHARS + 1)
        );
        let long_key = format!(
            r#"{{"swarm":"s","instance":"i","turn":"1","newKey":"{}"}}"#,
            "k".repeat(MAX_KEY_CHARS + 1)
        );
        let refused: [(Steer, &[u8]); 9] = [
            (Steer::Cancel, b"not json"),
            (Steer::Cancel, br#"{"swarm":"s"}"#),
            (Steer::Fork, br#"{"swarm":"s","instance":"i"}"#),
            (Steer::Fork, br#"{"swarm":"s","instance":"i","turn":" "}"#),
            (
                Steer::Fork,
                br#"{"swarm":"s","instance":"i","turn":"1","newKey":"a\nb"}"#,
            ),
            (
                Steer::Fork,
                br#"{"swarm":"s","instance":"i","turn":"1","cancel":"yes"}"#,
            ),
            (
                Steer::Rewind,
                br#"{"swarm":"s","instance":"i","turn":"1","newKey":"k"}"#,
            ),
            (Steer::Rewind, long_turn.as_bytes()),
            (Steer::Fork, long_key.as_bytes()),
        ];
        for (steer, body) in refused {
            assert!(
                matches!(parse_steer(steer, body), Err(ActionError::BadRequest(_))),
                "{steer:?} {}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
