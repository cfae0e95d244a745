//! `tool-approval`: a person decides before a gated tool call runs.
//!
//! Configured per agent (`Agent.spec.extensions[].config`), or once for a
//! whole Swarm (`Swarm.spec.policy.approvals`, the same fields plus
//! `agents`; the agent process registers it as [`SwarmApproval`]):
//!
//! ```yaml
//! extensions:
//!   - ref: Extension/tool-approval
//!     config:
//!       tools: [bash__exec, file-system__write]   # export names
//!       unless: ["ls *", "git status"]            # bash__exec: allowed commands
//!       when:                                     # optional, every entry must match
//!         path: "re:^/etc/"                       # a glob, or a regex (`re:` or /…/)
//!       timeoutSeconds: 600                       # optional; none waits for ever
//!       onTimeout: deny                           # or approve
//! ```
//!
//! For `bash__exec`, `when.command` and `unless` match the simple
//! commands the shell would run, as the [`shell`] module reads them, not
//! the command's text; a command it cannot read is gated.
//!
//! A gated call asks a person through the agent's operators
//! ([`goondan_runtime::operator`]): the question is recorded before the
//! Turn waits, so it survives any process dying, and `gdn approvals`
//! lists it. Approve runs the call once (with the person's arguments when
//! they edited them); deny gives the model a tool result that says who
//! denied it and why; the timeout applies `onTimeout`. The question is
//! settled before the call runs, so a crash while it runs closes it as
//! interrupted rather than running it twice.

mod shell;

use super::parse_config;
use futures_util::future::BoxFuture;
use goondan_config::approvals::{compile_pattern, SHELL_TOOL};
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, Question, ToolCallContext,
    ToolCallNext,
};
use goondan_types::{
    ApprovalDecision, JsonObject, JsonValue, ToolCall, ToolCallResult, ToolError, Verdict,
};
use regex::Regex;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The code of the tool result a denial gives the model.
pub const TOOL_DENIED: &str = "E_TOOL_DENIED";

/// The name, inside a call, of the Swarm gate's question: its key is
/// `<call id>/policy.approvals`, so it never meets the agent gate's
/// (the bare call id) and still belongs to the call on a resume.
const SWARM_QUESTION: &str = "policy.approvals";

/// `spec.config` of `tool-approval` (and the body of
/// `Swarm.spec.policy.approvals` without `agents`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolApprovalConfig {
    /// Export names (`bash__exec`) whose calls wait for a person.
    pub tools: Vec<String>,
    /// Argument name → a glob, or a regex written `re:…` or `/…/`: the
    /// call is gated only when every named argument matches. For
    /// `bash__exec`'s `command`, it matches when any simple command of
    /// the command matches, or the command cannot be read.
    pub when: BTreeMap<String, String>,
    /// Patterns of allowed `bash__exec` commands: a call is gated unless
    /// every simple command in it matches one of them.
    pub unless: Vec<String>,
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
            unless: Vec::new(),
            timeout_seconds: None,
            on_timeout: Verdict::Deny,
        }
    }
}

/// The extension, as an agent lists it.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolApproval;

impl Extension for ToolApproval {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        register(api, config, Scope::Agent)
    }
}

/// The Swarm's `policy.approvals` gate
/// ([`goondan_config::approvals::SWARM_GATE_ENTRY`]): the same gate,
/// registered innermost (the highest priority), so it sees the arguments
/// the tool will receive after every other middleware, and asking its
/// own question beside any agent gate's.
#[derive(Debug, Clone, Copy, Default)]
pub struct SwarmApproval;

impl Extension for SwarmApproval {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        register(api, config, Scope::Swarm)
    }
}

/// Whose gate a layer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Agent,
    Swarm,
}

fn register(
    api: &mut ExtensionApi<'_>,
    config: &JsonValue,
    scope: Scope,
) -> Result<(), ExtensionInitError> {
    let config: ToolApprovalConfig = parse_config(api.name(), config)?;
    let invalid = |field: String, pattern: &str, error: regex::Error| {
        ExtensionInitError::new(format!(
            "invalid {field} `{pattern}` for extension {}: {error}",
            api.name()
        ))
    };
    let mut when = Vec::with_capacity(config.when.len());
    for (argument, pattern) in &config.when {
        let matcher = compile_pattern(pattern)
            .map_err(|error| invalid(format!("spec.config.when.{argument}"), pattern, error))?;
        when.push((argument.clone(), matcher));
    }
    let mut unless = Vec::with_capacity(config.unless.len());
    for (index, pattern) in config.unless.iter().enumerate() {
        let matcher = compile_pattern(pattern)
            .map_err(|error| invalid(format!("spec.config.unless[{index}]"), pattern, error))?;
        unless.push(matcher);
    }
    let tools: Vec<String> = config
        .tools
        .iter()
        .map(|tool| tool.trim().to_string())
        .filter(|tool| !tool.is_empty())
        .collect();
    if !unless.is_empty() && !tools.iter().any(|tool| tool == SHELL_TOOL) {
        return Err(ExtensionInitError::new(format!(
            "spec.config.unless of extension {} allows {SHELL_TOOL} commands, but tools does not list {SHELL_TOOL}",
            api.name()
        )));
    }
    if tools.is_empty() {
        return Ok(());
    }
    let layer = ToolApprovalLayer {
        gate: Gate {
            tools,
            when,
            unless,
        },
        timeout: config.timeout_seconds.map(Duration::from_secs),
        on_timeout: config.on_timeout,
        scope,
    };
    let options = match scope {
        Scope::Agent => MiddlewareOptions::default(),
        Scope::Swarm => MiddlewareOptions::priority(i32::MAX),
    };
    api.pipeline()
        .register::<ToolCallContext>(std::sync::Arc::new(layer), options);
    Ok(())
}

/// Which calls wait for a person.
#[derive(Debug)]
struct Gate {
    tools: Vec<String>,
    when: Vec<(String, Regex)>,
    unless: Vec<Regex>,
}

/// A gate's verdict on one call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Gating {
    /// It runs without asking.
    Free,
    /// It waits; with why, when the command could not be read.
    Gated(Option<String>),
}

impl Gate {
    fn gates(&self, tool: &str, args: &JsonObject) -> Gating {
        if !self.tools.iter().any(|gated| gated == tool) {
            return Gating::Free;
        }
        let is_shell = tool == SHELL_TOOL;
        let reads_shell = is_shell
            && (!self.unless.is_empty()
                || self.when.iter().any(|(argument, _)| argument == "command"));
        let commands = reads_shell.then(|| shell_commands(args));
        for (argument, matcher) in &self.when {
            let matched = match (&commands, argument.as_str()) {
                (Some(Ok(commands)), "command") => commands.iter().any(|command| {
                    command
                        .deny_texts()
                        .iter()
                        .any(|text| matcher.is_match(text))
                }),
                (Some(Err(_)), "command") => true,
                _ => args.get(argument).is_some_and(|value| match value {
                    JsonValue::String(text) => matcher.is_match(text),
                    other => matcher.is_match(&other.to_string()),
                }),
            };
            if !matched {
                return Gating::Free;
            }
        }
        match commands {
            Some(Err(why)) => Gating::Gated(Some(format!(
                "the command is gated because what it runs cannot be known: {why}"
            ))),
            Some(Ok(commands)) if !self.unless.is_empty() => {
                let allowed = commands.iter().all(|command| {
                    let text = command.text();
                    self.unless.iter().any(|pattern| pattern.is_match(&text))
                });
                if allowed {
                    Gating::Free
                } else {
                    Gating::Gated(None)
                }
            }
            _ => Gating::Gated(None),
        }
    }
}

/// The simple commands of a `bash__exec` call, or why they cannot be
/// known: its `env` argument may not set what changes what runs.
fn shell_commands(args: &JsonObject) -> Result<Vec<shell::SimpleCommand>, shell::Unanalysable> {
    if let Some(JsonValue::Object(env)) = args.get("env") {
        for name in env.keys() {
            shell::check_variable(name)?;
        }
    }
    match args.get("command") {
        Some(JsonValue::String(command)) => shell::analyse(command),
        _ => Err(shell::Unanalysable::Syntax("no `command` string")),
    }
}

/// The `toolCall` middleware.
#[derive(Debug)]
pub struct ToolApprovalLayer {
    gate: Gate,
    timeout: Option<Duration>,
    on_timeout: Verdict,
    scope: Scope,
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
            let why = match self.gate.gates(ctx.tool_name(), &ctx.args) {
                Gating::Free => return next.run(ctx).await,
                Gating::Gated(why) => why,
            };
            let key = match self.scope {
                Scope::Agent => ctx.tool_call_id().to_string(),
                Scope::Swarm => {
                    goondan_types::approval::question_key(ctx.tool_call_id(), SWARM_QUESTION)
                }
            };
            let question = Question {
                key: key.clone(),
                tool: Some(ctx.tool_name().to_string()),
                arguments: JsonValue::Object(ctx.args.clone()),
                question: match (self.scope, why) {
                    (Scope::Agent, why) => why,
                    (Scope::Swarm, None) => Some("gated by the Swarm's policy.approvals".into()),
                    (Scope::Swarm, Some(why)) => {
                        Some(format!("gated by the Swarm's policy.approvals; {why}"))
                    }
                },
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

    fn gate(tools: &[&str], when: &[(&str, &str)], unless: &[&str]) -> Gate {
        Gate {
            tools: tools.iter().map(|tool| tool.to_string()).collect(),
            when: when
                .iter()
                .map(|(argument, pattern)| {
                    (argument.to_string(), compile_pattern(pattern).unwrap())
                })
                .collect(),
            unless: unless
                .iter()
                .map(|pattern| compile_pattern(pattern).unwrap())
                .collect(),
        }
    }

    fn command(command: &str) -> JsonObject {
        let mut args = JsonObject::new();
        args.insert("command".into(), JsonValue::String(command.into()));
        args
    }

    fn gated(gate: &Gate, command_text: &str) -> bool {
        gate.gates(SHELL_TOOL, &command(command_text)) != Gating::Free
    }

    #[test]
    fn a_deny_pattern_matches_every_simple_command_and_every_spelling() {
        let deny = gate(&[SHELL_TOOL], &[("command", "rm *")], &[]);
        let cases: &[(&str, bool)] = &[
            ("rm -rf build", true),
            ("/bin/rm x", true),
            ("rm	x", true),
            ("bash -c 'rm x'", true),
            ("true; rm x", true),
            ("\"rm\" x", true),
            ("r\\m x", true),
            ("$(echo rm) x", true),
            ("ls && echo `rm x`", true),
            ("xargs rm < list", true),
            ("find . -exec rm {} +", true),
            ("cat <<EOF\n$(whoami)\nEOF", true),
            ("ls -la", false),
            ("echo rm x", false),
            ("git rm x", false),
            ("find . -name x -delete", false),
            ("unlink x", false),
        ];
        for (text, expected) in cases {
            assert_eq!(gated(&deny, text), *expected, "{text:?}");
        }
        // Without `command` in `when`, text matching stays as it was.
        let by_cwd = gate(&[SHELL_TOOL], &[("cwd", "re:^/etc")], &[]);
        let mut args = command("ls");
        args.insert("cwd".into(), JsonValue::String("/etc/x".into()));
        assert_ne!(by_cwd.gates(SHELL_TOOL, &args), Gating::Free);
        assert_eq!(by_cwd.gates(SHELL_TOOL, &command("rm x")), Gating::Free);
    }

    #[test]
    fn an_allow_list_lets_through_only_commands_that_all_match() {
        let allow = gate(&[SHELL_TOOL], &[], &["ls *", "ls", "echo *", "cat *"]);
        let cases: &[(&str, bool)] = &[
            ("ls -la", false),
            ("ls | cat -n", false),
            ("echo $(ls)", false),
            ("/bin/ls x", false),
            ("", false),
            ("ls; rm x", true),
            ("echo `rm x`", true),
            ("find . -name x -delete", true),
            ("unlink x", true),
            ("./ls", true),
            ("$X", true),
            ("eval ls", true),
            ("sh script.sh", true),
            ("ls 'unterminated", true),
        ];
        for (text, expected) in cases {
            assert_eq!(gated(&allow, text), *expected, "{text:?}");
        }
        let mut args = command("ls");
        args.insert("env".into(), serde_json::json!({"LD_PRELOAD": "/tmp/x.so"}));
        assert_ne!(allow.gates(SHELL_TOOL, &args), Gating::Free);
    }

    #[test]
    fn a_command_that_cannot_be_read_says_why() {
        let deny = gate(&[SHELL_TOOL], &[("command", "rm *")], &[]);
        match deny.gates(SHELL_TOOL, &command("eval \"$X\"")) {
            Gating::Gated(Some(why)) => assert!(why.contains("`eval`"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn other_tools_match_their_arguments_as_text() {
        let layer = gate(&["file-system__write"], &[("path", "re:^/etc/")], &[]);
        let mut args = JsonObject::new();
        args.insert("path".into(), JsonValue::String("/etc/passwd".into()));
        assert_ne!(layer.gates("file-system__write", &args), Gating::Free);
        args.insert("path".into(), JsonValue::String("notes.md".into()));
        assert_eq!(layer.gates("file-system__write", &args), Gating::Free);
        assert_eq!(layer.gates(SHELL_TOOL, &command("rm x")), Gating::Free);
        assert_eq!(
            gate(&[SHELL_TOOL], &[("command", "rm *")], &[]).gates(SHELL_TOOL, &JsonObject::new()),
            Gating::Gated(Some(
                "the command is gated because what it runs cannot be known: it does not parse (no `command` string)".into()
            ))
        );
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
        let config: ToolApprovalConfig = serde_json::from_value(
            serde_json::json!({"tools": ["bash__exec"], "unless": ["ls *"]}),
        )
        .unwrap();
        assert_eq!(config.unless, vec!["ls *".to_string()]);
    }
}
