//! One orchestrator per workspace: whoever takes the exclusive lock beside
//! the control socket starts it and holds the lock for its whole life;
//! every other `gdn run` waits (at most [`ATTACH_WAIT`]) for the socket to
//! answer `Status` with this workspace's identity, then attaches. A socket
//! file is only ever replaced by the lock's holder.

use crate::HostError;
use goondan_client::ControlSocket;
use goondan_orchestrator::control::{ControlRequest, ControlResponse};
use goondan_store::paths::MAX_SOCKET_PATH_BYTES;
use goondan_store::WorkspacePaths;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a `gdn run` that lost the start lock waits for the winner's
/// socket to answer.
pub const ATTACH_WAIT: Duration = Duration::from_secs(5);

/// What a workspace's control socket and start lock say.
#[derive(Debug)]
pub enum Claim {
    /// This workspace's orchestrator answers there.
    Running,
    /// No orchestrator runs; this process holds the start lock (until the
    /// file is dropped).
    Won(std::fs::File),
}

/// The control socket of `workspace`, or an error when the System Root
/// lies too deep for a Unix socket address.
pub fn control_socket(workspace: &WorkspacePaths) -> Result<PathBuf, HostError> {
    let socket = workspace.control_socket();
    let length = socket.as_os_str().len();
    if length <= MAX_SOCKET_PATH_BYTES {
        return Ok(socket);
    }
    Err(HostError::StateRootTooDeep {
        socket,
        length,
        limit: MAX_SOCKET_PATH_BYTES,
    })
}

/// Attaches to this workspace's orchestrator, or takes the lock to start
/// one. A process that loses the lock waits for the winner's socket.
pub async fn claim(workspace: &WorkspacePaths, socket: &Path) -> Result<Claim, HostError> {
    let lock_path = workspace.control_lock();
    let deadline = tokio::time::Instant::now() + ATTACH_WAIT;
    loop {
        if let Ok(ControlResponse::Status { identity, .. }) = ControlSocket::new(socket)
            .call(&ControlRequest::Status)
            .await
        {
            if identity.workspace_id.as_deref() == Some(workspace.workspace_id()) {
                return Ok(Claim::Running);
            }
            return Err(HostError::ControlSocketForeign {
                socket: socket.to_path_buf(),
                theirs: identity.workspace_id.unwrap_or_else(|| "(unnamed)".into()),
                bundle: identity
                    .bundle_dir
                    .map_or_else(|| "(unnamed)".into(), |dir| dir.display().to_string()),
                ours: workspace.workspace_id().to_string(),
            });
        }
        if let Some(lock) = try_lock(&lock_path)? {
            return Ok(Claim::Won(lock));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(HostError::OrchestratorStart {
                what: format!(
                    "another `gdn run` holds {} but its control socket did not answer within {} s",
                    lock_path.display(),
                    ATTACH_WAIT.as_secs()
                ),
                logs: workspace.runtime_logs_dir(),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Takes the exclusive start lock, creating its owner-only folder; `None`
/// when another process holds it.
fn try_lock(path: &Path) -> Result<Option<std::fs::File>, HostError> {
    if let Some(dir) = path.parent() {
        goondan_store::owner_only::create_dir_all(dir)
            .map_err(HostError::io(format!("creating {}", dir.display())))?;
    }
    let file = goondan_store::owner_only::open_options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(HostError::io(format!("opening {}", path.display())))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(HostError::io(format!("locking {}", path.display()))(error))
        }
    }
}
