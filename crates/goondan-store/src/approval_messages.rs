//! [`ApprovalMessages`]: the chat messages a ConnectorProcess posted for
//! approval requests, in `approval-messages.jsonl` of its Connection's
//! folder ([`WorkspacePaths::connection_dir`](crate::WorkspacePaths::connection_dir)),
//! so a restarted connector neither posts a request a second time nor
//! forgets which instance a button press on an old message decides for.
//!
//! Written only by the one ConnectorProcess of its Connection, one JSON
//! line per record, each flushed per the [`SyncPolicy`] before the
//! connector acts on it:
//!
//! * `{"posted": <PostedApproval>}`: a message with buttons is in the
//!   chat;
//! * `{"settled": "<id>"}`: the request needs no buttons any more (it was
//!   decided, by a press or elsewhere), or was decided before it could be
//!   posted, so it never will be.
//!
//! Reopening drops a torn last line (never acted on). A file past
//! [`COMPACT_AFTER_BYTES`] is rewritten at open with only the messages
//! still waiting: a settled request is never offered again (nothing
//! undecided is settled), so forgetting it is safe.

use crate::durability::{create_dir_all, open_append, sync_dir, sync_file, SyncPolicy};
use crate::StoreError;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The file's name inside the Connection's folder.
const FILE_NAME: &str = "approval-messages.jsonl";
/// The most read of the file; a connector that posted this much without
/// one compaction has a problem a bigger read would not solve.
const MAX_READ_BYTES: u64 = 4 * 1024 * 1024;
/// A file past this size is compacted when it is opened.
const COMPACT_AFTER_BYTES: u64 = 256 * 1024;

/// One message posted for an approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostedApproval {
    /// The request's id (`apv_…`).
    pub id: String,
    /// The agent whose instance holds it.
    pub agent: String,
    /// That instance.
    pub instance_key: String,
    /// Where the message is (a Telegram chat id, a Slack channel id).
    pub chat: String,
    /// Which message it is (a Telegram `message_id`, a Slack `ts`).
    pub message: String,
    /// What the message says, so it can be edited to say how it ended.
    pub text: String,
    /// When it was posted (RFC 3339).
    pub posted_at: String,
}

/// One line of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum Record {
    Posted(Box<PostedApproval>),
    Settled(String),
}

/// The messages one ConnectorProcess posted, for that process alone.
#[derive(Debug)]
pub struct ApprovalMessages {
    path: PathBuf,
    policy: SyncPolicy,
    file: Option<File>,
    /// Posted and not settled, by request id.
    waiting: BTreeMap<String, PostedApproval>,
    settled: BTreeSet<String>,
}

impl ApprovalMessages {
    /// The messages recorded in `connection_dir`, read once now.
    pub fn open(connection_dir: &Path, policy: SyncPolicy) -> Result<ApprovalMessages, StoreError> {
        let path = connection_dir.join(FILE_NAME);
        let (records, bytes) = read_records(&path)?;
        let mut messages = ApprovalMessages {
            path,
            policy,
            file: None,
            waiting: BTreeMap::new(),
            settled: BTreeSet::new(),
        };
        for record in records {
            messages.apply(record);
        }
        if bytes > COMPACT_AFTER_BYTES {
            messages.compact()?;
        }
        Ok(messages)
    }

    /// Whether the request `id` was posted or settled already: either
    /// way it must not be posted (again).
    pub fn knows(&self, id: &str) -> bool {
        self.waiting.contains_key(id) || self.settled.contains(id)
    }

    /// The message posted for `id`, while it waits for a decision.
    pub fn waiting(&self, id: &str) -> Option<&PostedApproval> {
        self.waiting.get(id)
    }

    /// Whether `id` was settled.
    pub fn is_settled(&self, id: &str) -> bool {
        self.settled.contains(id)
    }

    /// Records a message posted; durable when this returns.
    pub fn posted(&mut self, posted: PostedApproval) -> Result<(), StoreError> {
        let record = Record::Posted(Box::new(posted));
        self.append(&record)?;
        self.apply(record);
        Ok(())
    }

    /// Records that `id` needs no buttons any more; durable when this
    /// returns. Settling twice writes nothing the second time.
    pub fn settled(&mut self, id: &str) -> Result<(), StoreError> {
        if self.settled.contains(id) {
            return Ok(());
        }
        let record = Record::Settled(id.to_string());
        self.append(&record)?;
        self.apply(record);
        Ok(())
    }

    fn apply(&mut self, record: Record) {
        match record {
            Record::Posted(posted) => {
                if !self.settled.contains(&posted.id) {
                    self.waiting.insert(posted.id.clone(), *posted);
                }
            }
            Record::Settled(id) => {
                self.waiting.remove(&id);
                self.settled.insert(id);
            }
        }
    }

    /// Rewrites the file with only the messages still waiting.
    fn compact(&mut self) -> Result<(), StoreError> {
        let mut bytes = Vec::new();
        for posted in self.waiting.values() {
            bytes.extend(encode(&Record::Posted(Box::new(posted.clone())))?);
        }
        crate::durability::write_file_atomically(&self.path, &bytes, self.policy)?;
        self.settled.clear();
        self.file = None;
        Ok(())
    }

    fn append(&mut self, record: &Record) -> Result<(), StoreError> {
        let line = encode(record)?;
        if self.file.is_none() {
            if let Some(dir) = self.path.parent() {
                create_dir_all(dir)?;
            }
            let created = !self.path.exists();
            self.file = Some(open_append(&self.path)?);
            if created {
                if let Some(dir) = self.path.parent() {
                    sync_dir(dir, self.policy.syncs_commits())?;
                }
            }
        }
        let file = self.file.as_mut().expect("opened above");
        file.write_all(&line)
            .map_err(|source| StoreError::io("appending to", &self.path, source))?;
        sync_file(file, &self.path, self.policy.syncs_commits())
    }
}

fn encode(record: &Record) -> Result<Vec<u8>, StoreError> {
    let mut line = serde_json::to_vec(record).map_err(|source| StoreError::Encode {
        what: "an approval message record",
        source,
    })?;
    line.push(b'\n');
    Ok(line)
}

fn read_records(path: &Path) -> Result<(Vec<Record>, u64), StoreError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(source) => return Err(StoreError::io("opening", path, source)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|source| StoreError::io("reading", path, source))?;
    // Only newline-terminated lines count: a torn last line was never
    // acted on.
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut records = Vec::new();
    for (index, line) in bytes[..complete].split(|&b| b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record = serde_json::from_slice(line).map_err(|error| StoreError::CorruptLog {
            path: path.to_path_buf(),
            line: index + 1,
            reason: error.to_string(),
        })?;
        records.push(record);
    }
    Ok((records, bytes.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(id: &str) -> PostedApproval {
        PostedApproval {
            id: id.into(),
            agent: "coder".into(),
            instance_key: "default".into(),
            chat: "-100".into(),
            message: "900".into(),
            text: "coder:default wants to run bash__exec".into(),
            posted_at: "2026-11-27T00:00:00.000Z".into(),
        }
    }

    #[test]
    fn posts_and_settlements_survive_a_reopen_and_a_torn_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut messages = ApprovalMessages::open(dir.path(), SyncPolicy::TurnCommit).unwrap();
        assert!(!messages.knows("apv_1"));
        messages.posted(posted("apv_1")).unwrap();
        messages.posted(posted("apv_2")).unwrap();
        messages.settled("apv_2").unwrap();
        // Decided before it could be posted: known, never posted.
        messages.settled("apv_3").unwrap();
        drop(messages);
        let file = dir.path().join(FILE_NAME);
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.extend_from_slice(b"{\"settled\":\"apv_");
        std::fs::write(&file, &bytes).unwrap();

        let messages = ApprovalMessages::open(dir.path(), SyncPolicy::TurnCommit).unwrap();
        assert_eq!(messages.waiting("apv_1"), Some(&posted("apv_1")));
        assert!(messages.waiting("apv_2").is_none());
        assert!(messages.is_settled("apv_2") && messages.knows("apv_2"));
        assert!(messages.knows("apv_3") && !messages.knows("apv_4"));

        std::fs::write(&file, b"not json\n").unwrap();
        let error = ApprovalMessages::open(dir.path(), SyncPolicy::TurnCommit).unwrap_err();
        assert!(error.to_string().contains("line 1"), "{error}");
    }

    #[test]
    fn a_large_file_keeps_only_what_waits() {
        let dir = tempfile::tempdir().unwrap();
        let mut messages = ApprovalMessages::open(dir.path(), SyncPolicy::ProcessCrash).unwrap();
        let mut n = 0;
        while std::fs::metadata(dir.path().join(FILE_NAME)).map_or(0, |m| m.len())
            <= COMPACT_AFTER_BYTES
        {
            messages.posted(posted(&format!("apv_{n}"))).unwrap();
            messages.settled(&format!("apv_{n}")).unwrap();
            n += 1;
        }
        messages.posted(posted("apv_open")).unwrap();
        drop(messages);
        let mut messages = ApprovalMessages::open(dir.path(), SyncPolicy::ProcessCrash).unwrap();
        let size = std::fs::metadata(dir.path().join(FILE_NAME)).unwrap().len();
        assert!(size < 1024, "not compacted: {size} bytes");
        assert!(messages.waiting("apv_open").is_some());
        // Appends after a compaction land in the new file.
        messages.settled("apv_open").unwrap();
        drop(messages);
        let messages = ApprovalMessages::open(dir.path(), SyncPolicy::ProcessCrash).unwrap();
        assert!(messages.is_settled("apv_open"));
    }
}
