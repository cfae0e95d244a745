//! `messages/runtime-events.jsonl` (`workspace.md` §7.3.3): an
//! append-only log of [`RuntimeEvent`]s for observability, and the filtered
//! reader behind `gdn logs --agent/--trace`.
//!
//! Nothing here feeds conversation state: the log is never read to rebuild
//! messages (§2.4 rule 7). Lines are written with `write(2)` and never
//! flushed to disk explicitly; losing the last observability lines to a
//! power loss is an accepted price for not slowing every Step.
//!
//! A write cut short (a crash, a full disk) leaves a torn last line. Like
//! the message logs, this log repairs such a tail before it appends again
//! (`jsonl::repair_torn_tail`): when the log is opened, and after a failed
//! append, so the next event never gets glued to a fragment. Only the tail
//! is read, never the whole log.

use crate::durability::open_append;
use crate::jsonl::repair_torn_tail;
use crate::lock::InstanceLock;
use crate::StoreError;
use goondan_types::{RuntimeEvent, SwarmEvent};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Bytes read per step when scanning a log backwards.
const SCAN_CHUNK_BYTES: u64 = 64 * 1024;

/// The runtime event log of one instance, opened for appending.
#[derive(Debug)]
pub struct RuntimeEventLog {
    path: PathBuf,
    writer: Mutex<Writer>,
    _lock: Arc<InstanceLock>,
}

/// The appending side; one append at a time.
#[derive(Debug)]
struct Writer {
    file: File,
    /// A failed append may have left a fragment that is not repaired yet.
    torn: bool,
}

impl RuntimeEventLog {
    /// Opens the log in append mode, repairing a torn last line. The caller
    /// holds the instance lock.
    pub(crate) fn open(path: PathBuf, lock: Arc<InstanceLock>) -> Result<Self, StoreError> {
        if let Some(parent) = path.parent() {
            crate::durability::create_dir_all(parent)?;
        }
        repair_torn_tail(&path)?;
        let file = open_append(&path)?;
        Ok(RuntimeEventLog {
            path,
            writer: Mutex::new(Writer { file, torn: false }),
            _lock: lock,
        })
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event as one line. When the write fails (a full disk),
    /// what it left is cut away at once, or before the next append if that
    /// fails too.
    pub fn append(&self, event: &RuntimeEvent) -> Result<(), StoreError> {
        let mut line =
            serde_json::to_vec(event).map_err(|e| StoreError::encode("a runtime event", e))?;
        line.push(b'\n');
        let mut writer = self
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if writer.torn {
            repair_torn_tail(&self.path)?;
            writer.torn = false;
        }
        // One `write_all` on an `O_APPEND` file: concurrent readers see whole
        // lines or a torn last line, which they skip.
        if let Err(source) = writer.file.write_all(&line) {
            writer.torn = repair_torn_tail(&self.path).is_err();
            return Err(StoreError::io("appending to", &self.path, source));
        }
        Ok(())
    }
}

/// Which runtime events to return; unset fields match everything and set
/// ones are combined with AND, as `gdn logs` does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeEventFilter {
    /// Only events of this agent (`agentName`).
    pub agent_name: Option<String>,
    /// Only events of this trace (`traceId`).
    pub trace_id: Option<String>,
    /// Only events of this type: exact (`tool.completed`) or a family with
    /// a trailing `*` (`tool.*`).
    pub event_type: Option<String>,
    /// Only the last N matching events; all of them when unset.
    pub last: Option<usize>,
}

impl RuntimeEventFilter {
    /// True when `event` passes every set criterion (`last` aside).
    pub fn matches(&self, event: &RuntimeEvent) -> bool {
        let base = event.base();
        if self
            .agent_name
            .as_deref()
            .is_some_and(|a| a != base.agent_name)
        {
            return false;
        }
        if self.trace_id.as_deref().is_some_and(|t| t != base.trace_id) {
            return false;
        }
        self.matches_type(event.type_name())
    }

    /// True when a swarm event (a reload) passes: it has no trace, so a
    /// trace filter excludes it; an agent filter keeps the reloads that
    /// restarted one of that agent's instances.
    pub fn matches_swarm_event(&self, event: &SwarmEvent) -> bool {
        if self.trace_id.is_some() {
            return false;
        }
        if let Some(agent) = self.agent_name.as_deref() {
            let restarted_it = event
                .restarted()
                .iter()
                .any(|key| key.split_once(':').is_some_and(|(name, _)| name == agent));
            if !restarted_it {
                return false;
            }
        }
        self.matches_type(event.type_name())
    }

    fn matches_type(&self, type_name: &str) -> bool {
        match self.event_type.as_deref() {
            None => true,
            Some(pattern) => match pattern.strip_suffix('*') {
                Some(prefix) => type_name.starts_with(prefix),
                None => type_name == pattern,
            },
        }
    }
}

/// One matching line.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeEventRecord {
    /// The line as stored, for verbatim output.
    pub line: String,
    /// The parsed event.
    pub event: RuntimeEvent,
}

/// What a read returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeEventPage {
    /// Matching events, oldest first.
    pub records: Vec<RuntimeEventRecord>,
    /// Complete lines that are not runtime events this version knows.
    pub n_unreadable: usize,
}

/// Reads the matching events of `path` (missing means empty). With
/// `filter.last`, the file is scanned backwards and reading stops once
/// enough events matched, so a tail of a large log costs a tail's worth of
/// IO. A torn last line (a writer in the middle of a line) is skipped.
pub fn read_runtime_events(
    path: &Path,
    filter: &RuntimeEventFilter,
) -> Result<RuntimeEventPage, StoreError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(RuntimeEventPage::default())
        }
        Err(source) => return Err(StoreError::io("opening", path, source)),
    };
    let io = |source| StoreError::io("reading", path, source);
    let wanted = filter.last.unwrap_or(usize::MAX);
    let mut page = RuntimeEventPage::default();
    if wanted == 0 {
        return Ok(page);
    }
    let mut end = file.seek(SeekFrom::End(0)).map_err(io)?;
    // Bytes after the last newline seen so far (scanning backwards they
    // precede what was already handled).
    let mut carry: Vec<u8> = Vec::new();
    let mut newest_first: Vec<RuntimeEventRecord> = Vec::new();
    let mut seen_newline = false;
    while end > 0 && newest_first.len() < wanted {
        let start = end.saturating_sub(SCAN_CHUNK_BYTES);
        let mut chunk = vec![0u8; (end - start) as usize];
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        file.read_exact(&mut chunk).map_err(io)?;
        chunk.extend_from_slice(&carry);
        let mut lines: Vec<&[u8]> = chunk.split(|&b| b == b'\n').collect();
        // The first piece may continue in the previous chunk.
        let head = if start > 0 {
            lines.remove(0).to_vec()
        } else {
            Vec::new()
        };
        let n_lines = lines.len();
        for (index, raw) in lines.into_iter().enumerate().rev() {
            let is_last_piece = index + 1 == n_lines;
            if is_last_piece && !seen_newline {
                // Bytes after the file's final newline: a torn or empty tail.
                seen_newline = true;
                continue;
            }
            if newest_first.len() >= wanted {
                break;
            }
            take_line(raw, filter, &mut newest_first, &mut page.n_unreadable);
        }
        carry = head;
        end = start;
    }
    newest_first.reverse();
    page.records = newest_first;
    Ok(page)
}

fn take_line(
    raw: &[u8],
    filter: &RuntimeEventFilter,
    out: &mut Vec<RuntimeEventRecord>,
    n_unreadable: &mut usize,
) {
    let Ok(text) = std::str::from_utf8(raw) else {
        *n_unreadable += 1;
        return;
    };
    if text.trim().is_empty() {
        return;
    }
    match serde_json::from_str::<RuntimeEvent>(text) {
        Ok(event) if filter.matches(&event) => out.push(RuntimeEventRecord {
            line: text.to_string(),
            event,
        }),
        Ok(_) => {}
        Err(_) => *n_unreadable += 1,
    }
}
