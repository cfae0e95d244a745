//! `extensions/snapshots.jsonl`: the extension state of an instance after
//! every Turn that changed it, so fork and rewind can give an instance the
//! state it had at the end of an earlier Turn (the state files hold only
//! the latest).
//!
//! # Format
//!
//! One JSON object per line, appended by the instance's single writer
//! when a Turn ends ([`crate::ExtensionStateStore::end_turn`]) and only if
//! one of the Turn's saves changed a state file; a Turn that changed
//! nothing writes nothing. `states` holds every extension the agent runs,
//! by name: its whole state, or `null` when it has none (no file).
//!
//! ```json
//! {"kind":"before","turnId":"turn_5d0c…","recordedAt":"2026-…","states":{"tool-search":null}}
//! {"kind":"after","turnId":"turn_5d0c…","recordedAt":"2026-…","states":{"tool-search":{"lastQuery":"x"}}}
//! ```
//!
//! `after` is the state once the Turn `turnId` ended. `before` is written
//! once, as the file's first line, with the state as it was before the
//! first change the file records: a Turn that ran before that (even before
//! snapshots existed) and changed nothing after its end has that state.
//!
//! # Which state a Turn ended with
//!
//! Lines are in the order Turns ended, and the state after Turn N is the
//! state before the first change of a later Turn: the line before the
//! first line naming a Turn after N (or that line itself if it is the
//! `before` line), or the current state files when no later Turn changed
//! anything. This is exact when every Turn after N recorded its id on its
//! input message (the runtime that writes this file does); for a Turn
//! followed by older ones, the caller falls back to the current state and
//! says so. A line naming a Turn the log does not hold (a Turn refused
//! before it recorded its input, or one cut by a rewind whose lines were
//! archived) is simply ordered where it was written.

use crate::durability::{open_append, sync_file, SyncPolicy};
use crate::jsonl::repair_torn_tail;
use crate::paths::InstancePaths;
use crate::StoreError;
use goondan_types::JsonValue;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Write};

/// The extension states a line holds, by extension name; `null` for none.
pub(crate) type StateMap = BTreeMap<String, JsonValue>;

/// What a line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SnapshotKind {
    Before,
    After,
}

/// One line of the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotLine {
    kind: SnapshotKind,
    turn_id: String,
    recorded_at: String,
    states: StateMap,
}

/// Appends the snapshot of Turn `turn_id`: `before` first when the file
/// is empty, then `after`. The caller is the instance's single writer.
pub(crate) fn record_turn(
    paths: &InstancePaths,
    policy: SyncPolicy,
    turn_id: &str,
    before: &StateMap,
    after: &StateMap,
) -> Result<(), StoreError> {
    let path = paths.extension_snapshots_log();
    // A crash in the middle of an append left a fragment, which is cut
    // before anything is glued to it.
    repair_torn_tail(&path)?;
    let empty = std::fs::metadata(&path).map_or(true, |metadata| metadata.len() == 0);
    let mut bytes = Vec::new();
    let now = goondan_types::now_iso();
    let lines = [(SnapshotKind::Before, before), (SnapshotKind::After, after)];
    for (kind, states) in lines {
        if kind == SnapshotKind::Before && !empty {
            continue;
        }
        let line = SnapshotLine {
            kind,
            turn_id: turn_id.to_string(),
            recorded_at: now.clone(),
            states: states.clone(),
        };
        serde_json::to_writer(&mut bytes, &line)
            .map_err(|e| StoreError::encode("an extension state snapshot", e))?;
        bytes.push(b'\n');
    }
    let mut file = open_append(&path)?;
    file.write_all(&bytes)
        .map_err(|source| StoreError::io("appending to", &path, source))?;
    sync_file(&file, &path, policy.syncs_commits())
}

/// The extension state an instance had before the first change of any of
/// the Turns `later`: see the module docs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StateBefore {
    /// The states, by extension name (`null`: none); `None` when no later
    /// Turn changed anything, so the current files hold that state.
    pub(crate) states: Option<StateMap>,
    /// The bytes of the file that stay with that state: every line before
    /// the first one of a later Turn.
    pub(crate) keep_bytes: u64,
    /// The file's length (complete lines).
    pub(crate) len: u64,
}

/// Reads the file line by line (one line held at a time) to find the
/// state before the first change of a Turn in `later`.
pub(crate) fn state_before(
    paths: &InstancePaths,
    later: &HashSet<&str>,
) -> Result<StateBefore, StoreError> {
    let path = paths.extension_snapshots_log();
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(StateBefore {
                states: None,
                keep_bytes: 0,
                len: 0,
            })
        }
        Err(source) => return Err(StoreError::io("opening", path, source)),
    };
    let mut reader = std::io::BufReader::new(file);
    let mut offset = 0u64;
    let mut previous: Option<SnapshotLine> = None;
    let mut line = Vec::new();
    let mut line_number = 0;
    loop {
        line.clear();
        let n_read = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| StoreError::io("reading", &path, source))?;
        if n_read == 0 || line.last() != Some(&b'\n') {
            // The end, or a torn last line no Turn was acknowledged with.
            return Ok(StateBefore {
                states: None,
                keep_bytes: offset,
                len: offset,
            });
        }
        line_number += 1;
        let start = offset;
        offset += n_read as u64;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let parsed: SnapshotLine =
            serde_json::from_slice(&line).map_err(|error| StoreError::CorruptLog {
                path: path.clone(),
                line: line_number,
                reason: format!("not an extension state snapshot: {error}"),
            })?;
        if later.contains(parsed.turn_id.as_str()) {
            let states = match parsed.kind {
                SnapshotKind::Before => Some(parsed.states),
                SnapshotKind::After => previous.map(|previous| previous.states),
            };
            let Some(states) = states else {
                return Err(StoreError::CorruptLog {
                    path,
                    line: line_number,
                    reason: "the first snapshot is not a `before` line".to_string(),
                });
            };
            let len = offset + remaining_len(&mut reader, &path)?;
            return Ok(StateBefore {
                states: Some(states),
                keep_bytes: start,
                len,
            });
        }
        previous = Some(parsed);
    }
}

/// Bytes left in `reader` up to its last newline.
fn remaining_len(
    reader: &mut std::io::BufReader<std::fs::File>,
    path: &std::path::Path,
) -> Result<u64, StoreError> {
    let mut len = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n_read = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| StoreError::io("reading", path, source))?;
        if n_read == 0 || line.last() != Some(&b'\n') {
            return Ok(len);
        }
        len += n_read as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn states(value: JsonValue) -> StateMap {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_state_after_a_turn_is_the_one_before_the_next_change() {
        let dir = tempfile::tempdir().unwrap();
        let paths = InstancePaths::from_dir(dir.path());
        std::fs::create_dir_all(paths.extensions_dir()).unwrap();
        let none = states(json!({"memo": null}));
        let one = states(json!({"memo": {"n": 1}}));
        let three = states(json!({"memo": {"n": 3}}));
        // Turn a changed nothing; b set 1; c changed nothing; d set 3.
        record_turn(&paths, SyncPolicy::ProcessCrash, "b", &none, &one).unwrap();
        record_turn(&paths, SyncPolicy::ProcessCrash, "d", &one, &three).unwrap();
        let log = std::fs::read_to_string(paths.extension_snapshots_log()).unwrap();
        assert_eq!(
            log.lines().count(),
            3,
            "one `before`, then one line per change"
        );
        let after = |later: &[&str]| {
            let later: HashSet<&str> = later.iter().copied().collect();
            state_before(&paths, &later).unwrap()
        };
        assert_eq!(
            after(&["b", "c", "d"]).states,
            Some(none.clone()),
            "after a"
        );
        assert_eq!(after(&["b", "c", "d"]).keep_bytes, 0);
        assert_eq!(after(&["c", "d"]).states, Some(one.clone()), "after b");
        assert_eq!(after(&["d"]).states, Some(one), "after c");
        let latest = after(&[]);
        assert_eq!(latest.states, None, "after d: the files are the state");
        assert_eq!(latest.keep_bytes, log.len() as u64);
        let cut = after(&["d"]);
        assert_eq!(cut.len, log.len() as u64);
        assert_eq!(
            &log[..cut.keep_bytes as usize],
            log.lines()
                .take(2)
                .map(|l| format!("{l}\n"))
                .collect::<String>()
        );
    }
}
