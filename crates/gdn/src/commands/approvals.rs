//! `gdn approvals`, `gdn approve`, `gdn deny`: the tool calls (and
//! questions) waiting for a person. On one host the list is read from
//! each instance's `approvals.jsonl` on disk, so it shows requests whose
//! process is gone too, and a decision goes through the running
//! orchestrator to the instance that holds the request. In a cluster
//! (`--cluster`, or `GOONDAN_CLUSTER`) the list is read from the
//! instances' logs in the cluster, and a decision goes to the host that
//! owns the instance now. Either way a decision is reported only once
//! the instance recorded it.

use super::target::{call, stores, target, Target};
use crate::cli::{ApprovalsArgs, ApproveArgs, DenyArgs, GlobalArgs};
use crate::exit::Outcome;
use goondan_host::cluster::client::ask_operator;
use goondan_host::cluster::operator::{OperatorRequest, OperatorResponse};
use goondan_orchestrator::control::{ControlRequest, ControlResponse};
use goondan_store::WorkspacePaths;
use goondan_types::{ApprovalDecision, ApprovalRequest, JsonValue, Verdict};

/// Where the requests are and where a decision goes.
enum Place<'a> {
    /// This host's System Root and orchestrator.
    Host(Target),
    /// A cluster at these URLs.
    Cluster(&'a str),
}

impl<'a> Place<'a> {
    /// The cluster `urls` name (an empty value names none), else this
    /// host's target.
    fn of(global: &GlobalArgs, urls: Option<&'a str>) -> anyhow::Result<Place<'a>> {
        Ok(match urls.filter(|urls| !urls.is_empty()) {
            Some(urls) => Place::Cluster(urls),
            None => Place::Host(target(global)?),
        })
    }

    /// Every request not decided yet, oldest first; an outcome when a
    /// cluster could not be read (printed already).
    fn waiting(
        &self,
        global: &GlobalArgs,
    ) -> anyhow::Result<Result<Vec<ApprovalRequest>, Outcome>> {
        match self {
            Place::Host(target) => waiting(target).map(Ok),
            Place::Cluster(urls) => {
                let workspace_id = match super::cluster::cluster_workspace(global)? {
                    Ok((_, workspace_id)) => workspace_id,
                    Err(outcome) => return Ok(Err(outcome)),
                };
                super::cluster::read_cluster(urls, async |cluster| {
                    goondan_cluster::approvals::waiting(cluster, &workspace_id).await
                })
            }
        }
    }
}

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

/// True when `id` names a request of the target's workspaces closed when
/// its Turn was cancelled (as far as their files remember).
fn closed_by_cancel(target: &Target, id: &str) -> anyhow::Result<bool> {
    for store in stores(target)? {
        let found = goondan_store::workspace_approvals(store.workspace())?;
        if found.cancelled.iter().any(|cancelled| cancelled == id) {
            return Ok(true);
        }
    }
    Ok(false)
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

/// `gdn approvals [--cluster URLS] [--json]`.
pub(crate) fn list(global: &GlobalArgs, args: &ApprovalsArgs) -> anyhow::Result<Outcome> {
    let waiting = match Place::of(global, args.cluster.as_deref())?.waiting(global)? {
        Ok(waiting) => waiting,
        Err(outcome) => return Ok(outcome),
    };
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
        // The deadline is when the default applies, not a decision made:
        // a past participle ("denied at") read as if someone had decided.
        if let Some(deadline) = &request.deadline {
            when.push_str(&format!(
                "; if nobody decides by {deadline}: {}",
                request.on_timeout.as_str()
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
    let place = Place::of(global, args.cluster.as_deref())?;
    decide(
        global,
        &place,
        &args.id,
        Verdict::Approve,
        args.reason.clone(),
        arguments,
    )
}

/// `gdn deny ID [--reason R]`.
pub(crate) fn deny(global: &GlobalArgs, args: &DenyArgs) -> anyhow::Result<Outcome> {
    let place = Place::of(global, args.cluster.as_deref())?;
    decide(
        global,
        &place,
        &args.id,
        Verdict::Deny,
        args.reason.clone(),
        None,
    )
}

fn decide(
    global: &GlobalArgs,
    place: &Place<'_>,
    id: &str,
    verdict: Verdict,
    reason: Option<String>,
    arguments: Option<JsonValue>,
) -> anyhow::Result<Outcome> {
    let waiting = match place.waiting(global)? {
        Ok(waiting) => waiting,
        Err(outcome) => return Ok(outcome),
    };
    let Some(request) = waiting.into_iter().find(|request| request.id == id) else {
        if let Place::Host(target) = place {
            if closed_by_cancel(target, id)? {
                let body = goondan_store::closed_by_cancel(id);
                crate::render::error(&body.code, &body.message, body.suggestion.as_deref());
                return Ok(Outcome::Failure);
            }
        }
        crate::render::error(
            "E_APPROVAL_NOT_FOUND",
            &format_args!("no approval {id} waits for a decision"),
            Some(match place {
                Place::Host(_) => {
                    "`gdn approvals` lists the ones that do (those of a cluster with --cluster)"
                }
                Place::Cluster(_) => "`gdn approvals` lists the ones that do",
            }),
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
    let key = goondan_types::RoutingKey::new(&request.agent, &request.instance_key).to_string();
    let decision = ApprovalDecision {
        id: id.to_string(),
        verdict,
        arguments,
        reason,
        by: format!("cli:{}", who()),
        decided_at: goondan_types::now_iso(),
    };
    let response = match place {
        Place::Host(target) => match &target.socket {
            Some(socket) => crate::runtime::current_thread()?.block_on(call(
                socket,
                ControlRequest::Decide {
                    key: key.clone(),
                    decision,
                },
            ))?,
            None => None,
        },
        Place::Cluster(urls) => match decide_in_cluster(global, urls, &request, decision)? {
            Ok(response) => Some(response),
            Err(outcome) => return Ok(outcome),
        },
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
                Some("start the swarm with `gdn run --detach` in its bundle's folder (its Turn resumes and waits), then decide again"),
            );
            Ok(Outcome::Failure)
        }
    }
}

/// Hands `decision` on `request` to the host that owns its instance now,
/// answered as the control socket answers; an outcome when the cluster
/// could not be asked (printed already).
fn decide_in_cluster(
    global: &GlobalArgs,
    urls: &str,
    request: &ApprovalRequest,
    decision: ApprovalDecision,
) -> anyhow::Result<Result<ControlResponse, Outcome>> {
    let workspace_id = match super::cluster::cluster_workspace(global)? {
        Ok((_, workspace_id)) => workspace_id,
        Err(outcome) => return Ok(Err(outcome)),
    };
    let asked = OperatorRequest::Decide {
        agent: request.agent.clone(),
        instance_key: request.instance_key.clone(),
        decision,
    };
    let answered = crate::runtime::current_thread()?.block_on(async {
        let cluster = goondan_host::cluster::client::connect_as_client(
            &goondan_cluster::ClusterUrls::parse(urls)?,
        )
        .await?;
        ask_operator(&cluster, &workspace_id, &asked).await
    });
    Ok(match answered {
        Ok(OperatorResponse::Decided) => Ok(ControlResponse::Decided),
        Ok(OperatorResponse::Failed(body)) => Ok(ControlResponse::Failed(body)),
        Ok(other) => anyhow::bail!("the instance's owner answered a decision with {other:?}"),
        Err(error) => Err(crate::render::host_error(
            &error,
            crate::project::format(global),
        )),
    })
}

/// What is wrong with `arguments` against the parameters of the gated
/// tool, as the bundle in `--config` declares it
/// ([`goondan_runtime::tool::gated_argument_problems`], which the Studio
/// calls too).
fn schema_problems(
    global: &GlobalArgs,
    request: &ApprovalRequest,
    arguments: &goondan_types::JsonObject,
) -> Option<Vec<String>> {
    let config = global
        .config
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("."));
    goondan_runtime::tool::gated_argument_problems(
        &config,
        &request.agent,
        request.tool.as_deref()?,
        arguments,
    )
}

/// The name of the person at this terminal, as far as the system knows.
fn who() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| format!("uid-{}", nix::unistd::getuid()))
}
