//! The records of one instance's conversation log in `GDN_CONV`, as JSON
//! bodies under `<prefix>.<kind>` subjects. This module owns their shapes
//! and nothing else: no IO, no folding.
//!
//! | subject | body |
//! |---|---|
//! | `<prefix>.claim` | `{"v":1,"owner":"host-a","at":"2026-…Z"}` |
//! | `<prefix>.ev` | `{"v":1,"turnId":"t-7","event":{MessageEvent}}` |
//! | `<prefix>.commit` | `{"v":1,"turnId":"t-7","mode":"append","inboxSeq":42,"outbox":[{"to":"orchestrator","event":{AgentEvent}}]}`, or `{…,"mode":"rewrite","messages":[…]}` |
//! | `<prefix>.ext.<token(name)>` | `{"v":1,"name":"memory","value":…}`, or `{…,"value":null,"removed":true}` once it has none |
//! | `<prefix>.snap` | `{"v":1,"object":"<prefix>@42","asOf":42}` |
//! | `<prefix>.apv.<token(id)>` | `{"v":1,"request":{ApprovalRequest},"decision":{ApprovalDecision},"closed":true}` (`decision` once decided, `closed` once acted on) |
//!
//! Any body larger than [`crate::layout::MAX_MESSAGE_BYTES`] is stored in
//! `gdn-blob` and the record carries `{"v":1,"blob":"<object>","bytes":N}`
//! instead.
//!
//! An `append` commit folds the `append` events its Turn recorded since
//! the previous commit; a `rewrite` commit carries the whole base. A
//! commit's `inboxSeq` is the instance's inbox cursor after it (the
//! `GDN_IN` sequence of the last input a committed Turn consumed, carried
//! over by commits that consumed none), and its `outbox` the answers its
//! Turn sent (see [`crate::cursor`]). The
//! snapshot object (`gdn-snap`) holds `{"v":1,"asOf":X,"messages":[…],
//! "extensions":{…},"inboxSeq":N}`: the state after every record up to
//! sequence `X`.
//!
//! An approval record carries the whole state of one request for a
//! person's decision, so the last record on its subject says where it
//! stands: a reader of every instance's requests takes the last record per
//! subject (`gdn approvals` in a cluster), and the replay takes the last
//! one it reads. A snapshot does not hold approvals: the writer writes the
//! open ones again before it purges what the snapshot covers (see
//! [`crate::journal`]).

use crate::subject::token;
use goondan_store::OutboxMessage;
use goondan_types::{
    AgentEvent, ApprovalDecision, ApprovalRequest, JsonValue, Message, MessageEvent,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version every body carries as `v`.
///
/// A field added as optional (`default`, skipped when empty) keeps the
/// version: a record written before it decodes without it, and an older
/// reader ignores it (no body denies unknown fields). Only a change an
/// older reader would misread (a field removed or given a new meaning)
/// takes a new version, which older readers then refuse.
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
    /// The inbox cursor after this commit; absent in records written
    /// before cursors were, and while the instance has consumed no
    /// sequenced input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) inbox_seq: Option<u64>,
    /// The answers the committed Turn sent.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) outbox: Vec<OutboxBody>,
}

/// One answer in a commit's outbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct OutboxBody {
    /// The routing key it went to (`orchestrator` for a host's own
    /// request).
    pub(crate) to: String,
    pub(crate) event: AgentEvent,
}

impl From<OutboxBody> for OutboxMessage {
    fn from(body: OutboxBody) -> Self {
        OutboxMessage {
            to: body.to,
            event: body.event,
        }
    }
}

impl From<&OutboxMessage> for OutboxBody {
    fn from(message: &OutboxMessage) -> Self {
        OutboxBody {
            to: message.to.clone(),
            event: message.event.clone(),
        }
    }
}

/// `<prefix>.ext.<token>`: one extension's state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ExtensionBody {
    pub(crate) v: u32,
    pub(crate) name: String,
    pub(crate) value: JsonValue,
    /// The extension has no state from here on (a rewind to before its
    /// first); `value` is then `null`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) removed: bool,
}

impl ExtensionBody {
    /// Applies this record to `states`.
    pub(crate) fn apply_to(self, states: &mut BTreeMap<String, JsonValue>) {
        if self.removed {
            states.remove(&self.name);
        } else {
            states.insert(self.name, self.value);
        }
    }
}

/// `<prefix>.apv.<token(id)>`: where one request for a person's decision
/// stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ApprovalBody {
    pub(crate) v: u32,
    pub(crate) request: ApprovalRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) decision: Option<ApprovalDecision>,
    /// Its Turn acted on the decision: nothing may act on it again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) closed: bool,
}

impl ApprovalBody {
    /// The record of `open` as it stands, closed or not.
    pub(crate) fn of(open: &goondan_store::OpenApproval, closed: bool) -> ApprovalBody {
        ApprovalBody {
            v: RECORD_VERSION,
            request: open.request.clone(),
            decision: open.decision.clone(),
            closed,
        }
    }

    /// Where the request stands, closed or not.
    pub(crate) fn state(self) -> goondan_store::OpenApproval {
        goondan_store::OpenApproval {
            request: self.request,
            decision: self.decision,
        }
    }
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
    /// The inbox cursor as of `as_of`: the commit there is not replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) inbox_seq: Option<u64>,
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
    Approval(Box<ApprovalBody>),
}

/// The kind of a record, read from the last tokens of its subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordKind {
    Claim,
    Event,
    Commit,
    Extension,
    Snapshot,
    Approval,
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
            _ if rest.starts_with("apv.") => Some(RecordKind::Approval),
            _ => None,
        }
    }

    /// The subject of a record of this kind (`name` is the extension of
    /// [`RecordKind::Extension`] and the request id of
    /// [`RecordKind::Approval`]).
    pub(crate) fn subject(self, prefix: &str, name: Option<&str>) -> String {
        match self {
            RecordKind::Claim => format!("{prefix}.claim"),
            RecordKind::Event => format!("{prefix}.ev"),
            RecordKind::Commit => format!("{prefix}.commit"),
            RecordKind::Snapshot => format!("{prefix}.snap"),
            RecordKind::Extension => format!("{prefix}.ext.{}", token(name.unwrap_or(""))),
            RecordKind::Approval => format!("{prefix}.apv.{}", token(name.unwrap_or(""))),
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
            RecordKind::Approval => {
                let approval: ApprovalBody = serde_json::from_slice(body).map_err(text)?;
                (approval.v, Record::Approval(Box::new(approval)))
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
            RecordKind::Approval,
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

    fn decoded_commit(body: &[u8]) -> CommitBody {
        match RecordKind::Commit.decode(body).unwrap() {
            Record::Commit(commit) => commit,
            other => panic!("not a commit: {other:?}"),
        }
    }

    #[test]
    fn a_commit_round_trips_its_inbox_cursor_and_outbox() {
        let mut answer = AgentEvent::new(
            "response",
            goondan_types::EventSource::new(goondan_types::EventSourceKind::Agent, "coder"),
        );
        answer.input = Some("done".to_string());
        let outbox = vec![OutboxBody {
            to: "orchestrator".to_string(),
            event: answer,
        }];
        let body = serde_json::to_vec(&CommitBody {
            v: RECORD_VERSION,
            turn_id: "t-1".to_string(),
            mode: CommitMode::Append,
            messages: None,
            inbox_seq: Some(42),
            outbox: outbox.clone(),
        })
        .unwrap();
        let json: JsonValue = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["inboxSeq"], 42, "{json}");
        assert_eq!(json["outbox"][0]["to"], "orchestrator", "{json}");
        let commit = decoded_commit(&body);
        assert_eq!(commit.inbox_seq, Some(42));
        assert_eq!(commit.outbox, outbox);
    }

    #[test]
    fn a_commit_written_before_cursors_still_decodes() {
        // Exactly what earlier versions wrote: no `inboxSeq`, no `outbox`.
        for old in [
            &br#"{"v":1,"turnId":"t-7","mode":"append"}"#[..],
            br#"{"v":1,"turnId":"t-8","mode":"rewrite","messages":[]}"#,
        ] {
            let commit = decoded_commit(old);
            assert_eq!(commit.inbox_seq, None);
            assert!(commit.outbox.is_empty());
            // And a commit without them is written as before.
            let written = serde_json::to_value(&commit).unwrap();
            assert_eq!(written, serde_json::from_slice::<JsonValue>(old).unwrap());
        }
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
            inbox_seq: None,
            outbox: Vec::new(),
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
