//! Record and replay: any model can append its exchanges to a cassette
//! (JSON lines, one `{"request", "response"}` per call), and the `replay`
//! provider answers from such a file without a network.
//!
//! Matching compares a normalized request (see [`normalize`]): the model,
//! the messages, the tools and the params, with tool-call ids and every id
//! the runtime generates (event, correlation, message, trace ids, UUIDs)
//! renumbered in order of appearance, timestamps and measured durations
//! blanked and `providerOptions` left out, so what a provider, the runtime
//! or the clock made up never breaks a replay. A replayed response is the recorded one,
//! tool-call ids included, so the conversation that follows carries the
//! same ids the recording did.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::request::{ModelRequest, ModelResponse};
use crate::{Model, StreamObserver};
use futures_util::future::BoxFuture;
use goondan_types::JsonValue;
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// One line of a cassette.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CassetteEntry {
    /// What the runtime asked, as it asked it.
    pub request: ModelRequest,
    /// What the model answered.
    pub response: ModelResponse,
}

/// Wraps a model and appends every successful exchange to a cassette.
pub(crate) struct Recorder {
    inner: Arc<dyn Model>,
    path: PathBuf,
    file: Mutex<File>,
}

impl Recorder {
    /// Opens (creating if needed) the cassette for appending.
    pub(crate) fn open(inner: Arc<dyn Model>, path: &Path) -> Result<Self, ModelError> {
        let failure = |error: std::io::Error| ModelError::Cassette {
            cassette: path.display().to_string(),
            message: format!("cannot open it for recording: {error}"),
        };
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent).map_err(failure)?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(failure)?;
        Ok(Recorder {
            inner,
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    fn append(&self, entry: &CassetteEntry) -> Result<(), ModelError> {
        let mut line = serde_json::to_vec(entry).map_err(|error| ModelError::Cassette {
            cassette: self.path.display().to_string(),
            message: format!("cannot serialize an exchange: {error}"),
        })?;
        line.push(b'\n');
        // One write per line keeps lines whole even when several agent
        // processes record into the same file (O_APPEND).
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        file.write_all(&line).map_err(|error| ModelError::Cassette {
            cassette: self.path.display().to_string(),
            message: format!("cannot append an exchange: {error}"),
        })
    }
}

impl Model for Recorder {
    fn generate<'a>(
        &'a self,
        request: ModelRequest,
        observer: &'a dyn StreamObserver,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let recorded_request = request.clone();
            let response = self.inner.generate(request, observer).await?;
            self.append(&CassetteEntry {
                request: recorded_request,
                response: response.clone(),
            })?;
            Ok(response)
        })
    }
}

struct Recording {
    key: JsonValue,
    response: ModelResponse,
    line: usize,
}

/// Answers from a cassette.
pub(crate) struct ReplayModel {
    cassette: PathBuf,
    recordings: Vec<Recording>,
    used: Mutex<Vec<bool>>,
}

impl ReplayModel {
    /// Reads the cassette named by `options.cassette`.
    pub(crate) fn load(config: &ModelConfig) -> Result<Self, ModelError> {
        let Some(JsonValue::String(name)) = config.options.get("cassette") else {
            return Err(ModelError::Config {
                message: format!(
                    "Model/{}: the replay provider needs spec.options.cassette (a path)",
                    config.name
                ),
                suggestion: Some("for example options: { cassette: cassettes/demo.jsonl }".into()),
            });
        };
        let cassette = config.resolve_path(name);
        let text = std::fs::read_to_string(&cassette).map_err(|error| ModelError::Cassette {
            cassette: cassette.display().to_string(),
            message: format!("cannot read it: {error}"),
        })?;
        let mut recordings = Vec::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry: CassetteEntry =
                serde_json::from_str(line).map_err(|error| ModelError::Cassette {
                    cassette: cassette.display().to_string(),
                    message: format!("line {}: {error}", index + 1),
                })?;
            recordings.push(Recording {
                key: normalize(&entry.request),
                response: entry.response,
                line: index + 1,
            });
        }
        let used = Mutex::new(vec![false; recordings.len()]);
        Ok(ReplayModel {
            cassette,
            recordings,
            used,
        })
    }

    fn answer(&self, request: &ModelRequest) -> Result<ModelResponse, ModelError> {
        let key = normalize(request);
        let matching: Vec<usize> = self
            .recordings
            .iter()
            .enumerate()
            .filter(|(_, recording)| recording.key == key)
            .map(|(index, _)| index)
            .collect();
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // Identical requests get their recordings in recorded order; once
        // those are spent the last one repeats, so a replay never fails on
        // a retry the recording did not have.
        let chosen = matching
            .iter()
            .copied()
            .find(|index| !used[*index])
            .or_else(|| matching.last().copied());
        if let Some(index) = chosen {
            used[index] = true;
            return Ok(self.recordings[index].response.clone());
        }
        Err(ModelError::ReplayMiss {
            cassette: self.cassette.display().to_string(),
            diff: self.describe_miss(&key),
        })
    }

    fn describe_miss(&self, key: &JsonValue) -> String {
        let nearest = self
            .recordings
            .iter()
            .map(|recording| {
                let mut differences = Vec::new();
                diff_json("", &recording.key, key, &mut differences, usize::MAX);
                (differences.len(), recording)
            })
            .min_by_key(|(n_differences, _)| *n_differences);
        let Some((_, recording)) = nearest else {
            return "the cassette holds no recordings".into();
        };
        let mut differences = Vec::new();
        diff_json("", &recording.key, key, &mut differences, 8);
        format!(
            "nearest recording is line {} of {}; differences (recorded vs. requested):\n  {}",
            recording.line,
            self.recordings.len(),
            differences.join("\n  ")
        )
    }
}

impl Model for ReplayModel {
    fn generate<'a>(
        &'a self,
        request: ModelRequest,
        observer: &'a dyn StreamObserver,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move {
            let response = self.answer(&request)?;
            let text = response.text();
            if !text.is_empty() {
                observer.on_text_delta(&text);
            }
            Ok(response)
        })
    }
}

/// The request as replay matching sees it.
///
/// - Plain-string message content becomes one text part, so both spellings
///   of the same message match.
/// - `providerOptions` are dropped: they hold signatures and cache hints
///   that vary between runs without changing the conversation.
/// - Every tool-call id is replaced by `call_1`, `call_2`, ... in order of
///   first appearance, in calls and results alike, so random ids match
///   while the pairing of calls and results is still checked.
/// - Inside every string of the messages (text, tool inputs and results,
///   system prompts), generated values are replaced: RFC 3339 timestamps
///   by `<time>`; UUIDs and runs of 12 or more lowercase hex digits mixing
///   digits and letters (the random part of `evt_…`, `corr_evt_…`,
///   `msg_…`, trace and span ids) by `<id1>`, `<id2>`, ... in order of
///   first appearance. The same id always gets the same number, so an
///   event id and the correlation id built from it still agree. The price:
///   two requests that differ only in such a value (say, which commit hash
///   a user quoted) look the same to replay.
/// - Measured durations are blanked to `"<duration>"`: the number under a
///   key of [`MEASURED_DURATION_KEYS`] in a structured value, and the same
///   `"key": number` pair inside a string (a tool result given as JSON
///   text). A tool's timing (`bash`'s `durationMs`, `wait`'s `waitedMs`) is
///   the clock's, not the model's input in substance; a limit the model or
///   a user chose (`timeoutMs`) is not in the list and still matches
///   exactly.
pub fn normalize(request: &ModelRequest) -> JsonValue {
    let mut value = serde_json::to_value(request).unwrap_or(JsonValue::Null);
    let mut ids = Renumbering::default();
    if let Some(messages) = value.get_mut("messages").and_then(JsonValue::as_array_mut) {
        for message in messages {
            if let Some(JsonValue::String(text)) = message.get("content") {
                let parts = serde_json::json!([{"type": "text", "text": text}]);
                let is_system = message.get("role").and_then(JsonValue::as_str) == Some("system");
                if !is_system {
                    message["content"] = parts;
                }
            }
            strip_and_renumber(message, &mut ids);
        }
    }
    value
}

/// Keys whose number is a measured duration, blanked by [`normalize`].
pub const MEASURED_DURATION_KEYS: &[&str] = &[
    "durationMs",
    "elapsedMs",
    "latencyMs",
    "waitedMs",
    "turnMs",
    "wallMs",
];

/// What a measured duration reads as after [`normalize`].
const BLANK_DURATION: &str = "<duration>";

/// The canonical names given so far, per kind of id.
#[derive(Default)]
struct Renumbering {
    tool_calls: HashMap<String, String>,
    generated: HashMap<String, String>,
}

impl Renumbering {
    fn tool_call(&mut self, id: &str) -> String {
        let next = self.tool_calls.len() + 1;
        self.tool_calls
            .entry(id.to_string())
            .or_insert_with(|| format!("call_{next}"))
            .clone()
    }

    fn generated(&mut self, id: &str) -> String {
        let next = self.generated.len() + 1;
        self.generated
            .entry(id.to_string())
            .or_insert_with(|| format!("<id{next}>"))
            .clone()
    }

    /// `text` with its timestamps and generated ids replaced.
    fn text(&mut self, text: &str) -> String {
        let patterns = generated_patterns();
        let text = patterns.timestamp.replace_all(text, "<time>");
        let text = patterns
            .measured_duration
            .replace_all(&text, |found: &regex::Captures<'_>| {
                format!("\"{}\":\"{BLANK_DURATION}\"", &found[1])
            });
        let text = patterns
            .uuid
            .replace_all(&text, |found: &regex::Captures<'_>| {
                self.generated(&found[0].to_ascii_lowercase())
            });
        patterns
            .alphanumeric_run
            .replace_all(&text, |found: &regex::Captures<'_>| {
                let run = &found[0];
                if looks_generated(run) {
                    self.generated(run)
                } else {
                    run.to_string()
                }
            })
            .into_owned()
    }
}

/// True for a random hex id: 12 or more lowercase hex digits with at least
/// one digit and one letter, so words (`deadbeefcafe` aside) and plain
/// numbers stay as written.
fn looks_generated(run: &str) -> bool {
    run.len() >= 12
        && run
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        && run.bytes().any(|byte| byte.is_ascii_digit())
        && run.bytes().any(|byte| byte.is_ascii_alphabetic())
}

struct GeneratedPatterns {
    timestamp: Regex,
    measured_duration: Regex,
    uuid: Regex,
    alphanumeric_run: Regex,
}

fn generated_patterns() -> &'static GeneratedPatterns {
    static PATTERNS: OnceLock<GeneratedPatterns> = OnceLock::new();
    PATTERNS.get_or_init(|| GeneratedPatterns {
        timestamp: Regex::new(
            r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:?\d{2})?",
        )
        .expect("the timestamp pattern is valid"),
        measured_duration: Regex::new(&format!(
            r#""({})"\s*:\s*-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"#,
            MEASURED_DURATION_KEYS.join("|")
        ))
        .expect("the duration pattern is valid"),
        uuid: Regex::new(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
        )
        .expect("the UUID pattern is valid"),
        // `_` and `-` split runs, so `evt_<hex>` keeps its prefix.
        alphanumeric_run: Regex::new(r"[0-9A-Za-z]+").expect("the run pattern is valid"),
    })
}

fn strip_and_renumber(value: &mut JsonValue, ids: &mut Renumbering) {
    match value {
        JsonValue::Object(object) => {
            object.remove("providerOptions");
            if let Some(JsonValue::String(id)) = object.get("toolCallId") {
                let canonical = ids.tool_call(id);
                object.insert("toolCallId".into(), JsonValue::String(canonical));
            }
            for key in MEASURED_DURATION_KEYS {
                if let Some(value @ JsonValue::Number(_)) = object.get_mut(*key) {
                    *value = JsonValue::String(BLANK_DURATION.into());
                }
            }
            for (_, child) in object.iter_mut() {
                strip_and_renumber(child, ids);
            }
        }
        JsonValue::Array(items) => {
            for item in items {
                strip_and_renumber(item, ids);
            }
        }
        JsonValue::String(text) => *text = ids.text(text),
        JsonValue::Null | JsonValue::Bool(_) | JsonValue::Number(_) => {}
    }
}

/// Lists where `requested` differs from `recorded`, as `path: recorded X,
/// requested Y` lines, at most `limit`.
pub(crate) fn diff_json(
    path: &str,
    recorded: &JsonValue,
    requested: &JsonValue,
    out: &mut Vec<String>,
    limit: usize,
) {
    if out.len() >= limit || recorded == requested {
        return;
    }
    let child = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match (recorded, requested) {
        (JsonValue::Object(left), JsonValue::Object(right)) => {
            let mut keys: Vec<&String> = left.keys().collect();
            keys.extend(right.keys().filter(|key| !left.contains_key(*key)));
            for key in keys {
                match (left.get(key), right.get(key)) {
                    (Some(a), Some(b)) => diff_json(&child(key), a, b, out, limit),
                    (Some(a), None) => push(
                        out,
                        limit,
                        format!("{}: recorded {}, requested nothing", child(key), preview(a)),
                    ),
                    (None, Some(b)) => push(
                        out,
                        limit,
                        format!("{}: recorded nothing, requested {}", child(key), preview(b)),
                    ),
                    (None, None) => {}
                }
            }
        }
        (JsonValue::Array(left), JsonValue::Array(right)) => {
            for (index, (a, b)) in left.iter().zip(right.iter()).enumerate() {
                diff_json(&format!("{path}[{index}]"), a, b, out, limit);
            }
            for (index, extra) in left.iter().enumerate().skip(right.len()) {
                push(
                    out,
                    limit,
                    format!(
                        "{path}[{index}]: recorded {}, requested nothing",
                        preview(extra)
                    ),
                );
            }
            for (index, extra) in right.iter().enumerate().skip(left.len()) {
                push(
                    out,
                    limit,
                    format!(
                        "{path}[{index}]: recorded nothing, requested {}",
                        preview(extra)
                    ),
                );
            }
        }
        _ => push(
            out,
            limit,
            format!(
                "{path}: recorded {}, requested {}",
                preview(recorded),
                preview(requested)
            ),
        ),
    }
}

fn push(out: &mut Vec<String>, limit: usize, line: String) {
    if out.len() < limit {
        out.push(line);
    }
}

fn preview(value: &JsonValue) -> String {
    let text = value.to_string();
    if text.chars().count() > 400 {
        format!("{}...", text.chars().take(400).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::ModelParams;
    use goondan_types::{ContentPart, ModelMessage, ToolResultOutput};
    use serde_json::json;

    fn request(call_id: &str, text: &str) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            messages: vec![
                ModelMessage::user(text),
                ModelMessage::assistant(vec![ContentPart::tool_call(call_id, "a__b", json!({}))]),
                ModelMessage::tool(vec![ContentPart::tool_result(
                    call_id,
                    "a__b",
                    ToolResultOutput::Text("ok".into()),
                )]),
            ],
            tools: vec![],
            params: ModelParams::default(),
        }
    }

    #[test]
    fn random_ids_and_content_spelling_do_not_matter() {
        let mut spelled_as_parts = request("call_XYZ", "hi");
        spelled_as_parts.messages[0] = ModelMessage::User {
            content: goondan_types::MessageContent::Parts(vec![ContentPart::text("hi")]),
            provider_options: Some(json!({"anthropic": {"cacheControl": {"type": "ephemeral"}}})),
        };
        assert_eq!(
            normalize(&request("toolu_1", "hi")),
            normalize(&spelled_as_parts)
        );
        assert_ne!(
            normalize(&request("toolu_1", "hi")),
            normalize(&request("toolu_1", "ho"))
        );
    }

    /// A delegation's second step as the runtime builds it: the provider's
    /// tool-call id, and a tool result with the event and correlation ids
    /// and a system prompt with the inbound context of this run.
    fn delegation(call_id: &str, event_hex: &str, created_at: &str, trace: &str) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            messages: vec![
                ModelMessage::system(format!(
                    "[runtime_inbound]\neventId=evt_{event_hex}\ncreatedAt={created_at}\ntraceId={trace}"
                )),
                ModelMessage::user("tides"),
                ModelMessage::assistant(vec![ContentPart::tool_call(
                    call_id,
                    "agents__request",
                    json!({"target": "researcher", "input": "tides"}),
                )]),
                ModelMessage::tool(vec![ContentPart::tool_result(
                    call_id,
                    "agents__request",
                    ToolResultOutput::Json(json!({
                        "target": "researcher:default",
                        "eventId": format!("evt_{event_hex}"),
                        "correlationId": format!("corr_evt_{event_hex}"),
                        "response": "facts about tides",
                    })),
                )]),
            ],
            tools: vec![],
            params: ModelParams::default(),
        }
    }

    #[test]
    fn generated_ids_and_timestamps_do_not_matter_but_their_pairing_does() {
        let recorded = normalize(&delegation(
            "call_mock_1",
            "b36649bde376c10e1978ceed",
            "2026-11-24T06:05:08.123Z",
            "0af7651916cd43dd8448eb211c80319c",
        ));
        let replayed = normalize(&delegation(
            "call_9f8e7d6c5b4a_1",
            "0123456789abcdef01234567",
            "2027-01-02T03:04:05+09:00",
            "4bf92f3577b34da6a3ce929d0e0e4736",
        ));
        assert_eq!(recorded, replayed);
        assert_eq!(
            recorded["messages"][3]["content"][0]["output"]["value"]["correlationId"],
            "corr_evt_<id1>"
        );

        // The correlation id no longer names the request's event.
        let mut unpaired = delegation("c", "0123456789abcdef01234567", "2026-11-24T06:05:08Z", "x");
        let ModelMessage::Tool { content, .. } = &mut unpaired.messages[3] else {
            unreachable!("message 3 is the tool result");
        };
        let ContentPart::ToolResult { output, .. } = &mut content[0] else {
            unreachable!("the tool result part");
        };
        *output = ToolResultOutput::Json(json!({
            "target": "researcher:default",
            "eventId": "evt_0123456789abcdef01234567",
            "correlationId": "corr_evt_fedcba9876543210fedcba98",
            "response": "facts about tides",
        }));
        assert_ne!(normalize(&unpaired)["messages"][3], replayed["messages"][3]);
    }

    #[test]
    fn only_generated_looking_values_are_rewritten() {
        let cases = [
            ("evt_b36649bde376c10e1978ceed", "evt_<id1>"),
            (
                "msg_0123456789abcdef01234567 and again msg_0123456789abcdef01234567",
                "msg_<id1> and again msg_<id1>",
            ),
            ("6f1c1a52-8d0e-4b7e-9a3c-2f3b1e0d9c8a", "<id1>"),
            ("at 2026-11-24T06:05:08Z", "at <time>"),
            ("at 2026-11-24 06:05:08.5+0900", "at <time>"),
            (
                "order 123456789012345 please",
                "order 123456789012345 please",
            ),
            ("deadbeefcafebabe is a word", "deadbeefcafebabe is a word"),
            ("short 1a2b3c", "short 1a2b3c"),
            ("2026-11-24 is a date", "2026-11-24 is a date"),
        ];
        for (text, expected) in cases {
            assert_eq!(Renumbering::default().text(text), expected, "{text}");
        }
    }

    #[test]
    fn measured_durations_do_not_matter_but_chosen_limits_do() {
        let with_output = |output: ToolResultOutput| {
            let mut request = request("c", "run it");
            let ModelMessage::Tool { content, .. } = &mut request.messages[2] else {
                unreachable!("message 2 is the tool result");
            };
            let ContentPart::ToolResult { output: slot, .. } = &mut content[0] else {
                unreachable!("the tool result part");
            };
            *slot = output;
            normalize(&request)
        };
        let structured = |duration: u64, timeout: u64| {
            with_output(ToolResultOutput::Json(json!({
                "exitCode": 0, "stdout": "hi\n", "durationMs": duration,
                "nested": {"waitedMs": duration * 2}, "timeoutMs": timeout,
            })))
        };
        assert_eq!(structured(3, 5000), structured(7, 5000));
        assert_eq!(
            structured(3, 5000)["messages"][2]["content"][0]["output"]["value"]["durationMs"],
            "<duration>"
        );
        assert_ne!(structured(3, 5000), structured(3, 6000));
        let text = |duration: &str| {
            with_output(ToolResultOutput::Text(format!(
                r#"{{"exitCode":0,"durationMs": {duration},"timeoutMs":5000}}"#
            )))
        };
        assert_eq!(text("3"), text("12.5"));
        assert_eq!(
            text("3")["messages"][2]["content"][0]["output"]["value"],
            r#"{"exitCode":0,"durationMs":"<duration>","timeoutMs":5000}"#
        );
        // A word that merely contains a key's name is left alone.
        assert_eq!(
            Renumbering::default().text("durationMs: 3 in prose"),
            "durationMs: 3 in prose"
        );
    }

    #[test]
    fn diff_names_paths() {
        let mut out = Vec::new();
        diff_json(
            "",
            &normalize(&request("a", "hi")),
            &normalize(&request("b", "ho")),
            &mut out,
            8,
        );
        assert_eq!(
            out,
            vec![r#"messages[0].content[0].text: recorded "hi", requested "ho""#.to_string()]
        );
    }
}
