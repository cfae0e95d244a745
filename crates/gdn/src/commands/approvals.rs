//! `gdn approvals`, `gdn approve`, `gdn deny`: the tool calls (and
//! questions) waiting for a person. The list is read from each instance's
//! `approvals.jsonl` on disk, so it shows requests whose process is gone
//! too; a decision goes through the running orchestrator to the instance
//! that holds the request, and is reported only once that instance
//! recorded it.

use super::target::{call, stores, target, Target};
use crate::cli::{ApproveArgs, DenyArgs, GlobalArgs};
use crate::exit::Outcome;
use goondan_orchestrator::control::{ControlRequest, ControlResponse};
use goondan_store::WorkspacePaths;
use goondan_types::{ApprovalDecision, ApprovalRequest, JsonValue, Verdict};

/// Every request not decided yet in the target's workspaces, oldest
/// first.
fn waiting(target: &Target) -> anyhow::Result<Vec<ApprovalRequest>> {
    let mut waiting = Vec::new();
    for store in stores(target)? {
        waiting.extend(undecided(store.workspace())?);
    }
    waiting.sort_by(|a, b| a.requested_at.cmp(&b.requested_at));
    Ok(waiting)
}

/// The requests not decided yet of every instance of `workspace` (only
/// instances holding an approvals file are read); one unreadable file
/// fails the list rather than hiding its requests.
pub(crate) fn undecided(workspace: &WorkspacePaths) -> anyhow::Result<Vec<ApprovalRequest>> {
    let found = goondan_store::workspace_approvals(workspace)?;
    if let Some(error) = found.unreadable.into_iter().next() {
        return Err(error.into());
    }
    Ok(found.requests)
}

/// `gdn approvals [--json]`.
pub(crate) fn list(global: &GlobalArgs) -> anyhow::Result<Outcome> {
    let waiting = waiting(&target(global)?)?;
    if global.json {
        let rows: Vec<JsonValue> = waiting
            .iter()
            .map(|request| serde_json::to_value(request).unwrap_or(JsonValue::Null))
            .collect();
        println!("{}", JsonValue::Array(rows));
        return Ok(Outcome::Success);
    }
    if waiting.is_empty() {
        if !global.quiet {
            println!("nothing waits for a decision");
        }
        return Ok(Outcome::Success);
    }
    for request in &waiting {
        let what = request
            .tool
            .clone()
            .or_else(|| request.question.clone())
            .unwrap_or_default();
        println!(
            "{}  {}:{}  {}  {}",
            request.id,
            request.agent,
            request.instance_key,
            what,
            shorten(&request.arguments.to_string(), 100)
        );
        let mut when = format!("    asked {}", request.requested_at);
        if let Some(deadline) = &request.deadline {
            when.push_str(&format!(
                ", {} at {deadline}",
                request
                    .on_timeout
                    .as_str()
                    .replace("deny", "denied")
                    .replace("approve", "approved")
            ));
        }
        println!("{when}");
    }
    if !global.quiet {
        eprintln!("decide with `gdn approve ID` or `gdn deny ID --reason …`");
    }
    Ok(Outcome::Success)
}

fn shorten(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// `gdn approve ID [--reason R] [--args JSON]`.
pub(crate) fn approve(global: &GlobalArgs, args: &ApproveArgs) -> anyhow::Result<Outcome> {
    let arguments = match &args.args {
        None => None,
        Some(text) => match serde_json::from_str::<JsonValue>(text) {
            Ok(value @ JsonValue::Object(_)) => Some(value),
            Ok(_) | Err(_) => {
                crate::render::error(
                    "E_APPROVAL_ARGS",
                    &"--args must be one JSON object",
                    Some(r#"for example --args '{"command": "ls -l"}'"#),
                );
                return Ok(Outcome::BadArguments);
            }
        },
    };
    decide(
        global,
        &args.id,
        Verdict::Approve,
        args.reason.clone(),
        arguments,
    )
}

/// `gdn deny ID [--reason R]`.
pub(crate) fn deny(global: &GlobalArgs, args: &DenyArgs) -> anyhow::Result<Outcome> {
    decide(global, &args.id, Verdict::Deny, args.reason.clone(), None)
}

fn decide(
    global: &GlobalArgs,
    id: &str,
    verdict: Verdict,
    reason: Option<String>,
    arguments: Option<JsonValue>,
) -> anyhow::Result<Outcome> {
    let target = target(global)?;
    let Some(request) = waiting(&target)?
        .into_iter()
        .find(|request| request.id == id)
    else {
        crate::render::error(
            "E_APPROVAL_NOT_FOUND",
            &format_args!("no approval {id} waits for a decision"),
            Some("`gdn approvals` lists the ones that do"),
        );
        return Ok(Outcome::Failure);
    };
    if let Some(JsonValue::Object(arguments)) = &arguments {
        if let Some(problems) = schema_problems(global, &request, arguments) {
            crate::render::error(
                "E_APPROVAL_ARGS",
                &format_args!(
                    "--args do not match the parameters of {}: {}",
                    request.tool.as_deref().unwrap_or("the tool"),
                    problems.join("; ")
                ),
                Some("give arguments that match the tool's parameters schema, or approve without --args"),
            );
            return Ok(Outcome::BadArguments);
        }
    }
    let key = format!("{}:{}", request.agent, request.instance_key);
    let decision = ApprovalDecision {
        id: id.to_string(),
        verdict,
        arguments,
        reason,
        by: format!("cli:{}", who()),
        decided_at: goondan_types::now_iso(),
    };
    let response = match &target.socket {
        Some(socket) => crate::runtime::current_thread()?.block_on(call(
            socket,
            ControlRequest::Decide {
                key: key.clone(),
                decision,
            },
        )),
        None => None,
    };
    match response {
        Some(ControlResponse::Decided) => {
            if global.json {
                println!(
                    "{}",
                    serde_json::json!({"id": id, "instance": key, "verdict": verdict.as_str()})
                );
            } else if !global.quiet {
                let done = match verdict {
                    Verdict::Approve => "approved",
                    Verdict::Deny => "denied",
                };
                println!("{done} {id} ({key}); its Turn goes on");
            }
            Ok(Outcome::Success)
        }
        Some(ControlResponse::Failed(body)) => Ok(crate::answers::print_refusal(&body)),
        Some(other) => anyhow::bail!("the orchestrator answered a decision with {other:?}"),
        None => {
            crate::render::error(
                "E_ORCHESTRATOR_NOT_RUNNING",
                &format_args!("{id} waits in {key}, but no orchestrator runs to hand it the decision"),
                Some("start the swarm with `gdn run` (its Turn resumes and waits), then decide again"),
            );
            Ok(Outcome::Failure)
        }
    }
}

/// What is wrong with `arguments` against the parameters of the gated
/// tool, when the bundle declares that tool (a tool an extension or an MCP
/// server adds is checked only when the call runs); `None` when nothing
/// is, or nothing can be said here.
fn schema_problems(
    global: &GlobalArgs,
    request: &ApprovalRequest,
    arguments: &goondan_types::JsonObject,
) -> Option<Vec<String>> {
    let (resource, export) = request
        .tool
        .as_deref()?
        .split_once(goondan_types::tool::TOOL_NAME_SEPARATOR)?;
    let config = global
        .config
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("."));
    let bundle = goondan_config::load_bundle(&config, &Default::default())
        .ok()?
        .bundle?;
    let agent = bundle.agent(&request.agent)?;
    let tool = agent.tools().find(|tool| tool.metadata.name == resource)?;
    let export = tool.spec.exports.iter().find(|item| item.name == export)?;
    let problems = goondan_runtime::tool::argument_problems(&export.parameters, arguments).ok()?;
    (!problems.is_empty()).then_some(problems)
}

/// The name of the person at this terminal, as far as the system knows.
fn who() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| format!("uid-{}", nix::unistd::getuid()))
}
