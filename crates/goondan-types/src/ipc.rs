//! Messages between the orchestrator and its children
//! (`shared-types.md` §6): exactly three types, addressed by routing key.

use crate::json::JsonValue;
use serde::{Deserialize, Serialize};

/// The three IPC message types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IpcMessageType {
    /// Carries an [`AgentEvent`](crate::AgentEvent) or a process notice.
    Event,
    /// Asks the receiver to drain and exit.
    Shutdown,
    /// Confirms a drained shutdown.
    ShutdownAck,
}

/// One self-contained IPC message. Never carries file descriptors or
/// host-local paths, so any transport can deliver it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpcMessage {
    /// What the message is.
    #[serde(rename = "type")]
    pub message_type: IpcMessageType,
    /// Sender routing key (`agentName:instanceKey`, or `orchestrator`).
    pub from: String,
    /// Receiver routing key.
    pub to: String,
    /// The body.
    pub payload: JsonValue,
}

/// The life states of an agent process handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessStatus {
    /// Started, not yet ready.
    Spawning,
    /// Ready, nothing to do.
    Idle,
    /// Running a Turn.
    Processing,
    /// Finishing its current Turn before exiting.
    Draining,
    /// Exited cleanly.
    Terminated,
    /// Exited with a failure.
    Crashed,
    /// Crashed too often; waiting before the next respawn.
    CrashLoopBackOff,
}

/// Why a process is asked to shut down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShutdownReason {
    /// An explicit restart.
    Restart,
    /// Its configuration changed.
    ConfigChange,
    /// The orchestrator is stopping.
    OrchestratorShutdown,
    /// The instance is passivated: idle too long, or its process slot is
    /// needed (`policy.processes`). Its state stays on disk and the next
    /// event starts a new process (a Goondan-rs extension).
    Passivate,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ipc_shapes() {
        for value in [
            json!({"type": "event", "from": "orchestrator", "to": "alpha:main", "payload": {"x": 1}}),
            json!({"type": "shutdown", "from": "orchestrator", "to": "alpha:main", "payload": {"reason": "config_change"}}),
            json!({"type": "shutdown_ack", "from": "alpha:main", "to": "orchestrator", "payload": null}),
        ] {
            let parsed: IpcMessage = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
        }
        assert!(serde_json::from_value::<IpcMessage>(
            json!({"type": "ready", "from": "a", "to": "b", "payload": null})
        )
        .is_err());
        assert_eq!(
            serde_json::to_value(ProcessStatus::CrashLoopBackOff).unwrap(),
            json!("crashLoopBackOff")
        );
        assert_eq!(
            serde_json::to_value(ShutdownReason::OrchestratorShutdown).unwrap(),
            json!("orchestrator_shutdown")
        );
    }
}
