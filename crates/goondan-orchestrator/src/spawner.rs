//! The process-spawning seam: how an AgentProcess starts and dies.
//!
//! [`Spawner`] is separate from message delivery on purpose: a local
//! fork/exec ([`LocalSpawner`]) hands back stdio pipes wrapped as an
//! [`IpcChannel`], and a remote spawner (a pod, another host) can hand back
//! a channel over a message bus without the orchestrator noticing.

use crate::OrchestratorError;
use futures_util::future::BoxFuture;
use goondan_ipc::{IpcChannel, RoutingKey};
use std::path::PathBuf;
use std::process::Stdio;
use tokio::sync::oneshot;

/// What to start.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    /// The instance to serve.
    pub key: RoutingKey,
}

/// Stops a spawned process.
pub trait ProcessControl: Send {
    /// The OS process id, when there is one.
    fn id(&self) -> Option<u32>;
    /// Forces the process to stop now (SIGKILL for local processes).
    fn kill(&mut self);
}

/// A started process: its channel, its control and its exit.
pub struct SpawnedProcess {
    /// Messages to and from the process.
    pub channel: IpcChannel,
    /// Kill switch.
    pub control: Box<dyn ProcessControl>,
    /// Resolves with the exit code (`None` when ended by a signal).
    pub exit: BoxFuture<'static, Option<i32>>,
}

/// Starts AgentProcesses.
pub trait Spawner: Send + Sync {
    /// Starts the process serving `request.key`.
    fn spawn(&self, request: &SpawnRequest) -> Result<SpawnedProcess, OrchestratorError>;
}

/// Starts children by fork/exec of a program (normally this same `gdn`
/// binary in its hidden `agent` mode) with IPC on stdin/stdout.
#[derive(Clone)]
pub struct LocalSpawner {
    /// The program to run.
    pub program: PathBuf,
    /// Arguments before the per-instance ones.
    pub args: Vec<String>,
    /// Extra environment for the child.
    pub env: Vec<(String, String)>,
    /// Where each child's stderr (its structured log) goes, appended; `None`
    /// inherits the orchestrator's stderr.
    pub log_file: Option<LogFileFor>,
}

/// Names the log file of the process serving a routing key.
pub type LogFileFor = std::sync::Arc<dyn Fn(&RoutingKey) -> PathBuf + Send + Sync>;

impl std::fmt::Debug for LocalSpawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSpawner")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("logs_to_file", &self.log_file.is_some())
            .finish_non_exhaustive()
    }
}

impl Spawner for LocalSpawner {
    fn spawn(&self, request: &SpawnRequest) -> Result<SpawnedProcess, OrchestratorError> {
        let key_text = request.key.to_string();
        let spawn_error = |source| OrchestratorError::Spawn {
            key: key_text.clone(),
            source,
        };
        let stderr = match &self.log_file {
            Some(log_file_for) => {
                let path = log_file_for(&request.key);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(spawn_error)?;
                }
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(spawn_error)?;
                Stdio::from(file)
            }
            None => Stdio::inherit(),
        };
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .arg("--agent-name")
            .arg(&request.key.agent_name)
            .arg("--instance-key")
            .arg(&request.key.instance_key)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(spawn_error)?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(stdin), Some(stdout)) => (stdin, stdout),
            _ => {
                return Err(spawn_error(std::io::Error::other(
                    "the child's stdio pipes were not created",
                )))
            }
        };
        let pid = child.id();
        let channel = IpcChannel::from_io(stdout, stdin, key_text);
        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        let exit = Box::pin(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                _ = kill_rx => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            status.ok().and_then(|status| status.code())
        });
        Ok(SpawnedProcess {
            channel,
            control: Box::new(LocalControl {
                pid,
                kill: Some(kill_tx),
            }),
            exit,
        })
    }
}

struct LocalControl {
    pid: Option<u32>,
    kill: Option<oneshot::Sender<()>>,
}

impl ProcessControl for LocalControl {
    fn id(&self) -> Option<u32> {
        self.pid
    }

    fn kill(&mut self) {
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
    }
}
