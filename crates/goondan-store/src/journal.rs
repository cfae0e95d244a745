//! [`FileJournal`]: the event-sourced message log of one instance on disk
//! (`messages/base.jsonl` + `messages/events.jsonl`, `workspace.md` §7.3).
//!
//! # Formats
//!
//! `base.jsonl` holds one `Message` per line, exactly as the original.
//! `events.jsonl` holds one `MessageEvent` per line as the original writes
//! it, plus a `turnId` field naming the Turn that emitted it (the original's
//! reader ignores fields it does not know). While a commit runs, one more
//! line may sit at its end, a commit marker:
//!
//! ```json
//! {"type":"commit","turnId":"t-7","mode":"append","baseBytes":1200,"baseBytesAfter":1500}
//! ```
//!
//! # The commit protocol
//!
//! A fold is a delta append when every uncommitted event is an `append` and
//! the committed base is still the prefix of `next_messages`; otherwise it
//! is a rewrite. Either way the marker goes into `events.jsonl` before the
//! base changes, and `events.jsonl` is emptied after it changed, so a crash
//! at any point is resolved by the next open, under the instance lock:
//!
//! - no marker: the base was not touched; a leftover `base.jsonl.tmp` is
//!   deleted and the events stay pending;
//! - `append` marker, base at least `baseBytesAfter` long: the append
//!   finished; the base is cut to exactly that length and the events
//!   cleared (rolled forward);
//! - `append` marker, base shorter: the append was cut short; the base is
//!   cut back to `baseBytes` and the marker removed, so the events stay
//!   pending (rolled back; legal, since `commit_turn` never returned);
//! - `rewrite` marker: the temporary base was complete and flushed before
//!   the marker was written, so it is renamed into place if the rename had
//!   not happened yet, and the events cleared (rolled forward).
//!
//! Messages are therefore never applied twice, and a reader of `base.jsonl`
//! sees the old base or the new one, never a mix.
//!
//! A marker is followed only when it can describe the files as a crash at
//! some step of its fold would have left them: an append starts at a line
//! boundary inside the base, adds no more bytes than its events carry, the
//! base is not longer than its end, and every message between its start and
//! the end of the base is one the Turn appended; a rewrite's temporary base
//! (or, once renamed, the base) has the length it records. Any other marker
//! (a hand edit, mismatched copies, disk damage) fails the open with
//! `E_STORE_CORRUPT_LOG` before a byte is cut or renamed.
//!
//! A marker can also be lost (deleted by hand, or not flushed before a
//! power loss) after its fold finished. Recovery then finds the Turn's
//! events pending although the base already holds their messages, so it
//! drops every pending append whose message id is in the base (a Turn with
//! other events was folded atomically: one of its messages in the base
//! means all of it is). This costs one pass over the base ids, on open
//! only. Each step boundary
//! above is a [`FaultPoint`]; `tests/fault.rs` crashes a child process at
//! every one of them and checks the outcome the rules promise.
//!
//! # Turns
//!
//! Only the events of the latest Turn in `events.jsonl` are pending after a
//! crash. Events of earlier Turns can only be there when a Turn failed and a
//! later one started recording without first committing them: the runtime
//! moved past them, and replaying them would mix Turns (§7.3.2 rule 4), so
//! recovery moves their lines verbatim to `messages/orphaned-events.jsonl`
//! and reports a warning.

use crate::durability::{open_append, sync_dir, sync_file, temp_path, write_temp, SyncPolicy};
use crate::fault::{reach, FaultPoint};
use crate::jsonl::{read_jsonl_repairing, truncate, JsonlLine};
use crate::lock::InstanceLock;
use crate::paths::InstancePaths;
use crate::{CommitContext, LoadedConversation, StoreError, TurnJournal};
use goondan_types::{JsonValue, Message, MessageEvent};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::sync::Arc;

/// How a commit changed the base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum FoldMode {
    Append,
    Rewrite,
}

/// The line that makes a commit recoverable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommitMarker {
    #[serde(rename = "type")]
    kind: CommitTag,
    turn_id: String,
    mode: FoldMode,
    base_bytes: u64,
    base_bytes_after: u64,
}

/// The `type` value of a commit marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum CommitTag {
    Commit,
}

/// One parsed line of `events.jsonl`.
enum EventsLine {
    Event {
        turn_id: Option<String>,
        event: Box<MessageEvent>,
    },
    Commit(CommitMarker),
}

fn parse_events_line(line: &JsonlLine, path: &std::path::Path) -> Result<EventsLine, StoreError> {
    let corrupt = |reason: String| StoreError::CorruptLog {
        path: path.to_path_buf(),
        line: line.number,
        reason,
    };
    let mut value: JsonValue =
        serde_json::from_str(&line.text).map_err(|e| corrupt(e.to_string()))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| corrupt("not a JSON object".to_string()))?;
    if object.get("type").and_then(JsonValue::as_str) == Some("commit") {
        let marker = serde_json::from_value(value)
            .map_err(|e| corrupt(format!("bad commit marker: {e}")))?;
        return Ok(EventsLine::Commit(marker));
    }
    let turn_id = match object.remove("turnId") {
        None => None,
        Some(JsonValue::String(turn_id)) => Some(turn_id),
        Some(_) => return Err(corrupt("turnId is not a string".to_string())),
    };
    let event =
        serde_json::from_value(value).map_err(|e| corrupt(format!("not a message event: {e}")))?;
    Ok(EventsLine::Event {
        turn_id,
        event: Box::new(event),
    })
}

/// Encodes one line of `events.jsonl`, newline included: the event as the
/// original writes it plus the `turnId` of the Turn that emitted it.
pub fn encode_event_line(turn_id: &str, event: &MessageEvent) -> Result<Vec<u8>, StoreError> {
    let mut value =
        serde_json::to_value(event).map_err(|e| StoreError::encode("a message event", e))?;
    if let Some(object) = value.as_object_mut() {
        object.insert("turnId".to_string(), JsonValue::String(turn_id.to_string()));
    }
    let mut bytes =
        serde_json::to_vec(&value).map_err(|e| StoreError::encode("a message event", e))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Encodes messages as lines of `base.jsonl`, one `Message` per line.
pub fn encode_messages(messages: &[Message]) -> Result<Vec<u8>, StoreError> {
    let mut bytes = Vec::with_capacity(messages.len() * 256);
    for message in messages {
        serde_json::to_writer(&mut bytes, message)
            .map_err(|e| StoreError::encode("a message", e))?;
        bytes.push(b'\n');
    }
    Ok(bytes)
}

/// The message log of one instance on disk. Obtained from
/// [`crate::Instance`], whose lock it shares: while it lives, no other
/// journal of the same instance can be opened.
#[derive(Debug)]
pub struct FileJournal {
    paths: InstancePaths,
    policy: SyncPolicy,
    events_file: File,
    events_len: u64,
    base_file: File,
    base_len: usize,
    base_bytes: u64,
    last_base_id: Option<String>,
    uncommitted_only_appends: bool,
    recovered: Option<LoadedConversation>,
    poisoned: bool,
    _lock: Arc<InstanceLock>,
}

/// What recovery found on disk.
struct Recovered {
    conversation: LoadedConversation,
    base_bytes: u64,
    events_len: u64,
}

impl FileJournal {
    /// Opens the journal in `paths`, running crash recovery. The caller
    /// holds the instance lock.
    pub(crate) fn open(
        paths: InstancePaths,
        policy: SyncPolicy,
        lock: Arc<InstanceLock>,
    ) -> Result<Self, StoreError> {
        crate::durability::create_dir_all(&paths.messages_dir())?;
        let recovered = recover(&paths, policy)?;
        let events_file = open_append(&paths.events_log())?;
        let base_file = open_append(&paths.base_log())?;
        let mut journal = FileJournal {
            paths,
            policy,
            events_file,
            events_len: 0,
            base_file,
            base_len: 0,
            base_bytes: 0,
            last_base_id: None,
            uncommitted_only_appends: true,
            recovered: None,
            poisoned: false,
            _lock: lock,
        };
        journal.adopt(recovered);
        Ok(journal)
    }

    /// Takes over the counters of a fresh recovery.
    fn adopt(&mut self, recovered: Recovered) {
        let conversation = &recovered.conversation;
        self.base_len = conversation.base.len();
        self.last_base_id = conversation.base.last().map(|m| m.id.clone());
        self.base_bytes = recovered.base_bytes;
        self.events_len = recovered.events_len;
        self.uncommitted_only_appends = conversation
            .pending_events
            .iter()
            .all(MessageEvent::is_append);
        self.recovered = Some(recovered.conversation);
    }

    /// The instance files this journal writes.
    pub fn paths(&self) -> &InstancePaths {
        &self.paths
    }

    /// Number of committed messages.
    pub fn base_len(&self) -> usize {
        self.base_len
    }

    fn check_usable(&self) -> Result<(), StoreError> {
        if self.poisoned {
            return Err(StoreError::JournalPoisoned {
                dir: self.paths.messages_dir(),
            });
        }
        Ok(())
    }

    /// Appends the commit marker and returns where it starts.
    fn write_marker(&mut self, marker: &CommitMarker) -> Result<u64, StoreError> {
        let mut line =
            serde_json::to_vec(marker).map_err(|e| StoreError::encode("a commit marker", e))?;
        line.push(b'\n');
        let start = self.events_len;
        let events_path = self.paths.events_log();
        if let Err(source) = self.events_file.write_all(&line) {
            self.undo_events_to(start);
            return Err(StoreError::io("appending to", events_path, source));
        }
        self.events_len += line.len() as u64;
        if let Err(error) = sync_file(&self.events_file, &events_path, self.policy.syncs_commits())
        {
            self.undo_events_to(start);
            return Err(error);
        }
        Ok(start)
    }

    /// Cuts `events.jsonl` back to `len` after a failed write; if even that
    /// fails, the file may now end in garbage, so the journal stops.
    fn undo_events_to(&mut self, len: u64) {
        match self.events_file.set_len(len) {
            Ok(()) => self.events_len = len,
            Err(_) => self.poisoned = true,
        }
    }

    /// Empties `events.jsonl` after a successful fold. The fold is already
    /// durable; a failure here leaves the marker, which recovery rolls
    /// forward, but further appends would land after it, so the journal
    /// stops.
    fn clear_events(&mut self) -> Result<(), StoreError> {
        if self.events_len == 0 {
            return Ok(());
        }
        if let Err(source) = self.events_file.set_len(0) {
            self.poisoned = true;
            return Err(StoreError::io("clearing", self.paths.events_log(), source));
        }
        self.events_len = 0;
        self.uncommitted_only_appends = true;
        Ok(())
    }

    fn fold_append(&mut self, turn_id: &str, delta: &[Message]) -> Result<(), StoreError> {
        if delta.is_empty() {
            return self.clear_events();
        }
        let bytes = encode_messages(delta)?;
        let before = self.base_bytes;
        let after = before + bytes.len() as u64;
        let marker_start = self.write_marker(&CommitMarker {
            kind: CommitTag::Commit,
            turn_id: turn_id.to_string(),
            mode: FoldMode::Append,
            base_bytes: before,
            base_bytes_after: after,
        })?;
        reach(FaultPoint::AppendMarkerWritten);
        let base_path = self.paths.base_log();
        let appended = self
            .base_file
            .write_all(&bytes)
            .map_err(|source| StoreError::io("appending to", &base_path, source))
            .and_then(|()| sync_file(&self.base_file, &base_path, self.policy.syncs_commits()));
        if let Err(error) = appended {
            match self.base_file.set_len(before) {
                Ok(()) => self.undo_events_to(marker_start),
                Err(_) => self.poisoned = true,
            }
            return Err(error);
        }
        reach(FaultPoint::AppendBaseWritten);
        self.clear_events()?;
        self.base_len += delta.len();
        self.base_bytes = after;
        self.last_base_id = delta.last().map(|m| m.id.clone());
        Ok(())
    }

    fn fold_rewrite(&mut self, turn_id: &str, next_messages: &[Message]) -> Result<(), StoreError> {
        let bytes = encode_messages(next_messages)?;
        let base_path = self.paths.base_log();
        let temp = temp_path(&base_path);
        if let Err(error) = write_temp(&temp, &bytes, self.policy) {
            let _ = std::fs::remove_file(&temp);
            return Err(error);
        }
        reach(FaultPoint::RewriteTempWritten);
        let marker = CommitMarker {
            kind: CommitTag::Commit,
            turn_id: turn_id.to_string(),
            mode: FoldMode::Rewrite,
            base_bytes: self.base_bytes,
            base_bytes_after: bytes.len() as u64,
        };
        let marker_start = match self.write_marker(&marker) {
            Ok(start) => start,
            Err(error) => {
                let _ = std::fs::remove_file(&temp);
                return Err(error);
            }
        };
        reach(FaultPoint::RewriteMarkerWritten);
        if let Err(source) = std::fs::rename(&temp, &base_path) {
            self.undo_events_to(marker_start);
            let _ = std::fs::remove_file(&temp);
            return Err(StoreError::io("renaming into", base_path, source));
        }
        reach(FaultPoint::RewriteRenamed);
        // From here the new base is in place and the marker rolls it forward,
        // so any failure stops the journal instead of undoing.
        let finished = sync_dir(&self.paths.messages_dir(), self.policy.syncs_commits())
            .and_then(|()| open_append(&base_path));
        match finished {
            Ok(file) => self.base_file = file,
            Err(error) => {
                self.poisoned = true;
                return Err(error);
            }
        }
        self.clear_events()?;
        self.base_len = next_messages.len();
        self.base_bytes = bytes.len() as u64;
        self.last_base_id = next_messages.last().map(|m| m.id.clone());
        Ok(())
    }
}

impl TurnJournal for FileJournal {
    fn load(&mut self) -> Result<LoadedConversation, StoreError> {
        self.check_usable()?;
        if let Some(conversation) = self.recovered.take() {
            return Ok(conversation);
        }
        let recovered = recover(&self.paths, self.policy)?;
        self.adopt(recovered);
        Ok(self.recovered.take().unwrap_or_default())
    }

    fn record_event(&mut self, turn_id: &str, event: &MessageEvent) -> Result<(), StoreError> {
        self.check_usable()?;
        let line = encode_event_line(turn_id, event)?;
        let start = self.events_len;
        if let Err(source) = self.events_file.write_all(&line) {
            self.undo_events_to(start);
            return Err(StoreError::io(
                "appending to",
                self.paths.events_log(),
                source,
            ));
        }
        self.events_len += line.len() as u64;
        sync_file(
            &self.events_file,
            &self.paths.events_log(),
            self.policy.syncs_events(),
        )?;
        self.uncommitted_only_appends &= event.is_append();
        Ok(())
    }

    /// The `context` is not kept: single-host inputs have no inbox
    /// sequence, and a redelivered input is recognised by its event id in
    /// the conversation (see [`CommitContext`]), so neither a cursor nor an
    /// outbox has a place in `base.jsonl` or the commit marker.
    fn commit_turn(
        &mut self,
        turn_id: &str,
        events: &[MessageEvent],
        next_messages: &[Message],
        _context: &CommitContext,
    ) -> Result<(), StoreError> {
        self.check_usable()?;
        let only_appends =
            self.uncommitted_only_appends && events.iter().all(MessageEvent::is_append);
        let prefix_intact = next_messages.len() >= self.base_len
            && match self.base_len.checked_sub(1) {
                None => true,
                Some(last) => self.last_base_id.as_deref() == Some(next_messages[last].id.as_str()),
            };
        if only_appends && prefix_intact {
            let delta = &next_messages[self.base_len..];
            self.fold_append(turn_id, delta)
        } else {
            self.fold_rewrite(turn_id, next_messages)
        }
    }
}

/// Brings the files of `paths` to a consistent state (see the module docs)
/// and reads them.
fn recover(paths: &InstancePaths, policy: SyncPolicy) -> Result<Recovered, StoreError> {
    let base_path = paths.base_log();
    let events_path = paths.events_log();
    let temp = temp_path(&base_path);
    let mut warnings = Vec::new();

    let events = read_jsonl_repairing(&events_path)?;
    warnings.extend(events.warnings);
    let mut events_len = events.valid_len;
    let mut parsed = Vec::with_capacity(events.lines.len());
    for line in &events.lines {
        parsed.push((parse_events_line(line, &events_path)?, line));
    }
    if let Some(index) = parsed
        .iter()
        .position(|(parsed, _)| matches!(parsed, EventsLine::Commit(_)))
        .filter(|&index| index + 1 != parsed.len())
    {
        return Err(StoreError::CorruptLog {
            path: events_path,
            line: parsed[index].1.number,
            reason: "a commit marker is followed by more lines".to_string(),
        });
    }

    let marker = match parsed.last() {
        Some((EventsLine::Commit(marker), line)) => Some((marker.clone(), line.start, line.number)),
        _ => None,
    };
    match marker {
        Some((marker, marker_start, marker_line)) => {
            // Nothing is cut or renamed before the marker is known to
            // describe these files: a wrong one would otherwise wipe history.
            check_marker(paths, &marker, &parsed).map_err(|reason| {
                StoreError::ImpossibleCommitMarker {
                    events_path: events_path.clone(),
                    line: marker_line,
                    base_path: base_path.clone(),
                    reason,
                }
            })?;
            let committed = finish_interrupted_commit(paths, &marker, policy)?;
            reach(FaultPoint::RecoveryMarkerResolved);
            if committed {
                truncate(&events_path, 0)?;
                events_len = 0;
                parsed.clear();
                warnings.push(format!(
                    "completed the commit of Turn {} that a crash interrupted",
                    marker.turn_id
                ));
            } else {
                truncate(&events_path, marker_start)?;
                events_len = marker_start;
                parsed.pop();
                warnings.push(format!(
                    "undid the half-done commit of Turn {}; its events are pending again",
                    marker.turn_id
                ));
            }
        }
        None => {
            if temp.exists() {
                std::fs::remove_file(&temp)
                    .map_err(|source| StoreError::io("removing", &temp, source))?;
            }
        }
    }

    let base_content = read_jsonl_repairing(&base_path)?;
    warnings.extend(base_content.warnings);
    let mut base = Vec::with_capacity(base_content.lines.len());
    for line in &base_content.lines {
        let message = serde_json::from_str::<Message>(&line.text).map_err(|error| {
            StoreError::CorruptLog {
                path: base_path.clone(),
                line: line.number,
                reason: format!("not a message: {error}"),
            }
        })?;
        base.push(message);
    }

    let pending_turn_id = match parsed.last() {
        Some((EventsLine::Event { turn_id, .. }, _)) => turn_id.clone(),
        _ => None,
    };
    let mut pending_events = Vec::new();
    let mut pending_lines = Vec::new();
    let mut orphaned_lines = Vec::new();
    let mut orphaned_turns: Vec<String> = Vec::new();
    for (parsed_line, line) in parsed {
        if let EventsLine::Event { turn_id, event } = parsed_line {
            if turn_id == pending_turn_id {
                pending_events.push(*event);
                pending_lines.push(line);
            } else {
                let name = turn_id.unwrap_or_else(|| "(no turnId)".to_string());
                if !orphaned_turns.contains(&name) {
                    orphaned_turns.push(name);
                }
                orphaned_lines.push(line);
            }
        }
    }
    if let Some(warning) = drop_already_folded(&base, &mut pending_events) {
        warnings.push(warning);
        if pending_events.is_empty() {
            // The whole Turn is in the base: its commit finished and only
            // the marker is missing, so the Turn is over as if it had been
            // found. Lines of abandoned Turns are still set aside below.
            pending_lines.clear();
            if orphaned_lines.is_empty() {
                truncate(&events_path, 0)?;
                events_len = 0;
            }
        }
    }
    let pending_turn_id = if pending_events.is_empty() {
        None
    } else {
        pending_turn_id
    };
    if !orphaned_lines.is_empty() {
        let mut orphaned = Vec::new();
        for line in &orphaned_lines {
            orphaned.extend_from_slice(line.text.as_bytes());
            orphaned.push(b'\n');
        }
        let orphan_path = paths.orphaned_events_log();
        let mut file = open_append(&orphan_path)?;
        file.write_all(&orphaned)
            .map_err(|source| StoreError::io("appending to", &orphan_path, source))?;
        sync_file(&file, &orphan_path, policy.syncs_commits())?;
        let mut kept = Vec::new();
        for line in &pending_lines {
            kept.extend_from_slice(line.text.as_bytes());
            kept.push(b'\n');
        }
        crate::durability::write_file_atomically(&events_path, &kept, policy)?;
        events_len = kept.len() as u64;
        warnings.push(format!(
            "{} event(s) of abandoned Turn(s) {} were not replayed; they are kept in {}",
            orphaned_lines.len(),
            orphaned_turns.join(", "),
            orphan_path.display()
        ));
    }

    Ok(Recovered {
        conversation: LoadedConversation {
            base,
            pending_events,
            pending_turn_id,
            warnings,
        },
        base_bytes: base_content.valid_len,
        events_len,
    })
}

/// Applies the rules of the module docs to a commit marker; true when the
/// commit is now complete, false when it was rolled back.
fn finish_interrupted_commit(
    paths: &InstancePaths,
    marker: &CommitMarker,
    policy: SyncPolicy,
) -> Result<bool, StoreError> {
    let base_path = paths.base_log();
    let base_len = match std::fs::metadata(&base_path) {
        Ok(metadata) => metadata.len(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
        Err(source) => return Err(StoreError::io("reading", base_path, source)),
    };
    match marker.mode {
        FoldMode::Append => {
            // `check_marker` refused a base longer than `baseBytesAfter`.
            if base_len >= marker.base_bytes_after {
                Ok(true)
            } else {
                if base_len > marker.base_bytes {
                    truncate(&base_path, marker.base_bytes)?;
                }
                Ok(false)
            }
        }
        FoldMode::Rewrite => {
            let temp = temp_path(&base_path);
            if temp.exists() {
                std::fs::rename(&temp, &base_path)
                    .map_err(|source| StoreError::io("renaming into", &base_path, source))?;
                sync_dir(&paths.messages_dir(), policy.syncs_commits())?;
            }
            Ok(true)
        }
    }
}

/// Why `marker` cannot describe the files of `paths`, if it cannot: the
/// sizes it records must fit `base.jsonl` (and `base.jsonl.tmp`) as a crash
/// at some step of that fold would have left them, and the bytes an append
/// added must be messages the Turn's events append. `events` are the
/// parsed lines of `events.jsonl`, marker included.
fn check_marker(
    paths: &InstancePaths,
    marker: &CommitMarker,
    events: &[(EventsLine, &JsonlLine)],
) -> Result<(), String> {
    let base_path = paths.base_log();
    let file_len = |path: &std::path::Path| match std::fs::metadata(path) {
        Ok(metadata) => Ok(Some(metadata.len())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(format!("cannot read {}: {error}", path.display())),
    };
    let base_len = file_len(&base_path)?.unwrap_or(0);
    let before = marker.base_bytes;
    let after = marker.base_bytes_after;
    match marker.mode {
        FoldMode::Rewrite => {
            let temp = temp_path(&base_path);
            match file_len(&temp)? {
                Some(temp_len) if temp_len != after => Err(format!(
                    "it says the new base has {after} bytes, but {} has {temp_len}",
                    temp.display()
                )),
                None if base_len != after => Err(format!(
                    "it says the new base has {after} bytes, but base.jsonl has {base_len}"
                )),
                _ => Ok(()),
            }
        }
        FoldMode::Append => {
            let mut appended_ids = HashSet::new();
            let mut appended_bytes = 0u64;
            for (parsed, line) in events {
                if let EventsLine::Event { event, .. } = parsed {
                    if let MessageEvent::Append { message } = event.as_ref() {
                        appended_ids.insert(message.id.as_str());
                        // A message's line in the base is shorter than the
                        // event line that carries it.
                        appended_bytes += line.text.len() as u64 + 1;
                    }
                }
            }
            if before >= after {
                return Err(format!(
                    "an append from {before} to {after} bytes adds nothing"
                ));
            }
            if after - before > appended_bytes {
                return Err(format!(
                    "it appends {} bytes, more than the {appended_bytes} bytes of appended events before it",
                    after - before
                ));
            }
            if before > base_len {
                return Err(format!(
                    "it says the base had {before} bytes before the commit, but base.jsonl has only {base_len}"
                ));
            }
            if base_len > after {
                return Err(format!(
                    "it says the base has {after} bytes after the commit, but base.jsonl has {base_len}: following it would cut committed messages"
                ));
            }
            let region = read_range(&base_path, before.saturating_sub(1), base_len)?;
            let (boundary, added) = if before == 0 {
                (None, region.as_slice())
            } else {
                (region.first(), &region[1..])
            };
            if boundary.is_some_and(|&byte| byte != b'\n') {
                return Err(format!(
                    "byte {before} of base.jsonl, where it says the append started, is not the start of a line"
                ));
            }
            let complete_len = added.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            if base_len == after && complete_len != added.len() {
                return Err(format!(
                    "byte {after} of base.jsonl, where it says the append ended, is not the end of a line"
                ));
            }
            for (index, raw) in added[..complete_len]
                .split(|&b| b == b'\n')
                .filter(|raw| !raw.is_empty())
                .enumerate()
            {
                let id = serde_json::from_slice::<Message>(raw).ok().map(|m| m.id);
                if !id.as_deref().is_some_and(|id| appended_ids.contains(id)) {
                    return Err(format!(
                        "message {} after byte {before} of base.jsonl is not one the Turn appended",
                        index + 1
                    ));
                }
            }
            Ok(())
        }
    }
}

/// Bytes `start..end` of `path`.
fn read_range(path: &std::path::Path, start: u64, end: u64) -> Result<Vec<u8>, String> {
    use std::io::{Read, Seek, SeekFrom};
    let read = || -> std::io::Result<Vec<u8>> {
        let mut bytes = vec![0u8; end.saturating_sub(start) as usize];
        if bytes.is_empty() {
            return Ok(bytes);
        }
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut bytes)?;
        Ok(bytes)
    };
    read().map_err(|error| format!("cannot read {}: {error}", path.display()))
}

/// Drops the pending events the base already holds, and returns a warning
/// when there were some. They are there when a commit finished but its
/// marker was lost (deleted by hand, or never flushed before a power loss):
/// replaying them would append their messages a second time.
///
/// An append whose message id is in the base is done. A Turn of appends
/// only may be partly in the base (an append cut short), so the rest stays
/// pending; a Turn with other events was folded by an atomic rewrite, so
/// one of its messages in the base means all of it is.
fn drop_already_folded(base: &[Message], pending: &mut Vec<MessageEvent>) -> Option<String> {
    let appended = |event: &MessageEvent| match event {
        MessageEvent::Append { message } => Some(message.id.clone()),
        _ => None,
    };
    if !pending.iter().any(|event| appended(event).is_some()) {
        return None;
    }
    let mut seen: HashSet<String> = base.iter().map(|message| message.id.clone()).collect();
    let n_pending = pending.len();
    if pending.iter().all(MessageEvent::is_append) {
        pending.retain(|event| appended(event).is_some_and(|id| seen.insert(id)));
    } else if pending
        .iter()
        .filter_map(appended)
        .any(|id| seen.contains(&id))
    {
        pending.clear();
    }
    let n_dropped = n_pending - pending.len();
    (n_dropped > 0).then(|| {
        format!(
            "{n_dropped} pending event(s) were already folded into the base (a lost commit marker) and are not applied again"
        )
    })
}
