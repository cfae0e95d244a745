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
use crate::tail::{scan_backwards, TailLimits, TailReport};
use crate::StoreError;
use goondan_types::{RuntimeEvent, SwarmEvent};
use std::fs::File;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

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
    /// How the log was read: what a budget or the line cap left out.
    pub tail: TailReport,
    /// Where a follower of the log goes on from
    /// ([`crate::follow::FollowFrom::Offsets`]): the start of a line a
    /// writer was in the middle of, else the log's end when it was read.
    pub resume_at: u64,
}

/// Reads the matching events of `path` (missing means empty), for a
/// command run by the person who reads: [`read_runtime_events_within`]
/// with no read budget and the default line cap.
pub fn read_runtime_events(
    path: &Path,
    filter: &RuntimeEventFilter,
) -> Result<RuntimeEventPage, StoreError> {
    read_runtime_events_within(path, filter, TailLimits::default())
}

/// Reads the matching events of `path` (missing means empty) within
/// `limits`. The file is scanned backwards ([`crate::tail`]) and reading
/// stops once `filter.last` events matched, so a tail of a large log costs
/// a tail's worth of IO; a line over the cap is skipped, never loaded.
/// A torn last line (a writer in the middle of a line) is skipped. With
/// `filter.trace_id`, a line that does not hold the trace id is passed
/// over unparsed (and so not counted in `n_unreadable`).
pub fn read_runtime_events_within(
    path: &Path,
    filter: &RuntimeEventFilter,
    limits: TailLimits,
) -> Result<RuntimeEventPage, StoreError> {
    let wanted = filter.last.unwrap_or(usize::MAX);
    let mut page = RuntimeEventPage::default();
    if wanted == 0 {
        page.resume_at = std::fs::metadata(path).map_or(0, |metadata| metadata.len());
        return Ok(page);
    }
    let mut newest_first: Vec<RuntimeEventRecord> = Vec::new();
    let trace_id = filter.trace_id.as_deref().map(str::as_bytes);
    let mut torn_start = None;
    page.tail = scan_backwards(path, limits, |line| {
        if !line.terminated {
            torn_start = Some(line.start);
        }
        // A trace is looked for by scanning, so lines that cannot be of it
        // are passed over without being parsed.
        let may_match = trace_id.is_none_or(|trace_id| contains(line.bytes, trace_id));
        if line.terminated && may_match {
            take_line(
                line.bytes,
                filter,
                &mut newest_first,
                &mut page.n_unreadable,
            );
        }
        if newest_first.len() >= wanted {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    newest_first.reverse();
    page.records = newest_first;
    page.resume_at = torn_start.unwrap_or(page.tail.end);
    Ok(page)
}

/// True when `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || haystack
            .windows(needle.len())
            .any(|window| window == needle)
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
