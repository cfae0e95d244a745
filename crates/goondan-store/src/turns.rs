//! The Turns of an instance as its log holds them: where each one starts
//! and ends in `messages/base.jsonl`, what it was asked, and how it ended
//! and cost (from `messages/runtime-events.jsonl`). What `gdn instance
//! history` lists, and where fork and rewind cut.
//!
//! # How Turns are delimited
//!
//! A Turn starts at the user message that carries its input event: the
//! runtime marks it `metadata.__goondanInbound: true` with the event's
//! `eventId` (and, since Turns were given ids on their input,
//! `metadata.turnId`). Every message after it up to the next such message
//! belongs to the Turn, the results that close its dangling tool calls
//! included. Messages before the first input (none in a log the runtime
//! wrote itself) are a prelude that belongs to no Turn and stays with
//! every cut. A message a `turn` middleware appends before the chain
//! records the input therefore counts as the end of the Turn before; and
//! a Turn a compaction rewrote away is not listed: the history is what
//! the conversation holds now.
//!
//! Turn ids come from the input message's `metadata.turnId`; a log from
//! before that field is joined with the runtime events by trace id (the
//! k-th input of a trace is its k-th `turn.started`), which is exact for
//! the usual one Turn per trace. Outcome and cost come from the Turn's
//! `turn.completed` or `turn.failed`.
//!
//! # Bounds
//!
//! Both logs are read from their ends with [`crate::tail::scan_backwards`]
//! under one [`TailLimits`]: a reader serving a port passes a budget and
//! gets the newest Turns (their positions then unknown, `complete`
//! false); the CLI passes none and streams the whole files in blocks,
//! holding one summary per Turn, never the messages.

use crate::paths::InstancePaths;
use crate::tail::{scan_backwards, TailLimits, TailReport};
use crate::StoreError;
use goondan_types::{JsonValue, Message};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;
use std::path::Path;

/// The longest input text a [`TurnRecord`] keeps (its first line), in
/// characters.
pub const MAX_INPUT_CHARS: usize = 200;

/// How a Turn ended, as its runtime events say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "camelCase")]
pub enum TurnOutcome {
    /// `turn.completed`.
    Completed,
    /// `turn.failed`, for another reason than a cancel.
    #[serde(rename_all = "camelCase")]
    Failed {
        /// What went wrong.
        error_message: String,
    },
    /// `turn.failed` of a cancelled Turn.
    #[serde(rename_all = "camelCase")]
    Cancelled {
        /// Who cancelled it, when a person did (`cli`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cancelled_by: Option<String>,
    },
    /// No runtime event of the Turn was found (it still runs, its process
    /// died, or the runtime events are gone).
    Unknown,
}

/// One Turn of an instance's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnRecord {
    /// 1-based position in the log; `None` when a bounded read stopped
    /// before the log's start, so earlier Turns were not counted.
    pub index: Option<usize>,
    /// The Turn id: from its input message, else joined from the runtime
    /// events by trace id; `None` when neither knows it.
    pub turn_id: Option<String>,
    /// True when the input message itself names the Turn (the runtime
    /// writes `metadata.turnId` since per-Turn extension state snapshots
    /// exist: such a Turn's extension state can be restored exactly).
    pub id_recorded: bool,
    /// The id of the input event.
    pub event_id: Option<String>,
    /// The trace of the input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// When the input message was created (ISO 8601).
    pub created_at: Option<String>,
    /// The first line of the input text, cut to [`MAX_INPUT_CHARS`].
    pub input: String,
    /// Messages the Turn holds, its input included.
    pub n_messages: usize,
    /// Byte offset of its first line in the log.
    pub start: u64,
    /// Byte offset just past its last line: the log cut here ends with it.
    pub end: u64,
    /// How it ended.
    pub outcome: TurnOutcome,
    /// What its model calls cost in US dollars, when priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// The Turns of one log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnHistory {
    /// Oldest first.
    pub turns: Vec<TurnRecord>,
    /// True when the read reached the log's start: every Turn is listed
    /// and every `index` is known.
    pub complete: bool,
    /// Bytes before the first Turn (messages that belong to none).
    pub prelude_end: u64,
    /// Messages before the first Turn.
    pub n_prelude_messages: usize,
    /// The end of the log's last complete line.
    pub log_end: u64,
    /// Complete lines that carry the input mark but do not read as a
    /// message; they stay inside whichever Turn they fall in. (Other
    /// lines are not parsed at all, see [`delimit_turns`].)
    pub n_unreadable: usize,
    /// How the message log was read.
    pub tail: TailReport,
}

/// Which Turn an operator means: its 1-based position in the history, or
/// its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnRef {
    /// 1-based position.
    Index(usize),
    /// A Turn id (`turn_…`).
    Id(String),
}

impl TurnRef {
    /// Reads what an operator typed: digits are a position, anything else
    /// a Turn id.
    pub fn parse(text: &str) -> TurnRef {
        let text = text.trim();
        match text.parse::<usize>() {
            Ok(index) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => {
                TurnRef::Index(index)
            }
            _ => TurnRef::Id(text.to_string()),
        }
    }
}

impl std::fmt::Display for TurnRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnRef::Index(index) => write!(f, "{index}"),
            TurnRef::Id(id) => f.write_str(id),
        }
    }
}

impl TurnHistory {
    /// The Turn `turn` names, among those read.
    pub fn find(&self, turn: &TurnRef) -> Option<&TurnRecord> {
        match turn {
            TurnRef::Index(index) => self.turns.iter().find(|t| t.index == Some(*index)),
            TurnRef::Id(id) => self
                .turns
                .iter()
                .find(|t| t.turn_id.as_deref() == Some(id.as_str())),
        }
    }
}

/// The Turns of the instance in `paths` (its `base.jsonl`, joined with its
/// `runtime-events.jsonl`), within `limits` for each file.
pub fn read_turn_history(
    paths: &InstancePaths,
    limits: TailLimits,
) -> Result<TurnHistory, StoreError> {
    let mut history = delimit_turns(&paths.base_log(), limits)?;
    join_runtime_events(&mut history.turns, &paths.runtime_events_log(), limits)?;
    Ok(history)
}

/// The fields of a message line the delimiting needs; everything else is
/// skipped unparsed.
#[derive(Deserialize)]
struct MessageHead {
    #[serde(default, rename = "createdAt")]
    created_at: Option<String>,
    #[serde(default)]
    metadata: Option<HeadMetadata>,
}

#[derive(Deserialize)]
struct HeadMetadata {
    #[serde(default, rename = "__goondanInbound")]
    inbound: Option<JsonValue>,
    #[serde(default, rename = "eventId")]
    event_id: Option<JsonValue>,
    #[serde(default, rename = "turnId")]
    turn_id: Option<JsonValue>,
    #[serde(default, rename = "traceId")]
    trace_id: Option<JsonValue>,
}

/// The key of the input mark, as a line holds it; only a line holding it
/// is parsed.
const INBOUND_KEY: &[u8] = b"\"__goondanInbound\"";

/// The Turns of the message log at `path`, without outcomes and costs.
///
/// Only lines that hold the input mark's key are parsed (its head, and
/// its text); every other line is counted, not read, which keeps a
/// 10,000-message log's history (and so a fork) fast.
pub(crate) fn delimit_turns(path: &Path, limits: TailLimits) -> Result<TurnHistory, StoreError> {
    let mut newest_first: Vec<TurnRecord> = Vec::new();
    let mut n_unreadable = 0;
    // Where the Turn being assembled ends (the start of the one after it),
    // and how many of its messages were seen.
    let mut turn_end: Option<u64> = None;
    let mut log_end = 0;
    let mut n_in_turn = 0;
    let tail = scan_backwards(path, limits, |line| {
        if !line.terminated {
            // A line a writer is in the middle of is not part of the log
            // yet.
            return ControlFlow::Continue(());
        }
        let end = line.start + line.bytes.len() as u64 + 1;
        let current_end = *turn_end.get_or_insert_with(|| {
            log_end = end;
            end
        });
        if !contains(line.bytes, INBOUND_KEY) {
            n_in_turn += 1;
            return ControlFlow::Continue(());
        }
        let head = match serde_json::from_slice::<MessageHead>(line.bytes) {
            Ok(head) => head,
            Err(_) => {
                n_unreadable += 1;
                n_in_turn += 1;
                return ControlFlow::Continue(());
            }
        };
        let metadata = head.metadata.as_ref();
        let Some(event_id) = input_event_id(
            metadata.and_then(|m| m.inbound.as_ref()),
            metadata.and_then(|m| m.event_id.as_ref()),
        ) else {
            n_in_turn += 1;
            return ControlFlow::Continue(());
        };
        let text =
            |value: Option<&JsonValue>| value.and_then(JsonValue::as_str).map(str::to_string);
        let turn_id = text(metadata.and_then(|m| m.turn_id.as_ref()));
        newest_first.push(TurnRecord {
            index: None,
            id_recorded: turn_id.is_some(),
            turn_id,
            event_id: Some(event_id.to_string()),
            trace_id: text(metadata.and_then(|m| m.trace_id.as_ref())),
            created_at: head.created_at,
            input: input_text(line.bytes),
            n_messages: n_in_turn + 1,
            start: line.start,
            end: current_end,
            outcome: TurnOutcome::Unknown,
            cost_usd: None,
        });
        turn_end = Some(line.start);
        n_in_turn = 0;
        ControlFlow::Continue(())
    })?;
    let complete = tail.unread_bytes == 0 && !tail.budget_exhausted;
    newest_first.reverse();
    let mut turns = newest_first;
    if complete {
        for (position, turn) in turns.iter_mut().enumerate() {
            turn.index = Some(position + 1);
        }
    }
    Ok(TurnHistory {
        prelude_end: if complete {
            turns.first().map_or(log_end, |turn| turn.start)
        } else {
            0
        },
        n_prelude_messages: if complete { n_in_turn } else { 0 },
        turns,
        complete,
        log_end,
        n_unreadable,
        tail,
    })
}

/// True when `needle` (not empty) occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, _)) = needle.split_first() else {
        return true;
    };
    let mut rest = haystack;
    while let Some(at) = rest.iter().position(|&byte| byte == first) {
        if rest[at..].starts_with(needle) {
            return true;
        }
        rest = &rest[at + 1..];
    }
    false
}

/// The id of the input event a message carries when it is a Turn's input
/// (its `__goondanInbound` mark is `true` and it names its event): the
/// one rule both delimiters ([`delimit_turns`], [`turn_starts`]) follow.
fn input_event_id<'a>(
    inbound: Option<&JsonValue>,
    event_id: Option<&'a JsonValue>,
) -> Option<&'a str> {
    if inbound != Some(&JsonValue::Bool(true)) {
        return None;
    }
    event_id.and_then(JsonValue::as_str)
}

/// Where one Turn starts in a conversation held in memory, by the rule
/// [`delimit_turns`] follows in a file: what fork and rewind cut by when
/// the conversation is a cluster's log rather than `base.jsonl`.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnStart {
    /// The position of its input message; the Turn runs to the next
    /// Turn's start (or the conversation's end).
    pub at: usize,
    /// The Turn's id, when its input message records it.
    pub turn_id: Option<String>,
    /// The id of its input event.
    pub event_id: String,
    /// When its input message was created (ISO 8601).
    pub created_at: String,
    /// The first line of its input text, cut to [`MAX_INPUT_CHARS`].
    pub input: String,
}

/// The Turns of `messages`, oldest first.
pub fn turn_starts(messages: &[Message]) -> Vec<TurnStart> {
    messages
        .iter()
        .enumerate()
        .filter_map(|(at, message)| {
            let event_id = input_event_id(
                message.metadata.get("__goondanInbound"),
                message.metadata.get("eventId"),
            )?;
            Some(TurnStart {
                at,
                turn_id: message
                    .metadata
                    .get("turnId")
                    .and_then(JsonValue::as_str)
                    .map(str::to_string),
                event_id: event_id.to_string(),
                created_at: message.created_at.clone(),
                input: first_line(&message.data.text()),
            })
        })
        .collect()
}

/// The first line of an input message's text, cut to
/// [`MAX_INPUT_CHARS`]; parsed in full only for input messages.
fn input_text(line: &[u8]) -> String {
    let Ok(message) = serde_json::from_slice::<Message>(line) else {
        return String::new();
    };
    first_line(&message.data.text())
}

/// The first line of `text`, cut to [`MAX_INPUT_CHARS`].
fn first_line(text: &str) -> String {
    let first = text.lines().next().unwrap_or_default();
    if first.chars().count() <= MAX_INPUT_CHARS {
        first.to_string()
    } else {
        let mut cut: String = first.chars().take(MAX_INPUT_CHARS - 1).collect();
        cut.push('…');
        cut
    }
}

/// The fields of a `turn.*` runtime event the join reads (the event's
/// whole type, `goondan_types::RuntimeEvent`, costs several times more to
/// parse).
#[derive(Deserialize)]
struct TurnEventHead {
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "turnId")]
    turn_id: String,
    #[serde(default, rename = "traceId")]
    trace_id: String,
    #[serde(default, rename = "costUsd")]
    cost_usd: Option<f64>,
    #[serde(default, rename = "errorMessage")]
    error_message: Option<String>,
    #[serde(default, rename = "cancelledBy")]
    cancelled_by: Option<String>,
}

/// Gives `turns` (oldest first) their ids, outcomes and costs from the
/// runtime event log at `path`.
pub(crate) fn join_runtime_events(
    turns: &mut [TurnRecord],
    path: &Path,
    limits: TailLimits,
) -> Result<(), StoreError> {
    // Newest first from the scan; only `turn.*` lines are parsed, and only
    // the fields used here (a Step's or a tool call's line names its Turn
    // as `"turn_…"`, never `"turn.`).
    let mut newest_first: Vec<TurnEventHead> = Vec::new();
    scan_backwards(path, limits, |line| {
        if line.terminated && contains(line.bytes, b"\"turn.") {
            if let Ok(event) = serde_json::from_slice::<TurnEventHead>(line.bytes) {
                newest_first.push(event);
            }
        }
        ControlFlow::Continue(())
    })?;
    let mut ends: HashMap<String, (TurnOutcome, Option<f64>)> = HashMap::new();
    let mut started_by_trace: HashMap<String, VecDeque<String>> = HashMap::new();
    for event in newest_first.into_iter().rev() {
        match event.kind.as_str() {
            "turn.started" => started_by_trace
                .entry(event.trace_id)
                .or_default()
                .push_back(event.turn_id),
            "turn.completed" => {
                ends.insert(event.turn_id, (TurnOutcome::Completed, event.cost_usd));
            }
            "turn.failed" => {
                let error_message = event.error_message.unwrap_or_default();
                let cancelled = event.cancelled_by.is_some()
                    || error_message.starts_with("the turn was cancelled");
                let outcome = if cancelled {
                    TurnOutcome::Cancelled {
                        cancelled_by: event.cancelled_by,
                    }
                } else {
                    TurnOutcome::Failed { error_message }
                };
                ends.insert(event.turn_id, (outcome, None));
            }
            _ => {}
        }
    }
    // Ids the input messages record are taken out of their traces first,
    // so a Turn without one is not joined to a Turn that has it.
    for turn in turns.iter() {
        if let (Some(turn_id), Some(trace_id)) = (&turn.turn_id, &turn.trace_id) {
            if let Some(started) = started_by_trace.get_mut(trace_id) {
                started.retain(|id| id != turn_id);
            }
        }
    }
    for turn in turns.iter_mut() {
        if turn.turn_id.is_none() {
            turn.turn_id = turn
                .trace_id
                .as_ref()
                .and_then(|trace_id| started_by_trace.get_mut(trace_id)?.pop_front());
        }
        if let Some((outcome, cost_usd)) = turn.turn_id.as_ref().and_then(|id| ends.get(id)) {
            turn.outcome = outcome.clone();
            turn.cost_usd = *cost_usd;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::{MessageSource, ModelMessage};

    /// The metadata key the runtime marks an input message with.
    const INBOUND_MARK: &str = "__goondanInbound";

    fn inbound(text: &str, event_id: &str, turn_id: Option<&str>) -> Message {
        let mut message = Message::new(ModelMessage::user(text), MessageSource::User);
        message
            .metadata
            .insert(INBOUND_MARK.into(), JsonValue::Bool(true));
        message.metadata.insert("eventId".into(), event_id.into());
        message.metadata.insert("traceId".into(), "trace-1".into());
        if let Some(turn_id) = turn_id {
            message.metadata.insert("turnId".into(), turn_id.into());
        }
        message
    }

    fn answer(text: &str) -> Message {
        Message::new(
            ModelMessage::assistant(vec![goondan_types::ContentPart::text(text)]),
            MessageSource::Assistant {
                step_id: "s".into(),
            },
        )
    }

    fn write_log(dir: &Path, messages: &[Message]) -> std::path::PathBuf {
        let path = dir.join("base.jsonl");
        std::fs::write(&path, crate::encode_messages(messages).unwrap()).unwrap();
        path
    }

    #[test]
    fn turns_in_memory_start_where_the_file_delimiter_starts_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut unmarked = inbound("not an input", "evt_x", None);
        unmarked
            .metadata
            .insert(INBOUND_MARK.into(), JsonValue::String("true".into()));
        let messages = [
            Message::new(ModelMessage::user("prelude"), MessageSource::System),
            inbound("first\nsecond line", "evt_1", Some("turn_a")),
            answer("one"),
            unmarked,
            inbound("again", "evt_2", None),
            answer("two"),
        ];
        let starts = turn_starts(&messages);
        let summary: Vec<_> = starts
            .iter()
            .map(|s| {
                (
                    s.at,
                    s.turn_id.as_deref(),
                    s.event_id.as_str(),
                    s.input.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (1, Some("turn_a"), "evt_1", "first"),
                (4, None, "evt_2", "again")
            ]
        );
        let history =
            delimit_turns(&write_log(dir.path(), &messages), TailLimits::default()).unwrap();
        let from_file: Vec<_> = history.turns.iter().map(|t| t.event_id.clone()).collect();
        let in_memory: Vec<_> = starts.iter().map(|s| Some(s.event_id.clone())).collect();
        assert_eq!(from_file, in_memory);
        assert_eq!(history.n_prelude_messages, starts[0].at);
    }

    #[test]
    fn turns_start_at_inputs_and_their_bytes_tile_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let system = Message::new(ModelMessage::user("prelude"), MessageSource::System);
        let path = write_log(
            dir.path(),
            &[
                system,
                inbound("first\nsecond line", "evt_1", Some("turn_a")),
                answer("one"),
                inbound("again", "evt_2", Some("turn_b")),
                answer("two"),
                answer("three"),
            ],
        );
        let history = delimit_turns(&path, TailLimits::default()).unwrap();
        assert!(history.complete);
        let summary: Vec<_> = history
            .turns
            .iter()
            .map(|t| {
                (
                    t.index,
                    t.turn_id.as_deref(),
                    t.input.as_str(),
                    t.n_messages,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                (Some(1), Some("turn_a"), "first", 2),
                (Some(2), Some("turn_b"), "again", 3)
            ]
        );
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(history.prelude_end, history.turns[0].start);
        assert_eq!(history.turns[0].end, history.turns[1].start);
        assert_eq!(history.turns[1].end, len);
        assert_eq!(history.log_end, len);
        assert_eq!(
            history.find(&TurnRef::parse("turn_b")).unwrap().index,
            Some(2)
        );
        assert_eq!(
            history
                .find(&TurnRef::parse("1"))
                .unwrap()
                .turn_id
                .as_deref(),
            Some("turn_a")
        );
        assert!(history.find(&TurnRef::parse("3")).is_none());
    }

    #[test]
    fn a_torn_last_line_is_not_part_of_any_turn_and_a_budget_leaves_positions_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let messages: Vec<Message> = (0..200)
            .flat_map(|n| {
                [
                    inbound(&format!("question {n}"), &format!("evt_{n}"), None),
                    answer(&"x".repeat(500)),
                ]
            })
            .collect();
        let path = write_log(dir.path(), &messages);
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, b"{\"id\":\"torn").unwrap();
        let history = delimit_turns(&path, TailLimits::default()).unwrap();
        assert_eq!(history.turns.len(), 200);
        assert_eq!(history.turns.last().unwrap().end, whole);
        let bounded = delimit_turns(
            &path,
            TailLimits {
                max_read_bytes: 10_000,
                max_line_bytes: 10_000,
            },
        )
        .unwrap();
        assert!(!bounded.complete);
        assert!(!bounded.turns.is_empty() && bounded.turns.len() < 200);
        assert!(bounded.turns.iter().all(|t| t.index.is_none()));
        assert_eq!(bounded.turns.last().unwrap().input, "question 199");
    }

    #[test]
    fn old_turns_get_their_ids_and_costs_from_the_runtime_events_by_trace() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_log(
            dir.path(),
            &[
                inbound("a", "evt_1", None),
                answer("one"),
                inbound("b", "evt_2", Some("turn_new")),
            ],
        );
        let mut history = delimit_turns(&path, TailLimits::default()).unwrap();
        let events = dir.path().join("runtime-events.jsonl");
        let base = |turn: &str| {
            serde_json::json!({"timestamp": "2026-01-01T00:00:00.000Z", "agentName": "a",
                "instanceKey": "k", "traceId": "trace-1", "spanId": "s", "turnId": turn})
        };
        let mut lines = String::new();
        for (kind, turn, extra) in [
            ("turn.started", "turn_old", serde_json::json!({})),
            (
                "turn.completed",
                "turn_old",
                serde_json::json!({"stepCount": 1, "duration": 1, "costUsd": 0.25}),
            ),
            ("turn.started", "turn_new", serde_json::json!({})),
            (
                "turn.failed",
                "turn_new",
                serde_json::json!({"duration": 1, "errorMessage": "the turn was cancelled by an operator (cli) before it finished", "cancelledBy": "cli"}),
            ),
        ] {
            let mut value = base(turn);
            value["type"] = kind.into();
            value
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            lines.push_str(&format!("{value}\n"));
        }
        std::fs::write(&events, lines).unwrap();
        join_runtime_events(&mut history.turns, &events, TailLimits::default()).unwrap();
        assert_eq!(history.turns[0].turn_id.as_deref(), Some("turn_old"));
        assert!(!history.turns[0].id_recorded);
        assert_eq!(history.turns[0].outcome, TurnOutcome::Completed);
        assert_eq!(history.turns[0].cost_usd, Some(0.25));
        assert_eq!(
            history.turns[1].outcome,
            TurnOutcome::Cancelled {
                cancelled_by: Some("cli".into())
            }
        );
    }

    #[test]
    fn a_turn_is_named_by_digits_or_by_its_id() {
        assert_eq!(TurnRef::parse("3"), TurnRef::Index(3));
        assert_eq!(TurnRef::parse(" 12 "), TurnRef::Index(12));
        assert_eq!(TurnRef::parse("turn_ab"), TurnRef::Id("turn_ab".into()));
        assert_eq!(TurnRef::parse("-1"), TurnRef::Id("-1".into()));
        assert_eq!(TurnRef::parse("+1"), TurnRef::Id("+1".into()));
    }
}
