//! The `slack` tool: a bot's side of Slack conversations through the Web
//! API. Exports, as the original's: `send` (`chat.postMessage`), `read`
//! (`conversations.history`, or `conversations.replies` with `threadTs`),
//! `edit` (`chat.update`), `delete` (`chat.delete`), `react`
//! (`reactions.add`, once per emoji) and `download-file` (a file URL
//! fetched with the bot's token).
//!
//! The token and API address come from the call (`token`, `apiBaseUrl`)
//! or the operator (`SLACK_BOT_TOKEN`, `SLACK_TOKEN`,
//! `BRAIN_SLACK_BOT_TOKEN`; `SLACK_API_BASE_URL`), with the rules of
//! [`bot_api`](super::bot_api); the calls go through the workspace's one
//! Web API client (`goondan_connector::chat_api::slack`). Write methods
//! send JSON; the read methods, which Slack does not take as JSON, send a
//! form. `download-file` sends the
//! token only to Slack's own hosts (`slack.com`, `*.slack.com`,
//! `*.slack-edge.com`) or the operator's API host.

use crate::args::{invalid, parse, require_non_empty, whole_number};
use crate::error::BuiltinToolError;
use crate::tools::bot_api::{
    self, add_file_fields, BotApiConfig, BotClient, Credentials, FileOutput,
};
use goondan_types::{JsonObject, JsonValue};
use reqwest::Url;
use serde::Deserialize;
use serde_json::json;
use std::path::Path;

/// The Web API's address.
pub const DEFAULT_API_BASE_URL: &str = "https://slack.com/api";
/// The variable that overrides it.
pub const API_BASE_URL_ENV: &str = "SLACK_API_BASE_URL";
/// The variables the token is read from, in order.
pub const TOKEN_ENV: [&str; 3] = ["SLACK_BOT_TOKEN", "SLACK_TOKEN", "BRAIN_SLACK_BOT_TOKEN"];

/// How a method's arguments travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Json,
    Form,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SendArgs {
    token: Option<String>,
    channel_id: Option<String>,
    channel: Option<String>,
    text: String,
    thread_ts: Option<String>,
    mrkdwn: Option<bool>,
    unfurl_links: Option<bool>,
    unfurl_media: Option<bool>,
    reply_broadcast: Option<bool>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReadArgs {
    token: Option<String>,
    channel_id: Option<String>,
    channel: Option<String>,
    message_ts: Option<String>,
    ts: Option<String>,
    timestamp: Option<String>,
    thread_ts: Option<String>,
    latest: Option<String>,
    oldest: Option<String>,
    inclusive: Option<bool>,
    #[serde(default, deserialize_with = "whole_number")]
    limit: Option<u64>,
    cursor: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

/// The arguments of `edit`, `delete` and `react`, which differ only in
/// `text`/`mrkdwn` and `emoji`/`emojis`; each export refuses the fields
/// that are not its own.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MessageArgs {
    token: Option<String>,
    channel_id: Option<String>,
    channel: Option<String>,
    message_ts: Option<String>,
    ts: Option<String>,
    timestamp: Option<String>,
    text: Option<String>,
    mrkdwn: Option<bool>,
    emoji: Option<String>,
    #[serde(default)]
    emojis: Vec<String>,
    #[serde(default, deserialize_with = "whole_number")]
    timeout_ms: Option<u64>,
    api_base_url: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct DownloadArgs {
    token: Option<String>,
    url: String,
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

fn non_empty(value: Option<&String>) -> Option<&str> {
    value.map(|v| v.trim()).filter(|v| !v.is_empty())
}

fn channel(
    tool: &str,
    channel_id: Option<&String>,
    alias: Option<&String>,
) -> Result<String, BuiltinToolError> {
    non_empty(channel_id)
        .or_else(|| non_empty(alias))
        .map(str::to_string)
        .ok_or_else(|| invalid(tool, "`channelId` must be a non-empty string"))
}

/// An emoji name without surrounding colons.
fn emoji_name(raw: &str) -> &str {
    let trimmed = raw.trim();
    match trimmed
        .strip_prefix(':')
        .and_then(|rest| rest.strip_suffix(':'))
    {
        Some(inner) if !inner.is_empty() => inner,
        _ => trimmed,
    }
}

/// The `slack` tool. It holds the operator's config and a connection
/// pool.
pub struct SlackTool {
    api: BotClient,
}

impl SlackTool {
    /// The tool with `config`, unset fields read from `secrets`, else
    /// from the environment.
    pub fn new(config: BotApiConfig, secrets: &goondan_types::Secrets) -> SlackTool {
        SlackTool {
            api: BotClient::new(
                DEFAULT_API_BASE_URL,
                API_BASE_URL_ENV,
                &TOKEN_ENV,
                config,
                secrets,
            ),
        }
    }

    /// Calls `method` with `payload`; the whole answer on success.
    async fn call(
        &self,
        credentials: &Credentials,
        method: &'static str,
        payload: JsonObject,
        body: Body,
    ) -> Result<JsonValue, BuiltinToolError> {
        let api = self.api.slack(credentials)?;
        let answer = match body {
            Body::Json => {
                api.call(method, &JsonValue::Object(payload), credentials.timeout)
                    .await
            }
            Body::Form => api.call_form(method, &payload, credentials.timeout).await,
        };
        Ok(answer?)
    }

    /// `send`: posts a message (in a thread with `threadTs`).
    pub async fn send(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "slack__send";
        let args: SendArgs = parse(TOOL, raw)?;
        let channel = channel(TOOL, args.channel_id.as_ref(), args.channel.as_ref())?;
        require_non_empty(TOOL, "text", &args.text)?;
        let mut payload = JsonObject::new();
        payload.insert("channel".into(), channel.clone().into());
        payload.insert("text".into(), args.text.clone().into());
        if let Some(thread) = non_empty(args.thread_ts.as_ref()) {
            payload.insert("thread_ts".into(), thread.into());
        }
        for (key, value) in [
            ("mrkdwn", args.mrkdwn),
            ("unfurl_links", args.unfurl_links),
            ("unfurl_media", args.unfurl_media),
            ("reply_broadcast", args.reply_broadcast),
        ] {
            if let Some(value) = value {
                payload.insert(key.into(), value.into());
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
        let answer = self
            .call(&credentials, "chat.postMessage", payload, Body::Json)
            .await?;
        Ok(json!({
            "ok": true,
            "channelId": answer.get("channel").and_then(JsonValue::as_str).unwrap_or(&channel),
            "messageTs": answer.get("ts").and_then(JsonValue::as_str),
            "text": answer.pointer("/message/text").and_then(JsonValue::as_str).unwrap_or(&args.text),
        }))
    }

    /// `read`: a channel's history, or a thread's replies with `threadTs`;
    /// `messageTs` finds one message.
    pub async fn read(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "slack__read";
        let args: ReadArgs = parse(TOOL, raw)?;
        let channel = channel(TOOL, args.channel_id.as_ref(), args.channel.as_ref())?;
        let message_ts = non_empty(args.message_ts.as_ref())
            .or_else(|| non_empty(args.ts.as_ref()))
            .or_else(|| non_empty(args.timestamp.as_ref()));
        let thread_ts = non_empty(args.thread_ts.as_ref());
        let limit = args
            .limit
            .unwrap_or(if message_ts.is_some() { 1 } else { 20 });
        if !(1..=1000).contains(&limit) {
            return Err(invalid(TOOL, "`limit` must be between 1 and 1000"));
        }
        let method = if thread_ts.is_some() {
            "conversations.replies"
        } else {
            "conversations.history"
        };
        let mut payload = JsonObject::new();
        payload.insert("channel".into(), channel.clone().into());
        payload.insert("limit".into(), limit.into());
        let latest = non_empty(args.latest.as_ref()).or(message_ts);
        for (key, value) in [
            ("ts", thread_ts),
            ("latest", latest),
            ("oldest", non_empty(args.oldest.as_ref())),
            ("cursor", non_empty(args.cursor.as_ref())),
        ] {
            if let Some(value) = value {
                payload.insert(key.into(), value.into());
            }
        }
        if let Some(inclusive) = args.inclusive.or(message_ts.map(|_| true)) {
            payload.insert("inclusive".into(), inclusive.into());
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
        let answer = self.call(&credentials, method, payload, Body::Form).await?;
        let messages: Vec<JsonValue> = answer
            .get("messages")
            .and_then(JsonValue::as_array)
            .map(|list| list.iter().filter(|m| m.is_object()).cloned().collect())
            .unwrap_or_default();
        let found = message_ts.and_then(|ts| {
            messages
                .iter()
                .find(|m| m.get("ts").and_then(JsonValue::as_str) == Some(ts))
                .cloned()
        });
        Ok(json!({
            "ok": true,
            "channelId": channel,
            "method": method,
            "messageTs": message_ts,
            "threadTs": thread_ts,
            "count": messages.len(),
            "found": found,
            "messages": messages,
            "hasMore": answer.get("has_more").and_then(JsonValue::as_bool).unwrap_or(false),
            "nextCursor": answer
                .pointer("/response_metadata/next_cursor")
                .and_then(JsonValue::as_str)
                .filter(|cursor| !cursor.is_empty()),
        }))
    }

    fn message_ts(tool: &str, args: &MessageArgs) -> Result<String, BuiltinToolError> {
        non_empty(args.message_ts.as_ref())
            .or_else(|| non_empty(args.ts.as_ref()))
            .or_else(|| non_empty(args.timestamp.as_ref()))
            .map(str::to_string)
            .ok_or_else(|| invalid(tool, "`messageTs` must be a non-empty string"))
    }

    fn refuse_fields(tool: &str, present: &[(&str, bool)]) -> Result<(), BuiltinToolError> {
        match present.iter().find(|(_, is_present)| *is_present) {
            Some((field, _)) => Err(invalid(tool, format!("unknown field `{field}`"))),
            None => Ok(()),
        }
    }

    /// `edit`: replaces a message's text.
    pub async fn edit(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "slack__edit";
        let args: MessageArgs = parse(TOOL, raw)?;
        Self::refuse_fields(
            TOOL,
            &[
                ("emoji", args.emoji.is_some()),
                ("emojis", !args.emojis.is_empty()),
            ],
        )?;
        let channel = channel(TOOL, args.channel_id.as_ref(), args.channel.as_ref())?;
        let ts = Self::message_ts(TOOL, &args)?;
        let text = args
            .text
            .clone()
            .ok_or_else(|| invalid(TOOL, "missing field `text`"))?;
        require_non_empty(TOOL, "text", &text)?;
        let mut payload = JsonObject::new();
        payload.insert("channel".into(), channel.clone().into());
        payload.insert("ts".into(), ts.clone().into());
        payload.insert("text".into(), text.into());
        if let Some(mrkdwn) = args.mrkdwn {
            payload.insert("mrkdwn".into(), mrkdwn.into());
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
        let answer = self
            .call(&credentials, "chat.update", payload, Body::Json)
            .await?;
        Ok(json!({
            "ok": true,
            "channelId": answer.get("channel").and_then(JsonValue::as_str).unwrap_or(&channel),
            "messageTs": answer.get("ts").and_then(JsonValue::as_str).unwrap_or(&ts),
            "edited": true,
        }))
    }

    /// `delete`: removes a message.
    pub async fn remove(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "slack__delete";
        let args: MessageArgs = parse(TOOL, raw)?;
        Self::refuse_fields(
            TOOL,
            &[
                ("text", args.text.is_some()),
                ("mrkdwn", args.mrkdwn.is_some()),
                ("emoji", args.emoji.is_some()),
                ("emojis", !args.emojis.is_empty()),
            ],
        )?;
        let channel = channel(TOOL, args.channel_id.as_ref(), args.channel.as_ref())?;
        let ts = Self::message_ts(TOOL, &args)?;
        let mut payload = JsonObject::new();
        payload.insert("channel".into(), channel.clone().into());
        payload.insert("ts".into(), ts.clone().into());
        let credentials = self
            .api
            .credentials(
                TOOL,
                args.token.as_deref(),
                args.api_base_url.as_deref(),
                args.timeout_ms,
            )
            .await?;
        self.call(&credentials, "chat.delete", payload, Body::Json)
            .await?;
        Ok(json!({"ok": true, "channelId": channel, "messageTs": ts, "deleted": true}))
    }

    /// `react`: adds each emoji as a reaction.
    pub async fn react(&self, raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "slack__react";
        let args: MessageArgs = parse(TOOL, raw)?;
        Self::refuse_fields(
            TOOL,
            &[
                ("text", args.text.is_some()),
                ("mrkdwn", args.mrkdwn.is_some()),
            ],
        )?;
        let channel = channel(TOOL, args.channel_id.as_ref(), args.channel.as_ref())?;
        let ts = Self::message_ts(TOOL, &args)?;
        let mut names: Vec<String> = Vec::new();
        for raw_name in args.emoji.iter().chain(&args.emojis) {
            let name = emoji_name(raw_name);
            if name.chars().any(char::is_whitespace) {
                return Err(invalid(TOOL, format!("emoji name `{name}` has whitespace")));
            }
            if !name.is_empty() && !names.iter().any(|seen| seen == name) {
                names.push(name.to_string());
            }
        }
        if names.is_empty() {
            return Err(invalid(TOOL, "give `emoji` or `emojis` to react"));
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
        for name in &names {
            let mut payload = JsonObject::new();
            payload.insert("channel".into(), channel.clone().into());
            payload.insert("timestamp".into(), ts.clone().into());
            payload.insert("name".into(), name.clone().into());
            self.call(&credentials, "reactions.add", payload, Body::Json)
                .await?;
        }
        Ok(json!({
            "ok": true,
            "channelId": channel,
            "messageTs": ts,
            "emojis": names,
            "reactionCount": names.len(),
        }))
    }

    /// `download-file`: fetches a Slack file URL (`url_private`) with the
    /// bot's token.
    pub async fn download_file(
        &self,
        workdir: &Path,
        raw: &JsonObject,
    ) -> Result<JsonValue, BuiltinToolError> {
        const TOOL: &str = "slack__download-file";
        let args: DownloadArgs = parse(TOOL, raw)?;
        require_non_empty(TOOL, "url", &args.url)?;
        let url = Url::parse(args.url.trim()).map_err(|error| BuiltinToolError::InvalidUrl {
            url: args.url.clone(),
            message: error.to_string(),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(BuiltinToolError::UnsupportedScheme {
                url: args.url.clone(),
                scheme: url.scheme().to_string(),
            });
        }
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
        let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
        let api_host = Url::parse(&credentials.base_url)
            .ok()
            .and_then(|base| base.host_str().map(str::to_ascii_lowercase));
        let slack_host = host == "slack.com"
            || host.ends_with(".slack.com")
            || host.ends_with(".slack-edge.com")
            || api_host.as_deref() == Some(host.as_str());
        if !slack_host {
            return Err(invalid(
                TOOL,
                format!("`url` is on {host}, not a Slack host; the bot token is only sent to Slack (slack.com, *.slack.com, *.slack-edge.com) or the API address"),
            ));
        }
        let download = self
            .api
            .slack(&credentials)?
            .download(&url, max_bytes, credentials.timeout)
            .await?;
        let mut result = JsonObject::new();
        result.insert("ok".into(), true.into());
        result.insert("url".into(), url.as_str().into());
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
    fn emoji_names_lose_their_colons() {
        for (raw, name) in [
            (":tada:", "tada"),
            ("thumbsup", "thumbsup"),
            (" :x: ", "x"),
            ("::", "::"),
        ] {
            assert_eq!(emoji_name(raw), name, "{raw}");
        }
    }
}
