//! `tool-approval`: a person decides before a gated tool call runs.
//!
//! Configured per agent (`Agent.spec.extensions[].config`):
//!
//! ```yaml
//! extensions:
//!   - ref: Extension/tool-approval
//!     config:
//!       tools: [bash__exec, file-system__write]   # export names
//!       when:                                     # optional, every entry must match
//!         command: "rm *"                         # a glob, or
//!         path: "re:^/etc/"                       # a regex (`re:` or /…/)
//!       timeoutSeconds: 600                       # optional; none waits for ever
//!       onTimeout: deny                           # or approve
//! ```
//!
//! A gated call asks a person through the agent's operators
//! ([`goondan_runtime::operator`]): the question is recorded before the
//! Turn waits, so it survives any process dying, and `gdn approvals`
//! lists it. Approve runs the call once (with the person's arguments when
//! they edited them); deny gives the model a tool result that says who
//! denied it and why; the timeout applies `onTimeout`. The question is
//! settled before the call runs, so a crash while it runs closes it as
//! interrupted rather than running it twice.

use super::parse_config;
use futures_util::future::BoxFuture;
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, Question, ToolCallContext,
    ToolCallNext,
};
use goondan_types::{ApprovalDecision, JsonValue, ToolCall, ToolCallResult, ToolError, Verdict};
use regex::Regex;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The code of the tool result a denial gives the model.
pub const TOOL_DENIED: &str = "E_TOOL_DENIED";

/// `spec.config` of `tool-approval`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolApprovalConfig {
    /// Export names (`bash__exec`) whose calls wait for a person.
    pub tools: Vec<String>,
    /// Argument name → a glob, or a regex written `re:…` or `/…/`: the
    /// call is gated only when every named argument matches.
    pub when: BTreeMap<String, String>,
    /// Seconds to wait before `onTimeout` decides; none waits for ever.
    pub timeout_seconds: Option<u64>,
    /// What the timeout decides.
    pub on_timeout: Verdict,
}

impl Default for ToolApprovalConfig {
    fn default() -> Self {
        ToolApprovalConfig {
            tools: Vec::new(),
            when: BTreeMap::new(),
            timeout_seconds: None,
            on_timeout: Verdict::Deny,
        }
    }
}

/// The extension.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolApproval;

impl Extension for ToolApproval {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let config: ToolApprovalConfig = parse_config(api.name(), config)?;
        let mut when = Vec::with_capacity(config.when.len());
        for (argument, pattern) in &config.when {
            let matcher = compile(pattern).map_err(|error| {
                ExtensionInitError::new(format!(
                    "invalid spec.config.when.{argument} for extension {}: {error}",
                    api.name()
                ))
            })?;
            when.push((argument.clone(), matcher));
        }
        let tools: Vec<String> = config
            .tools
            .iter()
            .map(|tool| tool.trim().to_string())
            .filter(|tool| !tool.is_empty())
            .collect();
        if tools.is_empty() {
            return Ok(());
        }
        let layer = ToolApprovalLayer {
            tools,
            when,
            timeout: config.timeout_seconds.map(Duration::from_secs),
            on_timeout: config.on_timeout,
        };
        api.pipeline()
            .register::<ToolCallContext>(std::sync::Arc::new(layer), MiddlewareOptions::default());
        Ok(())
    }
}

/// A glob (`*`, `?`, `[…]`), or a regex written `re:…` or `/…/`, as one
/// anchored regex.
fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    if let Some(regex) = pattern.strip_prefix("re:") {
        return Regex::new(regex);
    }
    if let Some(regex) = pattern
        .strip_prefix('/')
        .and_then(|rest| rest.strip_suffix('/'))
        .filter(|regex| !regex.is_empty())
    {
        return Regex::new(regex);
    }
    let mut regex = String::from("(?s)^");
    let mut in_class = false;
    for c in pattern.chars() {
        match c {
            '[' if !in_class => {
                in_class = true;
                regex.push('[');
            }
            ']' if in_class => {
                in_class = false;
                regex.push(']');
            }
            '*' if !in_class => regex.push_str(".*"),
            '?' if !in_class => regex.push('.'),
            _ if in_class => regex.push(c),
            _ => regex.push_str(&regex::escape(&c.to_string())),
        }
    }
    regex.push('$');
    Regex::new(&regex)
}

/// The `toolCall` middleware.
#[derive(Debug)]
pub struct ToolApprovalLayer {
    tools: Vec<String>,
    when: Vec<(String, Regex)>,
    timeout: Option<Duration>,
    on_timeout: Verdict,
}

impl ToolApprovalLayer {
    /// True when a call of `tool` with `args` waits for a person.
    fn gates(&self, tool: &str, args: &goondan_types::JsonObject) -> bool {
        self.tools.iter().any(|gated| gated == tool)
            && self.when.iter().all(|(argument, matcher)| {
                args.get(argument).is_some_and(|value| match value {
                    JsonValue::String(text) => matcher.is_match(text),
                    other => matcher.is_match(&other.to_string()),
                })
            })
    }
}

fn refusal(ctx: &ToolCallContext, code: &str, message: String, suggestion: &str) -> ToolCallResult {
    let call = ToolCall {
        id: ctx.tool_call_id().to_string(),
        name: ctx.tool_name().to_string(),
        args: ctx.args.clone(),
    };
    ToolCallResult::error(
        &call,
        ToolError {
            name: Some("ToolApprovalError".into()),
            message,
            code: Some(code.into()),
            suggestion: Some(suggestion.into()),
            help_url: None,
        },
    )
}

fn denial_message(decision: &ApprovalDecision) -> String {
    let who = if decision.by == "timeout" {
        "nobody decided in time; the default".to_string()
    } else {
        decision.by.clone()
    };
    match decision
        .reason
        .as_deref()
        .filter(|reason| !reason.is_empty())
    {
        Some(reason) => format!("this call was denied by {who}: {reason}"),
        None => format!("this call was denied by {who}"),
    }
}

impl Middleware<ToolCallContext> for ToolApprovalLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut ToolCallContext,
        next: ToolCallNext<'a>,
    ) -> BoxFuture<'a, LayerResult<ToolCallContext>> {
        Box::pin(async move {
            if !self.gates(ctx.tool_name(), &ctx.args) {
                return next.run(ctx).await;
            }
            let key = ctx.tool_call_id().to_string();
            let question = Question {
                key: key.clone(),
                tool: Some(ctx.tool_name().to_string()),
                arguments: JsonValue::Object(ctx.args.clone()),
                question: None,
                timeout: self.timeout,
                on_timeout: self.on_timeout,
            };
            let decision = match ctx.ask_person(question).await {
                Ok(decision) => decision,
                Err(error) => {
                    return Ok(refusal(
                        ctx,
                        error.code(),
                        format!("this call needs a person's approval, and {error}"),
                        "run the swarm with `gdn run` so an operator can approve it",
                    ))
                }
            };
            if let Err(error) = ctx.settle_question(&key) {
                return Ok(refusal(
                    ctx,
                    error.code(),
                    error.to_string(),
                    "check that the instance folder is writable, then ask again",
                ));
            }
            match decision.verdict {
                Verdict::Approve => {
                    if let Some(JsonValue::Object(arguments)) = decision.arguments {
                        ctx.args = arguments;
                    }
                    next.run(ctx).await
                }
                Verdict::Deny => Ok(refusal(
                    ctx,
                    TOOL_DENIED,
                    denial_message(&decision),
                    "do not call it again with the same arguments; tell the user, or do something else",
                )),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_regexes_match_whole_values() {
        let glob = compile("rm *").unwrap();
        assert!(glob.is_match("rm -rf /"));
        assert!(!glob.is_match("echo rm -rf"));
        assert!(compile("file-?.txt").unwrap().is_match("file-1.txt"));
        assert!(compile("[ab]*").unwrap().is_match("banana"));
        assert!(
            !compile("a.b").unwrap().is_match("axb"),
            "a dot is literal in a glob"
        );
        assert!(compile("re:^/etc/").unwrap().is_match("/etc/passwd"));
        assert!(compile("/pass(wd)?$/").unwrap().is_match("/etc/passwd"));
        assert!(compile("re:(").is_err());
    }

    #[test]
    fn a_call_is_gated_by_its_tool_and_every_condition() {
        let layer = ToolApprovalLayer {
            tools: vec!["bash__exec".into()],
            when: vec![("command".into(), compile("rm *").unwrap())],
            timeout: None,
            on_timeout: Verdict::Deny,
        };
        let args = |command: &str| {
            let mut args = goondan_types::JsonObject::new();
            args.insert("command".into(), JsonValue::String(command.into()));
            args
        };
        assert!(layer.gates("bash__exec", &args("rm -rf build")));
        assert!(!layer.gates("bash__exec", &args("ls")));
        assert!(!layer.gates("bash__script", &args("rm -rf build")));
        assert!(!layer.gates("bash__exec", &goondan_types::JsonObject::new()));
    }

    #[test]
    fn config_is_strict_and_defaults_to_deny() {
        let config: ToolApprovalConfig =
            serde_json::from_value(serde_json::json!({"tools": ["bash__exec"]})).unwrap();
        assert_eq!(config.on_timeout, Verdict::Deny);
        assert!(serde_json::from_value::<ToolApprovalConfig>(
            serde_json::json!({"tools": [], "timeout": 3})
        )
        .is_err());
    }
}
