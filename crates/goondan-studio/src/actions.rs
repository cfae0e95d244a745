//! What the Studio may do, with `gdn studio --allow-actions`: send a
//! message to an instance, and approve or deny a pending approval. Both
//! go through the running orchestrator's control socket, the way `gdn
//! run --input` and `gdn approve` do, so the Studio itself writes no file:
//! the orchestrator and the instance record what happened, with who did
//! it (a decision's `by` is `studio:<client address>`; a sent message
//! carries the properties `sentBy: studio` and `client`).
//!
//! What it does not own: who may act (the gate in `server.rs` checks the
//! token, the CSRF token and the `Origin` before any of this runs), and
//! cancel, fork or rewind (not Studio actions yet).

use crate::data::{self, ReadError};
use goondan_orchestrator::control::{self, ControlRequest, ControlResponse};
use goondan_orchestrator::ingress::CLI_EVENT;
use goondan_store::{ActiveSwarm, InstancePaths, InstanceStore, StateRoot, WorkspacePaths};
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

/// An action that could not be done, as its HTTP answer will say.
#[derive(Debug)]
pub(crate) enum ActionError {
    /// The body is not the JSON the action takes (400).
    BadRequest(String),
    /// The body is over [`MAX_ACTION_BODY_BYTES`] (413).
    TooLarge,
    /// Every action permit is taken (503).
    Busy,
    /// No such swarm, instance or waiting approval (404).
    NotFound(&'static str, String),
    /// No orchestrator serves the swarm (503).
    NotRunning(String),
    /// The orchestrator refused or failed it (409, its own code).
    Refused(ErrorBody),
    /// The state could not be read, or the socket answered nonsense (500).
    Internal(String),
}

impl From<ReadError> for ActionError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::NotFound(message) => ActionError::NotFound("E_STUDIO_NOT_FOUND", message),
            ReadError::Store(error) => ActionError::Internal(error.to_string()),
        }
    }
}

impl From<goondan_store::StoreError> for ActionError {
    fn from(error: goondan_store::StoreError) -> Self {
        ActionError::Internal(error.to_string())
    }
}

/// A decision asked for by the page: `{"swarm", "id", "verdict", "reason"}`.
pub(crate) fn parse_decision(
    body: &[u8],
) -> Result<(String, String, Verdict, Option<String>), ActionError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| ActionError::BadRequest(format!("the body is not JSON: {error}")))?;
    let text = |name: &str| {
        value[name]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ActionError::BadRequest(format!("`{name}` must be a string")))
    };
    let verdict = match text("verdict")?.as_str() {
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
    Ok((text("swarm")?, text("id")?, verdict, reason))
}

/// A message asked for by the page: `{"swarm", "instance", "text"}`.
pub(crate) fn parse_message(body: &[u8]) -> Result<(String, String, String), ActionError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| ActionError::BadRequest(format!("the body is not JSON: {error}")))?;
    let text = |name: &str| {
        value[name]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ActionError::BadRequest(format!("`{name}` must be a string")))
    };
    let message = text("text")?;
    if message.trim().is_empty() {
        return Err(ActionError::BadRequest("`text` is empty".into()));
    }
    Ok((text("swarm")?, text("instance")?, message))
}

/// The socket of the orchestrator serving `workspace`: the one its
/// active record names, else where it would listen.
fn control_socket(workspace: &WorkspacePaths) -> PathBuf {
    ActiveSwarm::read(&workspace.active_file())
        .map(|record| record.control_socket)
        .unwrap_or_else(|| workspace.control_socket())
}

/// Where one decision goes: the instance's routing key and the socket.
pub(crate) struct DecisionTarget {
    key: String,
    socket: PathBuf,
}

/// Finds the waiting approval `id` in swarm `swarm` (blocking reads).
pub(crate) fn find_approval(
    root: &StateRoot,
    swarm: &str,
    id: &str,
) -> Result<DecisionTarget, ActionError> {
    let workspace = data::workspace(root, swarm)?;
    for (_, dir) in data::instance_dirs(&workspace) {
        let waiting = goondan_store::undecided_approvals(&InstancePaths::from_dir(&dir))?;
        if let Some(request) = waiting.into_iter().find(|request| request.id == id) {
            return Ok(DecisionTarget {
                key: format!("{}:{}", request.agent, request.instance_key),
                socket: control_socket(&workspace),
            });
        }
    }
    Err(ActionError::NotFound(
        "E_APPROVAL_NOT_FOUND",
        format!("no approval {id} waits for a decision in swarm `{swarm}`"),
    ))
}

/// Hands the decision to the orchestrator and waits until the instance
/// recorded it.
pub(crate) async fn decide(
    target: DecisionTarget,
    id: String,
    verdict: Verdict,
    reason: Option<String>,
    client: SocketAddr,
) -> Result<Value, ActionError> {
    let decision = ApprovalDecision {
        id: id.clone(),
        verdict,
        arguments: None,
        reason,
        by: format!("studio:{client}"),
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
        })),
        ControlResponse::Failed(body) => Err(ActionError::Refused(body)),
        other => Err(ActionError::Internal(format!(
            "the orchestrator answered a decision with {other:?}"
        ))),
    }
}

/// Where one message goes: the agent, its instance key and the socket.
pub(crate) struct MessageTarget {
    agent: String,
    instance_key: String,
    socket: PathBuf,
}

/// Finds the instance named by its folder `instance` in `swarm`
/// (blocking reads).
pub(crate) fn find_instance(
    root: &StateRoot,
    swarm: &str,
    instance: &str,
) -> Result<MessageTarget, ActionError> {
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
    Ok(MessageTarget {
        agent: summary.agent_name,
        instance_key: summary.instance_key,
        socket: control_socket(&workspace),
    })
}

/// Sends `text` to the instance, as `gdn run --input` would, and waits
/// (at most [`ANSWER_WAIT`]) for its answer.
pub(crate) async fn send(
    target: MessageTarget,
    text: String,
    client: SocketAddr,
) -> Result<Value, ActionError> {
    let mut event = ConnectorEvent::text(CLI_EVENT, text);
    event.instance_key = Some(target.instance_key.clone());
    // The input's metadata says it came from the Studio, and from whom.
    event.properties.insert("sentBy".into(), "studio".into());
    event.properties.insert("client".into(), client.to_string());
    let request = ControlRequest::Request {
        agent: Some(target.agent.clone()),
        event,
        // A closed tab must not cancel what was asked.
        cancel_on_disconnect: false,
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

async fn call(
    socket: &std::path::Path,
    request: &ControlRequest,
) -> Result<ControlResponse, ActionError> {
    control::call(socket, request).await.map_err(|error| {
        ActionError::NotRunning(format!(
            "no orchestrator answers for this swarm ({error}); start it with `gdn run`"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decision_body_is_checked_field_by_field() {
        let ok =
            parse_decision(br#"{"swarm":"s","id":"a","verdict":"deny","reason":"no"}"#).unwrap();
        assert_eq!(ok.2, Verdict::Deny);
        assert_eq!(ok.3.as_deref(), Some("no"));
        for bad in [
            &b"not json"[..],
            br#"{"swarm":"s","id":"a","verdict":"maybe"}"#,
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
}
