//! Tool execution types (`shared-types.md` §7, `tool.md` §13) and the
//! `resource__export` naming rule.

use crate::json::{JsonObject, JsonValue};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The identity of the work a tool runs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionContext {
    /// The agent.
    pub agent_name: String,
    /// Its instance.
    pub instance_key: String,
    /// The current Turn.
    pub turn_id: String,
    /// The trace of the chain.
    pub trace_id: String,
}

/// A call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call id.
    pub id: String,
    /// The catalog name (`resource__export`).
    pub name: String,
    /// The arguments.
    pub args: JsonObject,
}

/// `ok` or `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallStatus {
    /// The handler returned a value.
    Ok,
    /// The call failed; see `error`.
    Error,
}

/// The structured error of a failed call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolError {
    /// The error's class name, for example `ToolInputError`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What went wrong, cut to the tool's `errorMessageLimit`.
    pub message: String,
    /// A stable code such as `E_TOOL_NOT_IN_CATALOG`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// How to fix it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    /// Where to read more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help_url: Option<String>,
}

/// The outcome of one tool call. Tool failures are values of this type,
/// never exceptions that escape the Turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallResult {
    /// The call this answers.
    pub tool_call_id: String,
    /// The tool that ran (or was refused).
    pub tool_name: String,
    /// The handler's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<JsonValue>,
    /// `ok` or `error`.
    pub status: ToolCallStatus,
    /// Set when `status` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

impl ToolCallResult {
    /// A successful result.
    pub fn ok(call: &ToolCall, output: JsonValue) -> Self {
        ToolCallResult {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            output: Some(output),
            status: ToolCallStatus::Ok,
            error: None,
        }
    }

    /// A failed result.
    pub fn error(call: &ToolCall, error: ToolError) -> Self {
        ToolCallResult {
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            output: None,
            status: ToolCallStatus::Error,
            error: Some(error),
        }
    }

    /// True when `status` is `ok`.
    pub fn is_ok(&self) -> bool {
        self.status == ToolCallStatus::Ok
    }
}

/// Where a catalog item came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolSourceType {
    /// A Tool resource of the bundle.
    Config,
    /// Registered by an extension at run time.
    Extension,
    /// An MCP server.
    Mcp,
}

/// The origin of a catalog item (`tool.md` §13.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolSource {
    /// Config, extension or MCP.
    #[serde(rename = "type")]
    pub source_type: ToolSourceType,
    /// The resource, extension or server name.
    pub name: String,
    /// For an MCP tool: the extension that connected the server, and the
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpToolSource>,
}

impl ToolSource {
    /// A source without MCP details (`config` or `extension`).
    pub fn new(source_type: ToolSourceType, name: impl Into<String>) -> Self {
        ToolSource {
            source_type,
            name: name.into(),
            mcp: None,
        }
    }
}

/// Where an MCP tool came from: `source.mcp` of its catalog item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpToolSource {
    /// The Extension resource (the `mcp` extension) that registered it.
    pub extension_name: String,
    /// The server of that extension's `config.servers` that lists it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// One tool as the model sees it in a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCatalogItem {
    /// `resource__export`.
    pub name: String,
    /// Shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema object for the arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<JsonObject>,
    /// The origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ToolSource>,
}

/// The separator between a resource name and an export name.
pub const TOOL_NAME_SEPARATOR: &str = "__";

/// A parsed `resource__export` tool name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ToolName {
    /// The Tool resource (or extension tool group) name.
    pub resource: String,
    /// The export inside it.
    pub export: String,
}

impl ToolName {
    /// Builds a name, refusing empty parts and parts containing `__`.
    pub fn new(resource: &str, export: &str) -> Option<Self> {
        let valid = |part: &str| !part.is_empty() && !part.contains(TOOL_NAME_SEPARATOR);
        (valid(resource) && valid(export)).then(|| ToolName {
            resource: resource.to_string(),
            export: export.to_string(),
        })
    }

    /// Whether `name` may be the resource part of tool names a
    /// configuration makes up (an MCP server's, a remote A2A agent's): a
    /// plain identifier a model can echo (letters, digits, `-`, `_`),
    /// without the separator.
    pub fn is_plain_resource(name: &str) -> bool {
        !name.is_empty()
            && !name.contains(TOOL_NAME_SEPARATOR)
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    }

    /// Whether `name` follows the export name rule (`tool.md` §6.2):
    /// lowercase ASCII letters, digits, `_` and `-` only, without the
    /// separator `__`.
    pub fn is_export_name(name: &str) -> bool {
        !name.is_empty()
            && !name.contains(TOOL_NAME_SEPARATOR)
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    }

    /// The export name `name` becomes under the rule of
    /// [`ToolName::is_export_name`]: camelCase words split by `-`
    /// (`setChatAction` → `set-chat-action`, `getURL` → `get-url`), any
    /// other character outside the set a `-`, and runs of separators
    /// cut to one. A name that follows the rule is returned as it is.
    /// The loader suggests it, and the runtime answers a call by the old
    /// spelling with the tool of this name (see the runtime's Step).
    pub fn conforming_export(name: &str) -> String {
        if ToolName::is_export_name(name) {
            return name.to_string();
        }
        let chars: Vec<char> = name.chars().collect();
        let mut out = String::with_capacity(name.len() + 4);
        for (index, &c) in chars.iter().enumerate() {
            let previous = index.checked_sub(1).map(|i| chars[i]);
            let next = chars.get(index + 1).copied();
            if c.is_ascii_uppercase() {
                // A new word starts at an uppercase letter after a
                // lowercase one or a digit, or at the last capital of a run
                // followed by lowercase (`URLFetch` → `url-fetch`).
                let starts_word = previous.is_some_and(|p| {
                    p.is_ascii_lowercase()
                        || p.is_ascii_digit()
                        || (p.is_ascii_uppercase() && next.is_some_and(|n| n.is_ascii_lowercase()))
                });
                if starts_word {
                    out.push('-');
                }
                out.push(c.to_ascii_lowercase());
            } else if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' {
                out.push(c);
            } else {
                out.push('-');
            }
        }
        let mut collapsed = String::with_capacity(out.len());
        for c in out.chars() {
            if matches!(c, '-' | '_') && collapsed.ends_with(['-', '_']) {
                continue;
            }
            collapsed.push(c);
        }
        collapsed.trim_matches(['-', '_']).to_string()
    }

    /// Parses `resource__export`: exactly one separator, both sides non-empty.
    pub fn parse(text: &str) -> Option<Self> {
        let (resource, export) = text.split_once(TOOL_NAME_SEPARATOR)?;
        ToolName::new(resource, export)
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{TOOL_NAME_SEPARATOR}{}", self.resource, self.export)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_names_follow_the_double_underscore_rule() {
        let name = ToolName::parse("bash__exec").unwrap();
        assert_eq!(name.resource, "bash");
        assert_eq!(name.export, "exec");
        assert_eq!(name.to_string(), "bash__exec");
        for bad in ["bash", "__exec", "bash__", "a__b__c", "bash_exec"] {
            assert!(ToolName::parse(bad).is_none(), "{bad}");
        }
        assert!(ToolName::new("my__tool", "x").is_none());
    }

    #[test]
    fn must_allow_only_lowercase_letters_digits_underscore_and_dash_in_export_names() {
        for good in [
            "exec",
            "list-channels",
            "post_message",
            "v2",
            "set-chat-action",
        ] {
            assert!(ToolName::is_export_name(good), "{good}");
        }
        for bad in [
            "",
            "setChatAction",
            "download.file",
            "a__b",
            "naïve",
            "has space",
        ] {
            assert!(!ToolName::is_export_name(bad), "{bad}");
        }
    }

    #[test]
    fn conforming_export_names_split_camel_case_words() {
        for (old, new) in [
            ("setChatAction", "set-chat-action"),
            ("downloadFile", "download-file"),
            ("getURL", "get-url"),
            ("URLFetch", "url-fetch"),
            ("fetch2Pages", "fetch2-pages"),
            ("read.all", "read-all"),
            ("Read__All", "read_all"),
            ("exec", "exec"),
        ] {
            let conforming = ToolName::conforming_export(old);
            assert_eq!(conforming, new, "{old}");
            assert!(ToolName::is_export_name(&conforming), "{conforming}");
        }
    }

    #[test]
    fn results_round_trip() {
        let value = json!({
            "toolCallId": "c1",
            "toolName": "bash__exec",
            "status": "error",
            "error": {"name": "ToolError", "message": "nope", "code": "E_TOOL_NOT_IN_CATALOG", "suggestion": "use the catalog", "helpUrl": "https://x"}
        });
        let parsed: ToolCallResult = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
        let item = json!({"name": "bash__exec", "description": "run", "parameters": {"type": "object"}, "source": {"type": "config", "name": "bash"}});
        let parsed: ToolCatalogItem = serde_json::from_value(item.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), item);
    }

    #[test]
    fn must_name_an_mcp_tools_extension_and_server_in_its_source() {
        let item = json!({
            "name": "github__search",
            "source": {"type": "mcp", "name": "github", "mcp": {"extensionName": "mcp", "serverName": "github"}}
        });
        let parsed: ToolCatalogItem = serde_json::from_value(item.clone()).unwrap();
        let source = parsed.source.as_ref().unwrap();
        assert_eq!(source.source_type, ToolSourceType::Mcp);
        assert_eq!(
            source.mcp,
            Some(McpToolSource {
                extension_name: "mcp".into(),
                server_name: Some("github".into()),
            })
        );
        assert_eq!(serde_json::to_value(&parsed).unwrap(), item);
    }
}
