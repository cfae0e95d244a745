//! `metadata.json` of an instance (`workspace.md` §7.2): the five fields
//! of the original plus what single-writer ownership and crash supervision
//! need, written atomically. Fields this version does not know are kept
//! as they are when the file is rewritten.
//!
//! The file is advisory: nothing in the conversation depends on it. So a
//! damaged one (garbage, cut short, empty) does not keep an instance from
//! starting: the opener, under the instance lock, moves it aside to
//! `metadata.json.damaged` and rebuilds it ([`InstanceMetadata::rebuild`])
//! from what it knows (agent, instance key), what the damaged bytes still
//! show and the first message of `base.jsonl`.

use crate::durability::{write_file_atomically, SyncPolicy};
use crate::StoreError;
use goondan_types::JsonObject;
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

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
    /// Model usage of the instance's whole life (the ledger; a Goondan-rs
    /// extension). Reset only by deleting the instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::UsageTotals>,
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
            usage: None,
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

    /// Reads `path` like [`InstanceMetadata::read`], except that a file
    /// that does not parse is moved aside and rebuilt (see
    /// [`InstanceMetadata::rebuild`]); the second value is the warning to
    /// log then. The caller holds the instance lock and writes the result.
    pub(crate) fn read_or_rebuild(
        path: &Path,
        agent_name: &str,
        instance_key: &str,
        base_log: &Path,
    ) -> Result<(Option<Self>, Option<String>), StoreError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok((None, None)),
            Err(source) => return Err(StoreError::io("reading", path, source)),
        };
        let error = match serde_json::from_slice::<InstanceMetadata>(&bytes) {
            Ok(metadata) => return Ok((Some(metadata), None)),
            Err(error) => error,
        };
        let damaged = damaged_path(path);
        std::fs::rename(path, &damaged)
            .map_err(|source| StoreError::io("moving aside", path, source))?;
        let rebuilt = InstanceMetadata::rebuild(agent_name, instance_key, &bytes, base_log);
        let warning = format!(
            "{} was damaged ({error}); it was moved to {} and rebuilt (epoch {})",
            path.display(),
            damaged.display(),
            rebuilt.epoch
        );
        Ok((Some(rebuilt), Some(warning)))
    }

    /// Metadata for an instance whose `metadata.json` held `damaged`.
    ///
    /// `createdAt` is taken from the damaged bytes when they still show it,
    /// else from the first message of `base_log`, else it is now. The epoch
    /// must stay above every epoch handed out before, or a superseded
    /// writer could not tell it was superseded; the last one is unknown,
    /// so the count restarts from the clock (microseconds since 1970),
    /// above any counter unless the instance was opened more than once per
    /// microsecond since then, or from the epoch the damaged bytes show if
    /// that is higher.
    pub(crate) fn rebuild(
        agent_name: &str,
        instance_key: &str,
        damaged: &[u8],
        base_log: &Path,
    ) -> Self {
        let damaged = String::from_utf8_lossy(damaged);
        let mut metadata = InstanceMetadata::new(agent_name, instance_key);
        if let Some(created_at) =
            scrape_string(&damaged, "createdAt").or_else(|| first_message_created_at(base_log))
        {
            metadata.created_at = created_at;
        }
        let clock = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as u64);
        let scraped = scrape_number(&damaged, "epoch").unwrap_or(0);
        metadata.epoch = clock.max(scraped);
        metadata
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

/// A free name beside `path` for its damaged content:
/// `metadata.json.damaged`, then `metadata.json.damaged.2`, ...
fn damaged_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut candidate = path.with_file_name(format!("{name}.damaged"));
    let mut n = 2;
    while candidate.symlink_metadata().is_ok() {
        candidate = path.with_file_name(format!("{name}.damaged.{n}"));
        n += 1;
    }
    candidate
}

/// The text right after `"key":` in damaged JSON, whitespace skipped.
fn after_key<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let quoted = format!("\"{key}\"");
    let rest = &text[text.find(&quoted)? + quoted.len()..];
    rest.trim_start().strip_prefix(':').map(str::trim_start)
}

/// A string value of `key` in damaged JSON, if one is complete there.
fn scrape_string(text: &str, key: &str) -> Option<String> {
    let value = after_key(text, key)?.strip_prefix('"')?;
    let value = &value[..value.find('"')?];
    (!value.is_empty()).then(|| value.to_string())
}

/// An unsigned number value of `key` in damaged JSON.
fn scrape_number(text: &str, key: &str) -> Option<u64> {
    let value = after_key(text, key)?;
    let digits = value.split(|c: char| !c.is_ascii_digit()).next()?;
    digits.parse().ok()
}

/// `createdAt` of the first message of a `base.jsonl`, reading one line.
fn first_message_created_at(base_log: &Path) -> Option<String> {
    use std::io::BufRead;
    let file = std::fs::File::open(base_log).ok()?;
    let mut line = String::new();
    std::io::BufReader::new(file).read_line(&mut line).ok()?;
    let message: goondan_types::Message = serde_json::from_str(line.trim()).ok()?;
    Some(message.created_at)
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

    #[test]
    fn a_rebuild_keeps_what_the_damaged_bytes_still_show() {
        let dir = tempfile::tempdir().unwrap();
        let no_base = dir.path().join("base.jsonl");
        let cut = br#"{"status": "idle", "agentName": "coder", "instanceKey": "k", "createdAt": "2026-02-01T12:00:00.000Z", "updatedAt": "2026-02-01T12:34:56.789Z", "epoch": 99999999999999999, "consec"#;
        let rebuilt = InstanceMetadata::rebuild("coder", "k", cut, &no_base);
        assert_eq!(rebuilt.created_at, "2026-02-01T12:00:00.000Z");
        assert_eq!(rebuilt.epoch, 99999999999999999);
        let garbage = InstanceMetadata::rebuild("coder", "k", b"\xff\x00{{", &no_base);
        assert!(garbage.epoch > 1_700_000_000_000_000, "{}", garbage.epoch);
        assert_eq!(garbage.agent_name, "coder");
        assert_eq!(garbage.status, InstanceStatus::Idle);
    }
}
