//! An operator's edit of a stopped instance: one message's text
//! ([`InstanceStore::edit_message`]) or one extension's state
//! ([`InstanceStore::edit_extension_state`]), after which the next input
//! runs on what was edited (issue 49 #6).
//!
//! An edit works as a fork or a rewind does (see `crate::fork_rewind`):
//! under the single-writer lock, after the journal's crash recovery, and
//! refused while an interrupted Turn's events are pending (its Turn
//! resumes at the next start, on the history as it was).
//!
//! # Nothing is lost
//!
//! Before anything changes, the edit writes its record to
//! `edits/<editId>.json` ([`EditRecord`]: who, when, what it was before
//! and after), atomically. A message is then replaced through the
//! journal's own commit (a `replace` event folded by the crash-safe
//! rewrite), keeping its id, place and metadata, plus an
//! `__goondanEdit` entry naming the record. An extension state file is
//! replaced atomically. A crash between the record and the change leaves
//! the record of an edit that did not happen, never a half-written log.

use crate::durability::{create_dir_all, write_file_atomically};
use crate::fork_rewind::Recovery;
use crate::instance::InstanceStore;
use crate::journal::FileJournal;
use crate::paths::InstancePaths;
use crate::{StoreError, TurnJournal};
use goondan_types::{
    ContentPart, JsonObject, JsonValue, Message, MessageContent, MessageEvent, ModelMessage,
    RoutingKey, ToolResultOutput,
};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The metadata key an edited message carries: `{id, by, at}` of its
/// latest edit.
pub const EDIT_METADATA_KEY: &str = "__goondanEdit";

/// What an edit changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum EditTarget {
    /// One message of the conversation.
    #[serde(rename_all = "camelCase")]
    Message {
        /// The message's id (kept by the edit).
        message_id: String,
    },
    /// One extension's state file.
    #[serde(rename_all = "camelCase")]
    ExtensionState {
        /// The extension's name.
        extension: String,
    },
}

/// `edits/<editId>.json`: one edit, as it was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EditRecord {
    /// The edit's id (its file name).
    pub id: String,
    /// When it was made (ISO 8601).
    pub edited_at: String,
    /// Who made it (`cli:uid-…`, `studio:<addr>`).
    pub by: String,
    /// The agent.
    pub agent_name: String,
    /// The instance.
    pub instance_key: String,
    /// What it changed.
    #[serde(flatten)]
    pub target: EditTarget,
    /// The message or state before; `null` for a state that did not
    /// exist.
    pub before: JsonValue,
    /// The message or state after.
    pub after: JsonValue,
}

/// What [`InstanceStore::edit_message`] or
/// [`InstanceStore::edit_extension_state`] did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EditReport {
    /// The edit, as recorded.
    pub record: EditRecord,
    /// Where the record is.
    pub record_file: PathBuf,
}

impl InstanceStore {
    /// Checks, without the lock and writing nothing, that the instance
    /// exists (`E_STORE_INSTANCE_NOT_FOUND`), so a caller that must stop
    /// its process before editing stops nothing for a wrong name; the
    /// rest is checked under the lock.
    pub fn check_edit(&self, agent_name: &str, instance_key: &str) -> Result<(), StoreError> {
        self.existing(agent_name, instance_key).map(drop)
    }

    /// Replaces the text of message `message_id` of the instance with
    /// `text` (see [`edited_message`] for what a text means per role),
    /// recorded as an edit by `by` (see the module docs). The next Turn
    /// runs on the edited conversation.
    ///
    /// Refused, with nothing written, when the instance is open elsewhere
    /// (`E_STORE_INSTANCE_LOCKED`), the message is not in its committed
    /// conversation (`E_MESSAGE_NOT_FOUND`), or an interrupted Turn is
    /// pending or the message has no text to replace
    /// (`E_INSTANCE_EDIT_REFUSED`).
    pub fn edit_message(
        &self,
        agent_name: &str,
        instance_key: &str,
        message_id: &str,
        text: &str,
        by: &str,
    ) -> Result<EditReport, StoreError> {
        let instance = RoutingKey::new(agent_name, instance_key).to_string();
        let (paths, lock) = self.quiescent(agent_name, instance_key, Recovery::Always)?;
        let mut journal = FileJournal::open(paths.clone(), self.policy(), lock)?;
        let conversation = journal.load()?;
        refuse_pending(&instance, conversation.pending_events.len())?;
        let mut next = conversation.base;
        let Some(position) = next.iter().position(|message| message.id == message_id) else {
            return Err(StoreError::MessageNotFound {
                instance,
                message_id: message_id.to_string(),
            });
        };
        let before = next[position].clone();
        let data = edited_message(&before.data, text).map_err(|reason| StoreError::EditRefused {
            instance: instance.clone(),
            reason,
            suggestion: "edit a system, user or assistant message, or a tool message holding one result; rewind or fork to change anything else".to_string(),
        })?;
        let mut record = self.new_record(
            agent_name,
            instance_key,
            by,
            EditTarget::Message {
                message_id: message_id.to_string(),
            },
        );
        let mut after = Message {
            data,
            ..before.clone()
        };
        after.metadata.insert(
            EDIT_METADATA_KEY.into(),
            serde_json::json!({"id": record.id, "by": by, "at": record.edited_at}),
        );
        record.before = to_json(&before)?;
        record.after = to_json(&after)?;
        let record_file = self.write_record(&paths, &record)?;
        let turn_id = format!("edit_{}", record.id);
        let event = MessageEvent::Replace {
            target_id: message_id.to_string(),
            message: after.clone(),
        };
        journal.record_event(&turn_id, &event)?;
        next[position] = after;
        journal.commit_turn(&turn_id, &[event], &next, &Default::default())?;
        self.audit_edit(&record)?;
        Ok(EditReport {
            record,
            record_file,
        })
    }

    /// Replaces the state of extension `extension` of the instance with
    /// `state`, recorded as an edit by `by` (see the module docs); the
    /// next process of the instance starts with it.
    ///
    /// Refused, with nothing written, when the instance is open elsewhere
    /// (`E_STORE_INSTANCE_LOCKED`), an interrupted Turn is pending, or the
    /// extension has no state in the instance and `state` is not an
    /// object (`E_INSTANCE_EDIT_REFUSED`).
    pub fn edit_extension_state(
        &self,
        agent_name: &str,
        instance_key: &str,
        extension: &str,
        state: &JsonValue,
        by: &str,
    ) -> Result<EditReport, StoreError> {
        let instance = RoutingKey::new(agent_name, instance_key).to_string();
        let refused = |reason: String, suggestion: &str| StoreError::EditRefused {
            instance: instance.clone(),
            reason,
            suggestion: suggestion.to_string(),
        };
        if extension.is_empty() || extension.starts_with('.') || extension.contains('/') {
            return Err(refused(
                format!("`{extension}` is not an extension name"),
                "name the extension as the Agent's `extensions` list does",
            ));
        }
        if state.is_null() {
            return Err(refused(
                "a state cannot be null".to_string(),
                "give the state as a JSON value, for example {}",
            ));
        }
        let (paths, lock) = self.quiescent(agent_name, instance_key, Recovery::Always)?;
        let pending = FileJournal::open(paths.clone(), self.policy(), lock.clone())?
            .load()?
            .pending_events
            .len();
        refuse_pending(&instance, pending)?;
        let file = paths.extension_state_file(extension);
        let before = match std::fs::read(&file) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|error| StoreError::CorruptState {
                    path: file.clone(),
                    reason: error.to_string(),
                })?
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => JsonValue::Null,
            Err(source) => return Err(StoreError::io("reading", file, source)),
        };
        if before.is_null() && !state.is_object() {
            return Err(refused(
                format!("extension `{extension}` has no state in this instance yet"),
                "check the name against the instance's extensions/ folder; a new state must be a JSON object",
            ));
        }
        let mut record = self.new_record(
            agent_name,
            instance_key,
            by,
            EditTarget::ExtensionState {
                extension: extension.to_string(),
            },
        );
        record.before = before;
        record.after = state.clone();
        let record_file = self.write_record(&paths, &record)?;
        create_dir_all(&paths.extensions_dir())?;
        write_file_atomically(&file, &crate::encode_state(state)?, self.policy())?;
        drop(lock);
        self.audit_edit(&record)?;
        Ok(EditReport {
            record,
            record_file,
        })
    }

    /// The edits made to the instance, oldest first.
    pub fn edits(
        &self,
        agent_name: &str,
        instance_key: &str,
    ) -> Result<Vec<EditRecord>, StoreError> {
        let dir = self.existing(agent_name, instance_key)?.edits_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(StoreError::io("listing", dir, source)),
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        files.sort();
        files
            .into_iter()
            .map(|path| {
                let bytes = std::fs::read(&path)
                    .map_err(|source| StoreError::io("reading", &path, source))?;
                serde_json::from_slice(&bytes).map_err(|error| StoreError::CorruptState {
                    path,
                    reason: error.to_string(),
                })
            })
            .collect()
    }

    fn new_record(
        &self,
        agent_name: &str,
        instance_key: &str,
        by: &str,
        target: EditTarget,
    ) -> EditRecord {
        EditRecord {
            id: crate::new_archive_id(),
            edited_at: goondan_types::now_iso(),
            by: by.to_string(),
            agent_name: agent_name.to_string(),
            instance_key: instance_key.to_string(),
            target,
            before: JsonValue::Null,
            after: JsonValue::Null,
        }
    }

    fn write_record(
        &self,
        paths: &InstancePaths,
        record: &EditRecord,
    ) -> Result<PathBuf, StoreError> {
        let dir = paths.edits_dir();
        create_dir_all(&dir)?;
        let file = dir.join(format!("{}.json", record.id));
        let mut bytes = serde_json::to_vec_pretty(record)
            .map_err(|error| StoreError::encode("an edit record", error))?;
        bytes.push(b'\n');
        write_file_atomically(&file, &bytes, self.policy())?;
        Ok(file)
    }

    fn audit_edit(&self, record: &EditRecord) -> Result<(), StoreError> {
        let mut details = JsonObject::new();
        details.insert("editId".into(), record.id.clone().into());
        details.insert("target".into(), to_json(&record.target)?);
        details.insert("by".into(), record.by.clone().into());
        self.audit_with(
            "instance.edit",
            &record.agent_name,
            &record.instance_key,
            details,
        )
    }
}

fn refuse_pending(instance: &str, n_pending: usize) -> Result<(), StoreError> {
    if n_pending == 0 {
        return Ok(());
    }
    Err(StoreError::EditRefused {
        instance: instance.to_string(),
        reason: format!("an interrupted Turn has {n_pending} pending event(s); it resumes at the next start"),
        suggestion: format!("let the Turn finish (send {instance} an input), or drop it with `gdn instance rewind {instance} --to <TURN>`, then edit"),
    })
}

fn to_json(value: &impl Serialize) -> Result<JsonValue, StoreError> {
    serde_json::to_value(value).map_err(|error| StoreError::encode("an edit record", error))
}

/// `message` with its text replaced by `text`, or why it cannot be:
/// a system prompt becomes `text`; a user or assistant message gets one
/// text part where its first text part was (or first, if it had none),
/// its other parts (tool calls, images, files, reasoning) kept; a tool
/// message with exactly one result gets `text` as that result's output,
/// an error staying an error.
pub fn edited_message(message: &ModelMessage, text: &str) -> Result<ModelMessage, String> {
    if text.trim().is_empty() {
        return Err("the new text is empty".to_string());
    }
    let text_part = || ContentPart::text(text);
    let replace_texts = |parts: &[ContentPart]| -> Vec<ContentPart> {
        let first = parts
            .iter()
            .position(|part| matches!(part, ContentPart::Text { .. }))
            .unwrap_or(0);
        let mut kept: Vec<ContentPart> = Vec::with_capacity(parts.len() + 1);
        for (index, part) in parts.iter().enumerate() {
            if index == first {
                kept.push(text_part());
            }
            if !matches!(part, ContentPart::Text { .. }) {
                kept.push(part.clone());
            }
        }
        if parts.is_empty() {
            kept.push(text_part());
        }
        kept
    };
    let content = |content: &MessageContent| match content {
        MessageContent::Text(_) => MessageContent::Text(text.to_string()),
        MessageContent::Parts(parts) => MessageContent::Parts(replace_texts(parts)),
    };
    Ok(match message {
        ModelMessage::System {
            provider_options, ..
        } => ModelMessage::System {
            content: text.to_string(),
            provider_options: provider_options.clone(),
        },
        ModelMessage::User {
            content: old,
            provider_options,
        } => ModelMessage::User {
            content: content(old),
            provider_options: provider_options.clone(),
        },
        ModelMessage::Assistant {
            content: old,
            provider_options,
        } => ModelMessage::Assistant {
            content: content(old),
            provider_options: provider_options.clone(),
        },
        ModelMessage::Tool {
            content: old,
            provider_options,
        } => match old.as_slice() {
            [ContentPart::ToolResult {
                tool_call_id,
                tool_name,
                output,
                provider_options: part_options,
            }] => ModelMessage::Tool {
                content: vec![ContentPart::ToolResult {
                    tool_call_id: tool_call_id.clone(),
                    tool_name: tool_name.clone(),
                    output: if output.is_error() {
                        ToolResultOutput::ErrorText(text.to_string())
                    } else {
                        ToolResultOutput::Text(text.to_string())
                    },
                    provider_options: part_options.clone(),
                }],
                provider_options: provider_options.clone(),
            },
            parts => {
                return Err(format!(
                    "a tool message holding {} parts has no one text to replace",
                    parts.len()
                ))
            }
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StateRoot;
    use goondan_types::MessageSource;

    fn store(dir: &std::path::Path) -> InstanceStore {
        InstanceStore::new(StateRoot::new(dir).workspace("main"))
    }

    /// Commits one Turn (`question`, a tool call and its result, `answer`)
    /// to `alpha:main`; the messages' ids.
    fn seed(store: &InstanceStore) -> Vec<String> {
        let mut instance = store.open("alpha", "main").unwrap();
        let mut input = Message::new(ModelMessage::user("question"), MessageSource::User);
        for (name, value) in [
            ("__goondanInbound", serde_json::json!(true)),
            ("eventId", serde_json::json!("evt_1")),
            ("turnId", serde_json::json!("turn_1")),
        ] {
            input.metadata.insert(name.into(), value);
        }
        let assistant = |parts| {
            Message::new(
                ModelMessage::assistant(parts),
                MessageSource::Assistant {
                    step_id: "s".into(),
                },
            )
        };
        let call = assistant(vec![
            ContentPart::text("let me look"),
            ContentPart::tool_call("c1", "bash__exec", serde_json::json!({"command": "ls"})),
        ]);
        let result = Message::new(
            ModelMessage::tool(vec![ContentPart::tool_result(
                "c1",
                "bash__exec",
                ToolResultOutput::Text("a b".into()),
            )]),
            MessageSource::System,
        );
        let answer = assistant(vec![ContentPart::text("answer")]);
        let messages = vec![input, call, result, answer];
        let events: Vec<MessageEvent> = messages
            .iter()
            .map(|message| MessageEvent::Append {
                message: message.clone(),
            })
            .collect();
        instance
            .journal_mut()
            .commit_turn("turn_1", &events, &messages, &Default::default())
            .unwrap();
        messages.into_iter().map(|message| message.id).collect()
    }

    fn committed(store: &InstanceStore) -> Vec<Message> {
        store
            .open("alpha", "main")
            .unwrap()
            .journal_mut()
            .load()
            .unwrap()
            .base
    }

    #[test]
    fn an_edited_message_keeps_its_place_id_and_other_parts_and_its_before_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let ids = seed(&store);
        let report = store
            .edit_message("alpha", "main", &ids[1], "looking now", "tester")
            .unwrap();
        let messages = committed(&store);
        assert_eq!(
            messages.iter().map(|m| m.id.clone()).collect::<Vec<_>>(),
            ids
        );
        let ModelMessage::Assistant {
            content: MessageContent::Parts(parts),
            ..
        } = &messages[1].data
        else {
            panic!("{:?}", messages[1].data);
        };
        assert_eq!(parts[0], ContentPart::text("looking now"));
        assert!(matches!(parts[1], ContentPart::ToolCall { .. }));
        assert_eq!(messages[1].metadata[EDIT_METADATA_KEY]["by"], "tester");
        assert_eq!(
            messages[1].metadata[EDIT_METADATA_KEY]["id"],
            report.record.id
        );
        // The record holds what was there before, and is listed.
        assert_eq!(
            report.record.before["data"]["content"][0]["text"],
            "let me look"
        );
        assert_eq!(store.edits("alpha", "main").unwrap(), vec![report.record]);
        // The history still has one Turn, delimited as before.
        let history = store.history("alpha", "main", Default::default()).unwrap();
        assert_eq!(history.turns.len(), 1);
        assert_eq!(history.turns[0].n_messages, 4);
    }

    #[test]
    fn a_tool_result_edit_keeps_the_call_it_answers() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let ids = seed(&store);
        store
            .edit_message("alpha", "main", &ids[2], "c d", "tester")
            .unwrap();
        let ModelMessage::Tool { content, .. } = &committed(&store)[2].data else {
            panic!("not a tool message");
        };
        assert!(matches!(
            &content[0],
            ContentPart::ToolResult { tool_call_id, output: ToolResultOutput::Text(text), .. }
                if tool_call_id == "c1" && text == "c d"
        ));
    }

    #[test]
    fn a_bad_edit_is_refused_with_its_code_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        let ids = seed(&store);
        let paths = store.workspace().instance("alpha", "main");
        let base = std::fs::read(paths.base_log()).unwrap();
        let unknown = store
            .edit_message("alpha", "main", "msg_nope", "x", "tester")
            .unwrap_err();
        assert_eq!(unknown.code(), "E_MESSAGE_NOT_FOUND");
        let empty = store
            .edit_message("alpha", "main", &ids[0], "  ", "tester")
            .unwrap_err();
        assert_eq!(empty.code(), "E_INSTANCE_EDIT_REFUSED");
        assert!(empty.suggestion().is_some());
        let missing = store
            .edit_message("alpha", "nobody", &ids[0], "x", "tester")
            .unwrap_err();
        assert_eq!(missing.code(), "E_STORE_INSTANCE_NOT_FOUND");
        let typo = store
            .edit_extension_state("alpha", "main", "memroy", &serde_json::json!(3), "tester")
            .unwrap_err();
        assert_eq!(typo.code(), "E_INSTANCE_EDIT_REFUSED");
        let traversal = store
            .edit_extension_state("alpha", "main", "../x", &serde_json::json!({}), "tester")
            .unwrap_err();
        assert_eq!(traversal.code(), "E_INSTANCE_EDIT_REFUSED");
        assert_eq!(std::fs::read(paths.base_log()).unwrap(), base);
        assert!(!paths.edits_dir().exists());
    }

    #[test]
    fn an_edit_waits_for_no_writer_and_is_refused_while_a_turn_is_pending() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path()).with_lock_wait(std::time::Duration::ZERO);
        let ids = seed(&store);
        let mut open = store.open("alpha", "main").unwrap();
        let locked = store
            .edit_message("alpha", "main", &ids[0], "x", "tester")
            .unwrap_err();
        assert_eq!(locked.code(), "E_STORE_INSTANCE_LOCKED");
        // An interrupted Turn: one event recorded, never committed.
        let extra = Message::new(ModelMessage::user("more"), MessageSource::User);
        open.journal_mut()
            .record_event("turn_2", &MessageEvent::Append { message: extra })
            .unwrap();
        drop(open);
        let pending = store
            .edit_message("alpha", "main", &ids[0], "x", "tester")
            .unwrap_err();
        assert_eq!(pending.code(), "E_INSTANCE_EDIT_REFUSED");
        assert!(
            pending.suggestion().unwrap().contains("rewind"),
            "{pending}"
        );
        let state = store
            .edit_extension_state("alpha", "main", "memory", &serde_json::json!({}), "tester")
            .unwrap_err();
        assert_eq!(state.code(), "E_INSTANCE_EDIT_REFUSED");
    }

    #[test]
    fn an_extension_state_edit_replaces_the_file_and_records_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = store(dir.path());
        seed(&store);
        let paths = store.workspace().instance("alpha", "main");
        std::fs::create_dir_all(paths.extensions_dir()).unwrap();
        std::fs::write(paths.extension_state_file("memory"), b"{\"n\": 1}\n").unwrap();
        let report = store
            .edit_extension_state(
                "alpha",
                "main",
                "memory",
                &serde_json::json!({"n": 5}),
                "tester",
            )
            .unwrap();
        let now: JsonValue =
            serde_json::from_slice(&std::fs::read(paths.extension_state_file("memory")).unwrap())
                .unwrap();
        assert_eq!(now, serde_json::json!({"n": 5}));
        assert_eq!(report.record.before, serde_json::json!({"n": 1}));
        // A new extension's state must be an object.
        store
            .edit_extension_state(
                "alpha",
                "main",
                "fresh",
                &serde_json::json!({"a": 1}),
                "tester",
            )
            .unwrap();
        assert_eq!(store.edits("alpha", "main").unwrap().len(), 2);
    }

    #[test]
    fn edited_texts_per_role() {
        let system = edited_message(&ModelMessage::system("old"), "new").unwrap();
        assert_eq!(system, ModelMessage::system("new"));
        let user = edited_message(&ModelMessage::user("old"), "new").unwrap();
        assert_eq!(user, ModelMessage::user("new"));
        let only_call = ModelMessage::assistant(vec![ContentPart::tool_call(
            "c",
            "t",
            serde_json::json!({}),
        )]);
        let ModelMessage::Assistant {
            content: MessageContent::Parts(parts),
            ..
        } = edited_message(&only_call, "said").unwrap()
        else {
            panic!("not an assistant message");
        };
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], ContentPart::text("said"));
        let two_texts =
            ModelMessage::assistant(vec![ContentPart::text("a"), ContentPart::text("b")]);
        assert_eq!(
            edited_message(&two_texts, "c").unwrap(),
            ModelMessage::assistant(vec![ContentPart::text("c")])
        );
        let two_results = ModelMessage::tool(vec![
            ContentPart::tool_result("a", "t", ToolResultOutput::Text("1".into())),
            ContentPart::tool_result("b", "t", ToolResultOutput::ErrorText("2".into())),
        ]);
        assert!(edited_message(&two_results, "x").is_err());
    }
}
