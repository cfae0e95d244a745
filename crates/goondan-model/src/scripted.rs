//! The `scripted` provider: answers from a YAML rules file next to the
//! bundle, for demos and tests that must run without a network or a key.
//!
//! The file is read once when the model is built. Each call looks at the
//! last message (a user message or a tool result), tries the rules in
//! order, and answers with the first match's text and/or tool calls. The
//! format is documented with an example in the crate README.

use crate::config::ModelConfig;
use crate::error::ModelError;
use crate::request::{FinishReason, ModelRequest, ModelResponse};
use crate::wire::tool_output_text;
use crate::{Model, StreamObserver};
use futures_util::future::BoxFuture;
use goondan_config::yaml;
use goondan_types::{ContentPart, JsonObject, JsonValue, ModelMessage, ToolResultOutput};
use regex::Regex;
use serde::Deserialize;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The rules file used when `options.rulesFile` is absent.
pub const DEFAULT_RULES_FILE: &str = "scripted-rules.yaml";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    rules: Vec<JsonValue>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    when: Option<WhenSpec>,
    reply: ReplySpec,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WhenSpec {
    #[serde(default)]
    user: Option<MatcherSpec>,
    #[serde(default)]
    tool_result: Option<MatcherSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum MatcherSpec {
    Contains(String),
    Full(FullMatcherSpec),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FullMatcherSpec {
    #[serde(default)]
    contains: Option<String>,
    #[serde(default)]
    regex: Option<String>,
    #[serde(default)]
    equals: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ReplySpec {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallSpec {
    name: String,
    #[serde(default)]
    args: JsonObject,
}

enum TextTest {
    Any,
    Contains(String),
    Equals(String),
    Regex(Regex),
}

struct Matcher {
    test: TextTest,
    tool_name: Option<String>,
}

struct Rule {
    label: String,
    agent: Option<String>,
    model: Option<String>,
    user: Option<Matcher>,
    tool_result: Option<Matcher>,
    reply: ReplySpec,
}

/// What a rule looks at: the conversation's last message.
enum Input {
    User(String),
    ToolResult {
        tool_name: String,
        text: String,
        json: Option<JsonValue>,
    },
    Nothing,
}

/// A model that answers from rules.
pub(crate) struct ScriptedModel {
    rules_file: PathBuf,
    rules: Vec<Rule>,
    agent: Option<String>,
}

impl ScriptedModel {
    /// Reads and checks the rules file named by `options.rulesFile`.
    pub(crate) fn load(config: &ModelConfig) -> Result<Self, ModelError> {
        let rules_name = match config.options.get("rulesFile") {
            None | Some(JsonValue::Null) => DEFAULT_RULES_FILE.to_string(),
            Some(JsonValue::String(name)) => name.clone(),
            Some(_) => {
                return Err(ModelError::Config {
                    message: format!(
                        "Model/{}: spec.options.rulesFile must be a string",
                        config.name
                    ),
                    suggestion: Some(format!("for example rulesFile: {DEFAULT_RULES_FILE}")),
                })
            }
        };
        let rules_file = config.resolve_path(&rules_name);
        let shown = rules_file.display().to_string();
        let failure = |message: String| ModelError::ScriptRules {
            rules_file: shown.clone(),
            message,
        };
        let text = read_limited(&rules_file)
            .map_err(|error| failure(format!("cannot read it: {error}")))?;
        // The config loader's reader, with its limits: a rules file is as
        // untrusted as a bundle file. Only the first document is read.
        let documents = yaml::parse(&text).map_err(|problem| ModelError::ScriptRulesYaml {
            rules_file: shown.clone(),
            problem,
        })?;
        let document = documents
            .into_iter()
            .next()
            .and_then(|document| document.root)
            .map_or(JsonValue::Null, |root| root.to_json());
        let file: RulesFile = serde_json::from_value(document)
            .map_err(|error| failure(format!("expected `rules: [...]`: {error}")))?;
        let mut rules = Vec::with_capacity(file.rules.len());
        for (index, raw) in file.rules.into_iter().enumerate() {
            let spec: RuleSpec = serde_json::from_value(raw)
                .map_err(|error| failure(format!("rules[{index}]: {error}")))?;
            let label = match &spec.name {
                Some(name) => format!("rules[{index}] ({name})"),
                None => format!("rules[{index}]"),
            };
            if spec.reply.text.is_none() && spec.reply.tool_calls.is_empty() {
                return Err(failure(format!(
                    "{label}: reply needs `text`, `toolCalls` or both"
                )));
            }
            let (user, tool_result) = match spec.when {
                Some(when) => (
                    when.user
                        .map(|m| matcher(m, &label, "user"))
                        .transpose()
                        .map_err(&failure)?,
                    when.tool_result
                        .map(|m| matcher(m, &label, "toolResult"))
                        .transpose()
                        .map_err(&failure)?,
                ),
                None => (None, None),
            };
            rules.push(Rule {
                label,
                agent: spec.agent,
                model: spec.model,
                user,
                tool_result,
                reply: spec.reply,
            });
        }
        Ok(ScriptedModel {
            rules_file,
            rules,
            agent: config.agent.clone(),
        })
    }

    fn answer(
        &self,
        request: &ModelRequest,
        observer: &dyn StreamObserver,
    ) -> Result<ModelResponse, ModelError> {
        let input = last_input(&request.messages);
        for rule in &self.rules {
            if rule.agent.is_some() && rule.agent != self.agent {
                continue;
            }
            if rule
                .model
                .as_ref()
                .is_some_and(|model| *model != request.model)
            {
                continue;
            }
            let Some(captures) = rule_matches(rule, &input) else {
                continue;
            };
            tracing::debug!(rule = %rule.label, "scripted rule matched");
            return Ok(self.reply(rule, request, &input, &captures, observer));
        }
        let described = match &input {
            Input::User(text) => format!("the last user text {:?}", preview(text)),
            Input::ToolResult {
                tool_name, text, ..
            } => format!("the last tool result of {tool_name} {:?}", preview(text)),
            Input::Nothing => {
                "a conversation that ends with neither a user message nor a tool result".into()
            }
        };
        Err(ModelError::ScriptNoMatch {
            rules_file: self.rules_file.display().to_string(),
            input: format!(
                "{described} (agent {}, model {})",
                self.agent.as_deref().unwrap_or("unknown"),
                request.model
            ),
            rules_tried: self.rules.len(),
        })
    }

    fn reply(
        &self,
        rule: &Rule,
        request: &ModelRequest,
        input: &Input,
        captures: &[String],
        observer: &dyn StreamObserver,
    ) -> ModelResponse {
        let fill = |template: &str| {
            fill_template(
                template,
                input,
                captures,
                self.agent.as_deref(),
                &request.model,
            )
        };
        let mut content = Vec::new();
        if let Some(text) = &rule.reply.text {
            let text = fill(text);
            if !text.is_empty() {
                observer.on_text_delta(&text);
            }
            content.push(ContentPart::text(text));
        }
        // Ids derive from the step number so a replayed or repeated run
        // produces the same conversation.
        let step = request
            .messages
            .iter()
            .filter(|message| matches!(message, ModelMessage::Assistant { .. }))
            .count()
            + 1;
        for (index, call) in rule.reply.tool_calls.iter().enumerate() {
            let args = fill_json(&JsonValue::Object(call.args.clone()), &fill);
            content.push(ContentPart::tool_call(
                format!("call_{step}_{}", index + 1),
                call.name.clone(),
                args,
            ));
        }
        ModelResponse {
            finish_reason: if rule.reply.tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            },
            content,
            usage: None,
        }
    }
}

impl Model for ScriptedModel {
    fn generate<'a>(
        &'a self,
        request: ModelRequest,
        observer: &'a dyn StreamObserver,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(async move { self.answer(&request, observer) })
    }
}

/// The file's text, reading at most one byte past the YAML size limit so a
/// huge (or endless) file is never loaded; [`yaml::parse`] refuses the
/// overlong text.
fn read_limited(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(yaml::MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    Ok(text)
}

fn matcher(spec: MatcherSpec, label: &str, field: &str) -> Result<Matcher, String> {
    let full = match spec {
        MatcherSpec::Contains(text) => {
            return Ok(Matcher {
                test: TextTest::Contains(text),
                tool_name: None,
            })
        }
        MatcherSpec::Full(full) => full,
    };
    if full.tool_name.is_some() && field == "user" {
        return Err(format!("{label}: when.user cannot have toolName"));
    }
    let n_tests = [
        full.contains.is_some(),
        full.regex.is_some(),
        full.equals.is_some(),
    ]
    .iter()
    .filter(|set| **set)
    .count();
    if n_tests > 1 {
        return Err(format!(
            "{label}: when.{field} takes one of contains, regex, equals"
        ));
    }
    let test = if let Some(text) = full.contains {
        TextTest::Contains(text)
    } else if let Some(text) = full.equals {
        TextTest::Equals(text)
    } else if let Some(pattern) = full.regex {
        TextTest::Regex(
            Regex::new(&pattern)
                .map_err(|error| format!("{label}: when.{field}.regex is invalid: {error}"))?,
        )
    } else {
        TextTest::Any
    };
    Ok(Matcher {
        test,
        tool_name: full.tool_name,
    })
}

/// The regex captures (`[0]` is the whole match) when the rule applies.
fn rule_matches(rule: &Rule, input: &Input) -> Option<Vec<String>> {
    match input {
        Input::User(text) => {
            if rule.tool_result.is_some() {
                return None;
            }
            match &rule.user {
                Some(matcher) => test_text(&matcher.test, text),
                None => Some(Vec::new()),
            }
        }
        Input::ToolResult {
            tool_name, text, ..
        } => {
            if rule.user.is_some() {
                return None;
            }
            match &rule.tool_result {
                Some(matcher) => {
                    if matcher
                        .tool_name
                        .as_ref()
                        .is_some_and(|name| name != tool_name)
                    {
                        return None;
                    }
                    test_text(&matcher.test, text)
                }
                None => Some(Vec::new()),
            }
        }
        Input::Nothing => (rule.user.is_none() && rule.tool_result.is_none()).then(Vec::new),
    }
}

fn test_text(test: &TextTest, text: &str) -> Option<Vec<String>> {
    match test {
        TextTest::Any => Some(Vec::new()),
        TextTest::Contains(needle) => text.contains(needle.as_str()).then(Vec::new),
        TextTest::Equals(expected) => (text.trim() == expected.trim()).then(Vec::new),
        TextTest::Regex(regex) => regex.captures(text).map(|captures| {
            captures
                .iter()
                .map(|group| group.map(|m| m.as_str().to_string()).unwrap_or_default())
                .collect()
        }),
    }
}

fn last_input(messages: &[ModelMessage]) -> Input {
    match messages.last() {
        Some(message @ ModelMessage::User { .. }) => Input::User(message.text()),
        Some(ModelMessage::Tool { content, .. }) => content
            .iter()
            .rev()
            .find_map(|part| match part {
                ContentPart::ToolResult {
                    tool_name, output, ..
                } => Some(Input::ToolResult {
                    tool_name: tool_name.clone(),
                    text: match output {
                        ToolResultOutput::Json(JsonValue::String(text)) => text.clone(),
                        other => tool_output_text(other),
                    },
                    json: match output {
                        ToolResultOutput::Json(value) | ToolResultOutput::ErrorJson(value) => {
                            Some(value.clone())
                        }
                        _ => None,
                    },
                }),
                _ => None,
            })
            .unwrap_or(Input::Nothing),
        _ => Input::Nothing,
    }
}

fn preview(text: &str) -> String {
    let mut preview: String = text.chars().take(200).collect();
    if preview.len() < text.len() {
        preview.push_str("...");
    }
    preview
}

/// Replaces `{{input}}`, `{{input.a.b}}` (a field of a JSON tool result),
/// `{{0}}`..`{{9}}` (regex captures), `{{agent}}` and `{{model}}`.
/// Unknown placeholders stay as written so a typo is visible.
fn fill_template(
    template: &str,
    input: &Input,
    captures: &[String],
    agent: Option<&str>,
    model: &str,
) -> String {
    let placeholder = placeholder_regex();
    placeholder
        .replace_all(template, |found: &regex::Captures<'_>| {
            let name = &found[1];
            let value = match name {
                "input" => Some(match input {
                    Input::User(text) | Input::ToolResult { text, .. } => text.clone(),
                    Input::Nothing => String::new(),
                }),
                "agent" => agent.map(str::to_string),
                "model" => Some(model.to_string()),
                _ => {
                    if let Ok(index) = name.parse::<usize>() {
                        captures.get(index).cloned()
                    } else if let Some(path) = name.strip_prefix("input.") {
                        json_field(input, path)
                    } else {
                        None
                    }
                }
            };
            value.unwrap_or_else(|| found[0].to_string())
        })
        .into_owned()
}

fn json_field(input: &Input, path: &str) -> Option<String> {
    let Input::ToolResult {
        json: Some(json), ..
    } = input
    else {
        return None;
    };
    let mut value = json;
    for key in path.split('.') {
        value = match value {
            JsonValue::Array(items) => items.get(key.parse::<usize>().ok()?)?,
            other => other.get(key)?,
        };
    }
    Some(match value {
        JsonValue::String(text) => text.clone(),
        other => other.to_string(),
    })
}

fn placeholder_regex() -> &'static Regex {
    static PLACEHOLDER: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    PLACEHOLDER.get_or_init(|| {
        Regex::new(r"\{\{\s*([A-Za-z0-9_.]+)\s*\}\}").expect("the placeholder pattern is valid")
    })
}

fn fill_json(value: &JsonValue, fill: &dyn Fn(&str) -> String) -> JsonValue {
    match value {
        JsonValue::String(text) => JsonValue::String(fill(text)),
        JsonValue::Array(items) => items.iter().map(|item| fill_json(item, fill)).collect(),
        JsonValue::Object(object) => JsonValue::Object(
            object
                .iter()
                .map(|(key, item)| (key.clone(), fill_json(item, fill)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_fill_known_placeholders_only() {
        let input = Input::ToolResult {
            tool_name: "agents__request".into(),
            text: "{\"response\":\"42\"}".into(),
            json: Some(json!({"response": "42", "items": [{"n": 1}]})),
        };
        let captures = vec!["all".to_string(), "first".to_string()];
        let cases = [
            ("got {{input.response}}", "got 42"),
            ("n={{ input.items.0.n }}", "n=1"),
            ("{{1}} by {{agent}} on {{model}}", "first by coord on m"),
            ("{{nope}} {{input.missing}}", "{{nope}} {{input.missing}}"),
        ];
        for (template, expected) in cases {
            assert_eq!(
                fill_template(template, &input, &captures, Some("coord"), "m"),
                expected
            );
        }
    }
}
