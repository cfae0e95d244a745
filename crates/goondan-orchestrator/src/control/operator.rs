//! Who may act as an operator through the control socket (issue 47 #1).
//!
//! A bash command, a script tool or a delegated agent runs as the same
//! user as the orchestrator, so the socket's file mode does not keep them
//! out. Every request that decides, cancels, forks, rewinds, edits, restarts,
//! stops, deletes or sends an input as a person is therefore refused with
//! `E_CONTROL_FORBIDDEN` when its peer (`SO_PEERCRED`) comes from inside
//! the swarm ([`goondan_sandbox::peer::origin`]: a descendant of the
//! orchestrator, a process an agent started, or one in a sandbox's
//! namespaces). Reading what runs (status, instances, connections) stays
//! open.
//!
//! An admitted request from the CLI is recorded with who the kernel says
//! sent it, `cli:uid-<uid>:pid-<pid>:<exe>`, never with the label the
//! client wrote.

use super::{ControlRequest, ControlResponse};
use goondan_sandbox::peer::{self, PeerIdentity, PeerOrigin};
use tokio::net::unix::UCred;

/// The code of a refusal to a peer from inside the swarm.
pub(crate) const CONTROL_FORBIDDEN: &str = "E_CONTROL_FORBIDDEN";

/// `request` as it is to be served for `peer`, or the refusal it gets.
/// A peer whose credentials could not be read is refused for what only
/// an operator may ask.
pub(super) fn admit(
    mut request: ControlRequest,
    peer: Option<&UCred>,
) -> Result<ControlRequest, Box<ControlResponse>> {
    if !acts_as_operator(&request) {
        return Ok(request);
    }
    let Some(peer) = peer else {
        return Err(forbidden(None, "its credentials could not be read"));
    };
    let pid = peer.pid();
    if let PeerOrigin::Inside(reason) = peer::origin(pid) {
        tracing::warn!(
            pid = pid.unwrap_or_default(),
            uid = peer.uid(),
            "refused an operator request from inside the swarm: {reason}"
        );
        return Err(forbidden(pid, &reason.to_string()));
    }
    let identity = PeerIdentity::new(peer.uid(), pid);
    if let Some(by) = recorded_by(&mut request) {
        *by = attested(by, &identity);
    }
    Ok(request)
}

/// True for what only a person may do.
fn acts_as_operator(request: &ControlRequest) -> bool {
    match request {
        ControlRequest::Status | ControlRequest::List | ControlRequest::Connections => false,
        ControlRequest::Request { .. }
        | ControlRequest::Restart { .. }
        | ControlRequest::Delete { .. }
        | ControlRequest::Deliver { .. }
        | ControlRequest::DeliverStreaming { .. }
        | ControlRequest::Decide { .. }
        | ControlRequest::Shutdown
        | ControlRequest::Cancel { .. }
        | ControlRequest::Fork { .. }
        | ControlRequest::Rewind { .. }
        | ControlRequest::Edit { .. } => true,
    }
}

/// The field that records who asked, where the request has one.
fn recorded_by(request: &mut ControlRequest) -> Option<&mut String> {
    match request {
        ControlRequest::Decide { decision, .. } => Some(&mut decision.by),
        ControlRequest::Cancel { by, .. }
        | ControlRequest::Fork { by, .. }
        | ControlRequest::Rewind { by, .. }
        | ControlRequest::Edit { by, .. } => Some(by),
        _ => None,
    }
}

/// The CLI's label (`cli`, `cli:<anything>`) replaced by what the kernel
/// says of the peer; another channel's (`studio:<client>`) kept, since
/// only a process from outside the swarm got this far.
fn attested(by: &str, identity: &PeerIdentity) -> String {
    if by == "cli" || by.starts_with("cli:") {
        format!("cli:{identity}")
    } else {
        by.to_string()
    }
}

fn forbidden(pid: Option<i32>, reason: &str) -> Box<ControlResponse> {
    let who = pid.map_or_else(|| "the peer".to_string(), |pid| format!("process {pid}"));
    let body = goondan_types::ErrorBody::new(
        CONTROL_FORBIDDEN,
        format!(
            "only a person may decide, cancel, fork, rewind, restart, stop or send input; {who} is refused because {reason}"
        ),
    )
    .with_suggestion(
        "run the command from a shell outside the swarm (not from a tool, a script or an agent); SECURITY.md says what tells them apart",
    );
    Box::new(ControlResponse::Failed(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_cli_label_becomes_what_the_kernel_says_and_others_stay() {
        let identity = PeerIdentity {
            uid: 0,
            pid: Some(41),
            exe: Some(PathBuf::from("/usr/bin/gdn")),
        };
        assert_eq!(attested("cli", &identity), "cli:uid-0:pid-41:/usr/bin/gdn");
        assert_eq!(
            attested("cli:uid-0", &identity),
            "cli:uid-0:pid-41:/usr/bin/gdn"
        );
        assert_eq!(
            attested("studio:127.0.0.1:5", &identity),
            "studio:127.0.0.1:5"
        );
    }

    #[test]
    fn reads_are_open_and_everything_else_is_an_operator_request() {
        assert!(!acts_as_operator(&ControlRequest::Status));
        assert!(!acts_as_operator(&ControlRequest::List));
        assert!(acts_as_operator(&ControlRequest::Shutdown));
        assert!(acts_as_operator(&ControlRequest::Cancel {
            key: "a:b".into(),
            by: "cli".into()
        }));
        assert!(acts_as_operator(&ControlRequest::Edit {
            key: "a:b".into(),
            change: super::super::EditChange::ExtensionState {
                extension: "memory".into(),
                state: serde_json::json!({}),
            },
            by: "cli".into(),
            cancel: false,
        }));
        // No credentials: refused.
        let refusal = admit(ControlRequest::Shutdown, None).unwrap_err();
        assert!(
            matches!(&*refusal, ControlResponse::Failed(body) if body.code == CONTROL_FORBIDDEN),
            "{refusal:?}"
        );
        assert_eq!(
            admit(ControlRequest::List, None).ok(),
            Some(ControlRequest::List)
        );
    }
}
