//! `metadata.json` of an instance (`workspace.md` §7.2): the five fields
//! of the original plus what single-writer ownership and crash supervision
//! need, written atomically. Fields this version does not know are kept
//! as they are when the file is rewritten.

use crate::durability::{write_file_atomically, SyncPolicy};
use crate::StoreError;
use goondan_types::JsonObject;
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::path::Path;

/// Whether a Turn is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceStatus {
    /// Waiting for the next event.
    Idle,
    /// A Turn is running.
    Processing,
}

/// The content of `metadata.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceMetadata {
    /// `idle` or `processing`.
    pub status: InstanceStatus,
    /// The agent serving the instance.
    pub agent_name: String,
    /// The instance key exactly as routed, which the folder name may only
    /// encode (or, for very long keys, abbreviate).
    pub instance_key: String,
    /// ISO 8601 creation time.
    pub created_at: String,
    /// ISO 8601 time of the last change to this file.
    pub updated_at: String,
    /// Incremented by every open; a writer that sees a newer epoch than its
    /// own knows it was superseded.
    #[serde(default)]
    pub epoch: u64,
    /// Crashes since the last Turn that completed.
    #[serde(default)]
    pub consecutive_crashes: u32,
    /// ISO 8601 time before which the instance must not be restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until: Option<String>,
    /// Fields written by other versions, kept verbatim.
    #[serde(flatten)]
    pub extra: JsonObject,
}

impl InstanceMetadata {
    /// Fresh metadata for a new instance.
    pub fn new(agent_name: &str, instance_key: &str) -> Self {
        let now = goondan_types::now_iso();
        InstanceMetadata {
            status: InstanceStatus::Idle,
            agent_name: agent_name.to_string(),
            instance_key: instance_key.to_string(),
            created_at: now.clone(),
            updated_at: now,
            epoch: 0,
            consecutive_crashes: 0,
            backoff_until: None,
            extra: JsonObject::new(),
        }
    }

    /// Reads `path`; `None` when it does not exist.
    pub fn read(path: &Path) -> Result<Option<Self>, StoreError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(StoreError::io("reading", path, source)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|error| StoreError::CorruptState {
                path: path.to_path_buf(),
                reason: error.to_string(),
            })
    }

    /// Writes `path` atomically (pretty JSON and a newline, like the
    /// original).
    ///
    /// The replacement is atomic (temporary file and rename) but never
    /// flushed to the disk, whatever the store's [`SyncPolicy`]: the file
    /// is advisory (status, timestamps, counters), nothing in the
    /// conversation depends on it, and it is rewritten twice per Turn, so
    /// an `fsync` here would cost more than the Turn itself. After a power
    /// loss it may show an older status, which the next write corrects.
    pub(crate) fn write(&self, path: &Path) -> Result<(), StoreError> {
        let mut bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| StoreError::encode("instance metadata", e))?;
        bytes.push(b'\n');
        write_file_atomically(path, &bytes, SyncPolicy::ProcessCrash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_original_shape_and_keeps_unknown_fields() {
        let original = json!({
            "status": "processing",
            "agentName": "coder",
            "instanceKey": "user:123",
            "createdAt": "2026-02-01T12:00:00.000Z",
            "updatedAt": "2026-02-01T12:34:56.789Z",
            "studioNote": "x"
        });
        let metadata: InstanceMetadata = serde_json::from_value(original).unwrap();
        assert_eq!(metadata.status, InstanceStatus::Processing);
        assert_eq!(metadata.epoch, 0);
        let back = serde_json::to_value(&metadata).unwrap();
        assert_eq!(back["studioNote"], "x");
        assert_eq!(back["instanceKey"], "user:123");
        assert_eq!(back["consecutiveCrashes"], 0);
        assert!(back.get("backoffUntil").is_none());
    }
}
