//! The records of one instance's conversation log in `GDN_CONV`, as JSON
//! bodies under `<prefix>.<kind>` subjects. This module owns their shapes
//! and nothing else: no IO, no folding.
//!
//! | subject | body |
//! |---|---|
//! | `<prefix>.claim` | `{"v":1,"owner":"host-a","at":"2026-…Z"}` |
//! | `<prefix>.ev` | `{"v":1,"turnId":"t-7","event":{MessageEvent}}` |
//! | `<prefix>.commit` | `{"v":1,"turnId":"t-7","mode":"append"}` or `{…,"mode":"rewrite","messages":[…]}` |
//! | `<prefix>.ext.<token(name)>` | `{"v":1,"name":"memory","value":…}` |
//! | `<prefix>.snap` | `{"v":1,"object":"<prefix>@42","asOf":42}` |
//!
//! Any body larger than [`crate::layout::MAX_MESSAGE_BYTES`] is stored in
//! `gdn-blob` and the record carries `{"v":1,"blob":"<object>","bytes":N}`
//! instead.
//!
//! An `append` commit folds the `append` events its Turn recorded since
//! the previous commit; a `rewrite` commit carries the whole base. The
//! snapshot object (`gdn-snap`) holds `{"v":1,"asOf":X,"messages":[…],
//! "extensions":{…}}`: the state after every record up to sequence `X`.

use crate::subject::token;
use goondan_types::{JsonValue, Message, MessageEvent};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version every body carries as `v`.
pub(crate) const RECORD_VERSION: u32 = 1;

/// How a commit changed the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CommitMode {
    /// The base grows by the messages of the Turn's `append` events.
    Append,
    /// The base becomes the commit's `messages`.
    Rewrite,
}

/// `<prefix>.claim`: a new owner fences every earlier one.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ClaimBody {
    pub(crate) v: u32,
    pub(crate) owner: String,
    pub(crate) at: String,
}

/// `<prefix>.ev`: one emitted event.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventBody {
    pub(crate) v: u32,
    pub(crate) turn_id: String,
    pub(crate) event: MessageEvent,
}

/// `<prefix>.commit`: the Turn's commit point.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CommitBody {
    pub(crate) v: u32,
    pub(crate) turn_id: String,
    pub(crate) mode: CommitMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) messages: Option<Vec<Message>>,
}

/// `<prefix>.ext.<token>`: one extension's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ExtensionBody {
    pub(crate) v: u32,
    pub(crate) name: String,
    pub(crate) value: JsonValue,
}

/// `<prefix>.snap`: where the latest snapshot is.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SnapshotRef {
    pub(crate) v: u32,
    pub(crate) object: String,
    pub(crate) as_of: u64,
}

/// A body moved to `gdn-blob`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BlobRef {
    pub(crate) v: u32,
    pub(crate) blob: String,
    pub(crate) bytes: u64,
}

/// The content of a snapshot object in `gdn-snap`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SnapshotBody {
    pub(crate) v: u32,
    pub(crate) as_of: u64,
    pub(crate) messages: Vec<Message>,
    pub(crate) extensions: BTreeMap<String, JsonValue>,
}

/// A decoded record.
#[derive(Debug, Clone)]
pub(crate) enum Record {
    /// A claim only fences; its body is checked, never folded.
    Claim,
    Event(Box<EventBody>),
    Commit(CommitBody),
    Extension(ExtensionBody),
    Snapshot(SnapshotRef),
}

/// The kind of a record, read from the last tokens of its subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordKind {
    Claim,
    Event,
    Commit,
    Extension,
    Snapshot,
}

impl RecordKind {
    /// The kind of the record at `subject` under `prefix`, if it is one.
    pub(crate) fn of_subject(prefix: &str, subject: &str) -> Option<RecordKind> {
        let rest = subject.strip_prefix(prefix)?.strip_prefix('.')?;
        match rest {
            "claim" => Some(RecordKind::Claim),
            "ev" => Some(RecordKind::Event),
            "commit" => Some(RecordKind::Commit),
            "snap" => Some(RecordKind::Snapshot),
            _ if rest.starts_with("ext.") => Some(RecordKind::Extension),
            _ => None,
        }
    }

    /// The subject of a record of this kind (`extension` only for
    /// [`RecordKind::Extension`]).
    pub(crate) fn subject(self, prefix: &str, extension: Option<&str>) -> String {
        match self {
            RecordKind::Claim => format!("{prefix}.claim"),
            RecordKind::Event => format!("{prefix}.ev"),
            RecordKind::Commit => format!("{prefix}.commit"),
            RecordKind::Snapshot => format!("{prefix}.snap"),
            RecordKind::Extension => format!("{prefix}.ext.{}", token(extension.unwrap_or(""))),
        }
    }

    /// Decodes a body of this kind, refusing versions this one does not
    /// know.
    pub(crate) fn decode(self, body: &[u8]) -> Result<Record, String> {
        let text = |e: serde_json::Error| e.to_string();
        let (v, record) = match self {
            RecordKind::Claim => {
                let claim: ClaimBody = serde_json::from_slice(body).map_err(text)?;
                (claim.v, Record::Claim)
            }
            RecordKind::Event => {
                let event: EventBody = serde_json::from_slice(body).map_err(text)?;
                (event.v, Record::Event(Box::new(event)))
            }
            RecordKind::Commit => {
                let commit: CommitBody = serde_json::from_slice(body).map_err(text)?;
                (commit.v, Record::Commit(commit))
            }
            RecordKind::Extension => {
                let extension: ExtensionBody = serde_json::from_slice(body).map_err(text)?;
                (extension.v, Record::Extension(extension))
            }
            RecordKind::Snapshot => {
                let snapshot: SnapshotRef = serde_json::from_slice(body).map_err(text)?;
                (snapshot.v, Record::Snapshot(snapshot))
            }
        };
        if v != RECORD_VERSION {
            return Err(format!(
                "record version {v}; this version of gdn reads version {RECORD_VERSION}"
            ));
        }
        Ok(record)
    }
}

/// The blob a body points to, when it was moved out of the record.
pub(crate) fn blob_of(body: &[u8]) -> Option<BlobRef> {
    // A blob reference is tiny; a large body is never one.
    if body.len() > 1024 {
        return None;
    }
    serde_json::from_slice::<BlobRef>(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_and_kinds_round_trip() {
        let prefix = "gdn.conv.ws.coder.k1";
        for kind in [
            RecordKind::Claim,
            RecordKind::Event,
            RecordKind::Commit,
            RecordKind::Snapshot,
            RecordKind::Extension,
        ] {
            let subject = kind.subject(prefix, Some("memory.v2"));
            assert_eq!(RecordKind::of_subject(prefix, &subject), Some(kind));
        }
        assert_eq!(
            RecordKind::of_subject(prefix, "gdn.conv.ws.coder.k10.ev"),
            None
        );
        assert_eq!(
            RecordKind::of_subject(prefix, "gdn.conv.ws.coder.k1.other"),
            None
        );
    }

    #[test]
    fn a_blob_reference_is_told_from_a_body() {
        let reference = serde_json::to_vec(&BlobRef {
            v: RECORD_VERSION,
            blob: "abc".to_string(),
            bytes: 300_000,
        })
        .unwrap();
        assert_eq!(blob_of(&reference).unwrap().blob, "abc");
        let commit = serde_json::to_vec(&CommitBody {
            v: RECORD_VERSION,
            turn_id: "t".to_string(),
            mode: CommitMode::Append,
            messages: None,
        })
        .unwrap();
        assert!(blob_of(&commit).is_none());
        assert!(matches!(
            RecordKind::Commit.decode(&commit).unwrap(),
            Record::Commit(CommitBody {
                mode: CommitMode::Append,
                ..
            })
        ));
    }
}
