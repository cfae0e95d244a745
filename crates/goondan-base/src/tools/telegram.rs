//! The `telegram` tool: a bot's side of a Telegram chat through the Bot
//! API. Exports, as the original's: `send` (`sendMessage`), `edit`
//! (`editMessageText`), `delete` (`deleteMessage`), `react`
//! (`setMessageReaction`), `set-chat-action` (`sendChatAction`) and
//! `download-file` (`getFile`, then the file itself).
//!
//! The token and API address come from the call (`token`, `apiBaseUrl`)
//! or the operator (`TELEGRAM_BOT_TOKEN`, `BOT_TOKEN`, `TELEGRAM_TOKEN`,
//! `BRAIN_TELEGRAM_BOT_TOKEN`; `TELEGRAM_API_BASE_URL`), with the rules of
//! [`bot_api`](super::bot_api); the calls go through the workspace's one
//! Bot API client (`goondan_connector::chat_api::telegram`). Telegram puts
//! the token in the URL, so every error is masked and the `downloadUrl` a
//! download reports carries a marker in its place.

use crate::args::{invalid, parse, require_non_empty, whole_number};
use crate::error::BuiltinToolError;
use crate::tools::bot_api::{
    self, add_file_fields, chat_id, positive_integer, BotApiConfig, BotClient, Credentials,
    FileOutput,
};
use goondan_types::{JsonObject, JsonValue};
use serde::Deserialize;
use serde_json::json;
use std::path::Path;

/// The Bot API's address.
pub const DEFAULT_API_BASE_URL: &str = "https://api.telegram.org";
/// The variable that overrides it.
pub const API_BASE_URL_ENV: &str = "TELEGRAM_API_BASE_URL";
/// The variables the token is read from, in order.
pub const TOKEN_ENV: [&str; 4] = [
    "TELEGRAM_BOT_TOKEN",
    "BOT_TOKEN",
    "TELEGRAM_TOKEN",
    "BRAIN_TELEGRAM_BOT_TOKEN",
];

/// Chat actions by the names the tool accepts (dashes, any case).
const CHAT_ACTIONS: [(&str, &str); 11] = [
    ("typing", "typing"),
    ("upload-photo", "upload_photo"),
    ("record-video", "record_video"),
    ("upload-video", "upload_video"),
    ("record-voice", "record_voice"),
    ("upload-voice", "upload_voice"),
    ("upload-document", "upload_document"),
    ("choose-sticker", "choose_sticker"),
    ("find-location", "find_location"),
    ("record-video-note", "record_video_note"),
    ("upload-video-note", "upload_video_note"),
];

/// Parse modes by the names the tool accepts.
const PARSE_MODES: [(&str, &str); 4] = [
    ("markdown", "Markdown"),
    ("markdownv2", "MarkdownV2"),
    ("markdown-v2", "MarkdownV2"),
    ("html", "HTML"),
];

fn normalized(text: &str) -> String {
    text.trim()
        .to_ascii_lowercase()
        .split(|c: char| c.is_whitespace() || c == '_')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
}

fn lookup(
    tool: &str,
    field: &str,
    table: &[(&str, &'static str)],
    text: &str,
) -> Result<&'static str, BuiltinToolError> {
    let key = normalized(text);
    table
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, value)| *value)
        .ok_or_else(|| {
            let names: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
            invalid(
                tool,
                format!("`{field}` `{text}` is not one of {}", names.join(", ")),
            )
        })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SendArgs {
    token: Option<String>,
    chat_id: JsonValue,
    text: String,
    parse_mode: Option<String>,
    disable_notification: Option<bool>,
    disable_web_page_preview: Option<bool>,
    reply_to_message_id: Option<JsonValue>,
    allow_sending_without_reply: Option<bool>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EditArgs {
    token: Option<String>,
    chat_id: JsonValue,
    message_id: JsonValue,
    text: String,
    parse_mode: Option<String>,
    disable_web_page_preview: Option<bool>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DeleteArgs {
    token: Option<String>,
    chat_id: JsonValue,
    message_id: JsonValue,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReactArgs {
    token: Option<String>,
    chat_id: JsonValue,
    message_id: JsonValue,
    emoji: Option<String>,
    #[serde(default)]
    emojis: Vec<String>,
    #[serde(default)]
    clear: bool,
    is_big: Option<bool>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ChatActionArgs {
    token: Option<String>,
    chat_id: JsonValue,
    action: Option<String>,
    status: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DownloadArgs {
    token: Option<String>,
    file_id: Option<String>,
    #[serde(rename = "file_id")]
    file_id_snake: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    max_bytes: Option<u64>,
    include_base64: Option<bool>,
    include_data_url: Option<bool>,
    save_path: Option<String>,
    output_path: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

/// The `telegram` tool. It holds the operator's config and a connection
/// pool.
pub struct TelegramTool {
    api: BotClient,
}

impl TelegramTool {
    /// The tool with `config`, unset fields read from `secrets`, else
    /// from the environment.
    pub fn new(config: BotApiConfig, secrets: &goondan_types::Secrets) -> TelegramTool {
        TelegramTool {
            api: BotClient::new(
                DEFAULT_API_BASE_URL,
                API_BASE_URL_ENV,
                &TOKEN_ENV,
                config,
                secrets,
            ),
        }
    }

    /// Calls `method` with `payload`; Telegram's `result` on success.
    async fn call(
        &self,
        credentials: &Credentials,
        method: &'static str,
        payload: JsonValue,
    ) -> Result<JsonValue, BuiltinToolError> {
        let api = self.api.telegram(credentials)?;
        Ok(api.call(method, &payload, credentials.timeout).await?)
    }

    /// `send`: a text message.
    pub async fn send(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "telegram__send";
        let args: SendArgs = parse(TOOL, raw)?;
        let chat = chat_id(TOOL, "chatId", &args.chat_id)?;
        require_non_empty(TOOL, "text", &args.text)?;
        let mut payload = json!({"chat_id": chat, "text": args.text});
        if let Some(mode) = &args.parse_mode {
            payload["parse_mode"] = lookup(TOOL, "parseMode", &PARSE_MODES, mode)?.into();
        }
        if let Some(reply_to) = &args.reply_to_message_id {
            payload["reply_to_message_id"] =
                positive_integer(TOOL, "replyToMessageId", reply_to)?.into();
        }
        for (key, value) in [
            ("disable_notification", args.disable_notification),
            ("disable_web_page_preview", args.disable_web_page_preview),
            (
                "allow_sending_without_reply",
                args.allow_sending_without_reply,
            ),
        ] {
            if let Some(value) = value {
                payload[key] = value.into();
            }
        }
        let credentials = self
            .api
            .credentials(
                TOOL,
                args.token.as_deref(),
                args.api_base_url.as_deref(),
                args.timeout_ms,
            )
            .await?;
        let result = self.call(&credentials, "sendMessage", payload).await?;
        Ok(json!({
            "ok": true,
            "chatId": chat,
            "messageId": result.get("message_id").and_then(JsonValue::as_i64),
            "date": result.get("date").and_then(JsonValue::as_i64),
            "text": result.get("text").and_then(JsonValue::as_str),
        }))
    }

    /// `edit`: replaces a message's text.
    pub async fn edit(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "telegram__edit";
        let args: EditArgs = parse(TOOL, raw)?;
        let chat = chat_id(TOOL, "chatId", &args.chat_id)?;
        let message_id = positive_integer(TOOL, "messageId", &args.message_id)?;
        require_non_empty(TOOL, "text", &args.text)?;
        let mut payload = json!({"chat_id": chat, "message_id": message_id, "text": args.text});
        if let Some(mode) = &args.parse_mode {
            payload["parse_mode"] = lookup(TOOL, "parseMode", &PARSE_MODES, mode)?.into();
        }
        if let Some(value) = args.disable_web_page_preview {
            payload["disable_web_page_preview"] = value.into();
        }
        let credentials = self
            .api
            .credentials(
                TOOL,
                args.token.as_deref(),
                args.api_base_url.as_deref(),
                args.timeout_ms,
            )
            .await?;
        let result = self.call(&credentials, "editMessageText", payload).await?;
        Ok(json!({
            "ok": true,
            "chatId": chat,
            "messageId": result.get("message_id").and_then(JsonValue::as_i64).unwrap_or(message_id),
            "edited": true,
        }))
    }

    /// `delete`: removes a message.
    pub async fn remove(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "telegram__delete";
        let args: DeleteArgs = parse(TOOL, raw)?;
        let chat = chat_id(TOOL, "chatId", &args.chat_id)?;
        let message_id = positive_integer(TOOL, "messageId", &args.message_id)?;
        let credentials = self
            .api
            .credentials(
                TOOL,
                args.token.as_deref(),
                args.api_base_url.as_deref(),
                args.timeout_ms,
            )
            .await?;
        self.call(
            &credentials,
            "deleteMessage",
            json!({"chat_id": chat, "message_id": message_id}),
        )
        .await?;
        Ok(json!({"ok": true, "chatId": chat, "messageId": message_id, "deleted": true}))
    }

    /// `react`: sets (or with `clear`, removes) a message's reactions.
    pub async fn react(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "telegram__react";
        let args: ReactArgs = parse(TOOL, raw)?;
        let chat = chat_id(TOOL, "chatId", &args.chat_id)?;
        let message_id = positive_integer(TOOL, "messageId", &args.message_id)?;
        let mut emojis: Vec<String> = Vec::new();
        if !args.clear {
            for emoji in args.emoji.iter().chain(&args.emojis) {
                let emoji = emoji.trim();
                if !emoji.is_empty() && !emojis.iter().any(|seen| seen == emoji) {
                    emojis.push(emoji.to_string());
                }
            }
            if emojis.is_empty() {
                return Err(invalid(
                    TOOL,
                    "give `emoji` or `emojis` to react, or `clear: true` to remove reactions",
                ));
            }
        }
        let reaction: Vec<JsonValue> = emojis
            .iter()
            .map(|emoji| json!({"type": "emoji", "emoji": emoji}))
            .collect();
        let mut payload = json!({"chat_id": chat, "message_id": message_id, "reaction": reaction});
        if let Some(big) = args.is_big {
            payload["is_big"] = big.into();
        }
        let credentials = self
            .api
            .credentials(
                TOOL,
                args.token.as_deref(),
                args.api_base_url.as_deref(),
                args.timeout_ms,
            )
            .await?;
        self.call(&credentials, "setMessageReaction", payload)
            .await?;
        Ok(json!({
            "ok": true,
            "chatId": chat,
            "messageId": message_id,
            "cleared": args.clear,
            "emojis": emojis,
            "reactionCount": reaction.len(),
        }))
    }

    /// `set-chat-action`: shows "typing…" or another action in the chat.
    pub async fn set_chat_action(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "telegram__set-chat-action";
        let args: ChatActionArgs = parse(TOOL, raw)?;
        let chat = chat_id(TOOL, "chatId", &args.chat_id)?;
        let requested = args
            .action
            .as_deref()
            .or(args.status.as_deref())
            .unwrap_or("typing");
        let action = lookup(TOOL, "action", &CHAT_ACTIONS, requested)?;
        let credentials = self
            .api
            .credentials(
                TOOL,
                args.token.as_deref(),
                args.api_base_url.as_deref(),
                args.timeout_ms,
            )
            .await?;
        self.call(
            &credentials,
            "sendChatAction",
            json!({"chat_id": chat, "action": action}),
        )
        .await?;
        Ok(json!({"ok": true, "chatId": chat, "status": action, "action": action}))
    }

    /// `download-file`: resolves a file id and fetches the file, returned as
    /// base64 and a data URL and, with `savePath`, written under the
    /// workdir.
    pub async fn download_file(
        &self,
        workdir: &Path,
        raw: &JsonObject,
    ) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "telegram__download-file";
        let args: DownloadArgs = parse(TOOL, raw)?;
        let file_id = args
            .file_id
            .as_deref()
            .or(args.file_id_snake.as_deref())
            .map(str::trim)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| invalid(TOOL, "give `fileId`, the file's id from the message"))?
            .to_string();
        let max_bytes = bot_api::max_download_bytes(TOOL, args.max_bytes)?;
        let credentials = self
            .api
            .credentials(
                TOOL,
                args.token.as_deref(),
                args.api_base_url.as_deref(),
                args.timeout_ms,
            )
            .await?;
        let file = self
            .call(&credentials, "getFile", json!({"file_id": file_id}))
            .await?;
        let Some(file_path) = file.get("file_path").and_then(JsonValue::as_str) else {
            return Err(BuiltinToolError::BotApi {
                platform: "Telegram",
                method: "getFile".into(),
                status: 200,
                description: "the answer has no file_path (the file may be over the Bot API's 20 MB download limit)".into(),
            });
        };
        let api = self.api.telegram(&credentials)?;
        let download = api
            .download_file(file_path, max_bytes, credentials.timeout)
            .await?;
        let mut result = JsonObject::new();
        result.insert("ok".into(), true.into());
        result.insert(
            "fileId".into(),
            file.get("file_id")
                .cloned()
                .unwrap_or_else(|| file_id.clone().into()),
        );
        result.insert(
            "fileUniqueId".into(),
            file.get("file_unique_id")
                .cloned()
                .unwrap_or(JsonValue::Null),
        );
        result.insert("filePath".into(), file_path.into());
        result.insert(
            "fileSize".into(),
            file.get("file_size").cloned().unwrap_or(JsonValue::Null),
        );
        result.insert("downloadUrl".into(), api.masked_file_url(file_path).into());
        add_file_fields(
            &mut result,
            workdir,
            download,
            FileOutput::from_args(
                args.include_base64,
                args.include_data_url,
                args.save_path.as_deref(),
                args.output_path.as_deref(),
            ),
        )
        .await?;
        Ok(JsonValue::Object(result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_normalize_like_the_original() {
        let cases = [
            (&CHAT_ACTIONS[..], "Upload Photo", Some("upload_photo")),
            (
                &CHAT_ACTIONS[..],
                "record_video_note",
                Some("record_video_note"),
            ),
            (&CHAT_ACTIONS[..], "dancing", None),
            (&PARSE_MODES[..], "MarkdownV2", Some("MarkdownV2")),
            (&PARSE_MODES[..], "markdown_v2", Some("MarkdownV2")),
            (&PARSE_MODES[..], "HTML", Some("HTML")),
            (&PARSE_MODES[..], "bbcode", None),
        ];
        for (table, text, expected) in cases {
            assert_eq!(lookup("t", "f", table, text).ok(), expected, "{text}");
        }
    }
}
