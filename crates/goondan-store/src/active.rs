//! `runtime/active.json`: which orchestrator serves the state root, so
//! `gdn instance`, `gdn restart` and a second `gdn run` outside the project
//! folder can find its control socket; and `workspaces/<id>/swarm.json`
//! ([`WorkspaceIdentity`]), what names a workspace for a person after its
//! orchestrator stopped.

use crate::durability::{create_dir_all, write_file_atomically, SyncPolicy};
use crate::StoreError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The record of the running orchestrator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveSwarm {
    /// The orchestrator's pid.
    pub pid: u32,
    /// The bundle it runs.
    pub bundle_dir: PathBuf,
    /// The Swarm's name.
    pub swarm: String,
    /// The Swarm's instance key.
    pub instance_key: String,
    /// When it started (ISO 8601).
    pub started_at: String,
    /// Where its control socket listens.
    pub control_socket: PathBuf,
}

impl ActiveSwarm {
    /// Reads the record at `path`; `None` when there is none or it is not
    /// a record (it is advisory: a damaged one is as good as none).
    pub fn read(path: &Path) -> Option<ActiveSwarm> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the record atomically to `path`.
    pub fn write(&self, path: &Path) -> Result<(), StoreError> {
        if let Some(dir) = path.parent() {
            create_dir_all(dir)?;
        }
        let bytes =
            serde_json::to_vec_pretty(self).map_err(|e| StoreError::encode("active.json", e))?;
        write_file_atomically(path, &bytes, SyncPolicy::ProcessCrash)
    }

    /// Removes the record at `path` if it still names the process `pid`
    /// (another orchestrator may have replaced it since).
    pub fn remove_if_owned_by(path: &Path, pid: u32) {
        if ActiveSwarm::read(path).is_some_and(|record| record.pid == pid) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// What names a workspace for a person (the Studio's swarm list): its
/// Package, its Swarm and its bundle folder. The workspace id is a slug
/// and a hash of the bundle; this record, written at each start and kept
/// after the orchestrator stopped, says whose it is. Advisory, like
/// [`ActiveSwarm`]: a missing or damaged one names nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceIdentity {
    /// The bundle's Package name, when it has a Package.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// The Swarm's name.
    pub swarm: String,
    /// The bundle folder.
    pub bundle_dir: PathBuf,
}

impl WorkspaceIdentity {
    /// Reads the record at `path`; `None` when there is none or it is not
    /// one.
    pub fn read(path: &Path) -> Option<WorkspaceIdentity> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the record atomically to `path`.
    pub fn write(&self, path: &Path) -> Result<(), StoreError> {
        if let Some(dir) = path.parent() {
            create_dir_all(dir)?;
        }
        let bytes =
            serde_json::to_vec_pretty(self).map_err(|e| StoreError::encode("swarm.json", e))?;
        write_file_atomically(path, &bytes, SyncPolicy::ProcessCrash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w/swarm.json");
        assert_eq!(WorkspaceIdentity::read(&path), None);
        let identity = WorkspaceIdentity {
            package: Some("@acme/bot".into()),
            swarm: "default".into(),
            bundle_dir: "/b".into(),
        };
        identity.write(&path).unwrap();
        assert_eq!(WorkspaceIdentity::read(&path), Some(identity));
    }

    #[test]
    fn a_record_round_trips_and_is_removed_only_by_its_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runtime").join("active.json");
        let record = ActiveSwarm {
            pid: 42,
            bundle_dir: "/b".into(),
            swarm: "default".into(),
            instance_key: "main".into(),
            started_at: "2026-01-01T00:00:00.000Z".into(),
            control_socket: "/s.sock".into(),
        };
        record.write(&path).unwrap();
        assert_eq!(ActiveSwarm::read(&path), Some(record));
        ActiveSwarm::remove_if_owned_by(&path, 7);
        assert!(path.exists());
        ActiveSwarm::remove_if_owned_by(&path, 42);
        assert!(!path.exists());
        std::fs::write(&path, b"{broken").unwrap();
        assert_eq!(ActiveSwarm::read(&path), None);
    }
}
