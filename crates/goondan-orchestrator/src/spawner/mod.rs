//! The process-spawning seam: how a child process starts, stops and ends.
//!
//! A [`Spawner`] only starts processes and reports on them; it carries no
//! messages. It hands back an [`Endpoint`] that the orchestrator gives to
//! its [`Transport`](goondan_ipc::Transport): a local fork/exec
//! ([`LocalSpawner`]) returns the child's end of a socket pair that is
//! both its stdin and its stdout.
//!
//! What a child costs the orchestrator is one descriptor: that socket.
//! Two pipes would be two, and `tokio::process` would add a pidfd; the
//! hard limit on open descriptors (20,000 on the reference machine) is
//! what bounds how many agents one orchestrator serves, so children are
//! reaped by [`reaper`] on `SIGCHLD` instead.
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
use reaper::Reaper;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;

mod reaper;

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
/// binary in its hidden `agent` mode) with IPC on stdin/stdout, which are
/// one socket. Every
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
        let mut command = std::process::Command::new(&self.program);
        // A group of its own: the Ctrl-C typed at a foreground `gdn run`
        // reaches the whole foreground group, and is the orchestrator's to
        // handle (it cancels the Turn); a child it reached would die
        // mid-Turn and be restarted as crashed.
        command.process_group(0);
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
        let reaper = Reaper::get().map_err(spawn_error)?;
        // Both ends close on exec; the child's becomes its fd 0 and 1.
        let (ours, theirs) = UnixStream::pair().map_err(spawn_error)?;
        let theirs_again = theirs.try_clone().map_err(spawn_error)?;
        let child = command
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs_again)))
            .stderr(stderr)
            .spawn()
            .map_err(spawn_error)?;
        // The child's copies live in `command` until it is dropped: drop
        // it now, so the child's exit is an end of stream here.
        drop(command);
        let pid = child.id();
        let exited = reaper.watch(child);
        let endpoint = connect(ours, &handshake).map_err(|error| {
            reaper.kill(pid);
            spawn_error(error)
        })?;
        // A child whose exit is no longer awaited is killed, as
        // `kill_on_drop` does for a tokio child.
        let kill_on_drop = KillOnDrop { pid, reaper };
        let exit = Box::pin(async move {
            let kill_on_drop = kill_on_drop;
            let code = exited.await.ok().flatten();
            kill_on_drop.disarm();
            code
        });
        Ok(SpawnedProcess {
            endpoint,
            control: Box::new(LocalControl { pid, reaper }),
            exit,
        })
    }
}

/// Writes the handshake frame on our end of the child's socket, before
/// the transport owns it, and makes that end the endpoint. The frame is
/// bounded far below a socket's buffer, so the write completes at once.
fn connect(ours: UnixStream, handshake: &[u8]) -> Result<Endpoint, std::io::Error> {
    match (&ours).write_all(handshake) {
        // The child is already gone; its exit tells the orchestrator so,
        // as for any child that dies at start.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {}
        result => result?,
    }
    ours.set_nonblocking(true)?;
    let (from_process, to_process) = tokio::net::UnixStream::from_std(ours)?.into_split();
    Ok(Endpoint::Stdio {
        from_process: Box::new(from_process),
        to_process: Box::new(to_process),
    })
}

struct KillOnDrop {
    pid: u32,
    reaper: &'static Reaper,
}

impl KillOnDrop {
    /// The child ended: nothing to kill.
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.reaper.kill(self.pid);
    }
}

struct LocalControl {
    pid: u32,
    reaper: &'static Reaper,
}

impl ProcessControl for LocalControl {
    fn id(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn kill(&mut self) {
        self.reaper.kill(self.pid);
    }
}
