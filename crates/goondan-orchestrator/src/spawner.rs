//! The process-spawning seam: how a child process starts, stops and ends.
//!
//! A [`Spawner`] only starts processes and reports on them; it carries no
//! messages. It hands back an [`Endpoint`] that the orchestrator gives to
//! its [`Transport`](goondan_ipc::Transport): a local fork/exec
//! ([`LocalSpawner`]) returns the child's stdio pipes.
//!
//! Secrets never travel through a child's exec environment or its
//! arguments: [`LocalSpawner`] removes every secret variable from the
//! child's environment and writes their values as the spawn handshake
//! ([`SpawnHandshake`]), the first line on the child's stdin, before the
//! transport sends any message.

use crate::OrchestratorError;
use futures_util::future::BoxFuture;
use goondan_ipc::{Endpoint, RoutingKey, SpawnHandshake};
use goondan_types::Secrets;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnRequest {
    /// The AgentProcess serving one instance.
    Agent {
        /// The instance.
        key: RoutingKey,
        /// Its working folder relative to the bundle root (the `cwd`
        /// `agents__spawn` gave); the bundle root when `None`. Relative,
        /// so it means the same on any host that has the bundle.
        workdir: Option<String>,
    },
    /// The ConnectorProcess of one Connection.
    Connector {
        /// The Connection's name.
        connection: String,
    },
}

impl SpawnRequest {
    /// The name logs and errors use for the process.
    pub fn label(&self) -> String {
        match self {
            SpawnRequest::Agent { key, .. } => key.to_string(),
            SpawnRequest::Connector { connection } => format!("connection/{connection}"),
        }
    }
}

/// Stops a spawned process.
pub trait ProcessControl: Send {
    /// The OS process id, when there is one.
    fn id(&self) -> Option<u32>;
    /// Forces the process to stop now (SIGKILL for local processes).
    fn kill(&mut self);
}

/// A started process: how to reach it, how to stop it, and its end.
pub struct SpawnedProcess {
    /// How the transport reaches it.
    pub endpoint: Endpoint,
    /// Kill switch.
    pub control: Box<dyn ProcessControl>,
    /// Resolves with the exit code (`None` when ended by a signal).
    pub exit: BoxFuture<'static, Option<i32>>,
}

/// Starts child processes.
pub trait Spawner: Send + Sync {
    /// Starts the process `request` names.
    fn spawn(&self, request: &SpawnRequest) -> Result<SpawnedProcess, OrchestratorError>;
}

/// Starts children by fork/exec of a program (normally this same `gdn`
/// binary in its hidden `agent` mode) with IPC on stdin/stdout. Every
/// child it starts, an AgentProcess or a ConnectorProcess, first reads
/// the spawn handshake from its stdin.
#[derive(Clone)]
pub struct LocalSpawner {
    /// The program to run.
    pub program: PathBuf,
    /// Arguments before the per-instance ones of an AgentProcess
    /// (`--agent-name A --instance-key K` follow).
    pub args: Vec<String>,
    /// Arguments of a ConnectorProcess (`--connection NAME` follows);
    /// `None` when this build runs no connectors.
    pub connector_args: Option<Vec<String>>,
    /// Extra environment for the child.
    pub env: Vec<(String, String)>,
    /// The secret variables each child needs, asked per request: written
    /// in its spawn handshake, removed from its exec environment. A child
    /// is handed only what its own resources read, so one agent's
    /// process never holds another agent's key.
    pub secrets: SecretsFor,
    /// More variables removed from every child's exec environment: every
    /// secret name of the whole bundle, whether or not it has a value
    /// here, so no child inherits a secret that was not handed to it.
    pub withheld_env: Vec<String>,
    /// Where each child's stderr (its structured log) goes, appended; `None`
    /// inherits the orchestrator's stderr.
    pub log_file: Option<LogFileFor>,
    /// The children's working directory (the bundle root, so a relative
    /// path in a bundle, such as an MCP server's command, means the same
    /// wherever `gdn run` was started); `None` inherits the orchestrator's.
    pub current_dir: Option<PathBuf>,
}

/// Names the log file of a process.
pub type LogFileFor = std::sync::Arc<dyn Fn(&SpawnRequest) -> PathBuf + Send + Sync>;

/// The secrets one process is handed in its spawn handshake.
pub type SecretsFor = std::sync::Arc<dyn Fn(&SpawnRequest) -> Secrets + Send + Sync>;

impl std::fmt::Debug for LocalSpawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSpawner")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("logs_to_file", &self.log_file.is_some())
            .field("withheld_env", &self.withheld_env)
            .finish_non_exhaustive()
    }
}

impl Spawner for LocalSpawner {
    fn spawn(&self, request: &SpawnRequest) -> Result<SpawnedProcess, OrchestratorError> {
        let key_text = request.label();
        let spawn_error = |source| OrchestratorError::Spawn {
            key: key_text.clone(),
            source,
        };
        let mut command = tokio::process::Command::new(&self.program);
        if let Some(dir) = &self.current_dir {
            command.current_dir(dir);
        }
        match request {
            SpawnRequest::Agent { key, workdir } => {
                command
                    .args(&self.args)
                    .arg("--agent-name")
                    .arg(&key.agent_name)
                    .arg("--instance-key")
                    .arg(&key.instance_key);
                if let Some(workdir) = workdir {
                    command.arg("--workdir").arg(workdir);
                }
            }
            SpawnRequest::Connector { connection } => {
                let Some(connector_args) = &self.connector_args else {
                    return Err(spawn_error(std::io::Error::new(
                        std::io::ErrorKind::Unsupported,
                        "this orchestrator was started without a connector mode",
                    )));
                };
                command
                    .args(connector_args)
                    .arg("--connection")
                    .arg(connection);
            }
        }
        let stderr = match &self.log_file {
            Some(log_file_for) => {
                let path = log_file_for(request);
                // Runtime logs live under the System Root and are made
                // owner-only like everything else there (the modes of
                // `goondan_store::owner_only`, which this crate does not
                // depend on).
                if let Some(dir) = path.parent() {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)
                        .map_err(spawn_error)?;
                }
                let file = std::fs::OpenOptions::new()
                    .mode(0o600)
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(spawn_error)?;
                Stdio::from(file)
            }
            None => Stdio::inherit(),
        };
        let secrets = (self.secrets)(request);
        let handshake = SpawnHandshake::new(secrets.clone())
            .encode()
            .map_err(|error| spawn_error(std::io::Error::other(error.to_string())))?;
        command.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        for name in secrets
            .names()
            .chain(self.withheld_env.iter().map(String::as_str))
        {
            command.env_remove(name);
        }
        let mut child = command
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
        write_handshake(&stdin, &handshake).map_err(spawn_error)?;
        let pid = child.id();
        let endpoint = Endpoint::Stdio {
            from_process: Box::new(stdout),
            to_process: Box::new(stdin),
        };
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
            endpoint,
            control: Box::new(LocalControl {
                pid,
                kill: Some(kill_tx),
            }),
            exit,
        })
    }
}

/// Writes the handshake frame into the child's fresh stdin pipe through a
/// duplicate of its descriptor, before the transport owns the pipe. The
/// frame is bounded below a pipe's usual capacity, so the write normally
/// completes at once; a pipe shrunk by the system is waited on briefly
/// (the child reads the frame first thing).
fn write_handshake(stdin: &tokio::process::ChildStdin, frame: &[u8]) -> Result<(), std::io::Error> {
    use std::os::fd::AsFd;
    const PATIENCE: Duration = Duration::from_secs(5);
    let mut pipe = std::fs::File::from(stdin.as_fd().try_clone_to_owned()?);
    let started = Instant::now();
    let mut rest = frame;
    while !rest.is_empty() {
        match pipe.write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            // The child is already gone; its exit tells the orchestrator
            // so, as for any child that dies at start.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(error)
                if error.kind() == std::io::ErrorKind::WouldBlock
                    && started.elapsed() < PATIENCE =>
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
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
