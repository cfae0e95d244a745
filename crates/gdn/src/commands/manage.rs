//! `gdn restart`, `gdn stop` and `gdn instance list|restart|delete`: act
//! on instance state and, through its control socket, on a running
//! orchestrator.
//!
//! The orchestrator is found from the bundle (`--config` or the current
//! folder) when one loads, its workspace keyed by the bundle's identity;
//! else from the one record under `runtime/active/`.

use crate::cli::{GlobalArgs, InstanceArgs, InstanceCommand, RestartArgs, StopArgs};
use crate::exit::Outcome;
use crate::project;
use anyhow::Context;
use goondan_orchestrator::control::{self, ControlRequest, ControlResponse};
use goondan_orchestrator::orchestrator::{InstanceStatus, RestartOutcome, RestartState};
use goondan_store::{ActiveSwarm, InstanceStore, InstanceSummary, StateRoot, WorkspacePaths};
use goondan_types::{JsonValue, ReloadTrigger, SwarmEvent, SwarmEventBase};
use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

/// The orchestrator a management command talks to.
pub(crate) struct Target {
    /// The System Root, scoped to the bundle when one loaded.
    pub(crate) state_root: StateRoot,
    /// The Swarm's workspace, when known.
    pub(crate) workspace: Option<WorkspacePaths>,
    pub(crate) socket: Option<PathBuf>,
}

/// Finds the orchestrator from the bundle, else from the only record under
/// `runtime/active/`.
pub(crate) fn target(global: &GlobalArgs) -> anyhow::Result<Target> {
    let state_root = project::state_root(global)?;
    let bundle_path = global.config.clone().unwrap_or_else(|| PathBuf::from("."));
    let bundle = goondan_config::load_bundle(&bundle_path, &Default::default())
        .ok()
        .and_then(|outcome| outcome.bundle);
    if let Some(bundle) = bundle {
        if let Some(swarm) = bundle.default_swarm() {
            let state_root = goondan_host::project::scoped_state_root(state_root, &bundle);
            let workspace = state_root.workspace(swarm.instance_key());
            return Ok(Target {
                state_root,
                socket: Some(workspace.control_socket()),
                workspace: Some(workspace),
            });
        }
    }
    let mut records = active_records(&state_root);
    let (workspace, socket) = match records.len() {
        1 => {
            let (workspace_id, record) = records.remove(0);
            (
                Some(state_root.workspace_by_id(&workspace_id)),
                Some(record.control_socket),
            )
        }
        0 => (None, None),
        _ => {
            let bundles: Vec<String> = records
                .iter()
                .map(|(_, record)| record.bundle_dir.display().to_string())
                .collect();
            anyhow::bail!(
                "several orchestrators run on {} (bundles {}); pass --config with one of them",
                state_root.path().display(),
                bundles.join(", ")
            );
        }
    };
    Ok(Target {
        state_root,
        workspace,
        socket,
    })
}

/// Every `runtime/active/<workspaceId>.json` that reads, with its id.
fn active_records(state_root: &StateRoot) -> Vec<(String, ActiveSwarm)> {
    let Ok(entries) = std::fs::read_dir(state_root.active_dir()) else {
        return Vec::new();
    };
    let mut records: Vec<(String, ActiveSwarm)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let path = entry.path();
            let workspace_id = path.file_stem()?.to_str()?.to_string();
            Some((workspace_id, ActiveSwarm::read(&path)?))
        })
        .collect();
    records.sort_by(|a, b| a.0.cmp(&b.0));
    records
}

async fn call(socket: &Path, request: ControlRequest) -> Option<ControlResponse> {
    control::call(socket, &request).await.ok()
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn not_running() -> Outcome {
    eprintln!("error[E_ORCHESTRATOR_NOT_RUNNING]: no orchestrator is running for this swarm");
    eprintln!("   = help: start one with `gdn run` (or `gdn run --detach`)");
    Outcome::Failure
}

/// `gdn stop [--wait SECONDS]`: asks the orchestrator to drain and stop,
/// then waits until its process is gone, so a script can rely on it.
pub(crate) fn stop(global: &GlobalArgs, args: &StopArgs) -> anyhow::Result<Outcome> {
    let target = target(global)?;
    let Some(socket) = target.socket else {
        return Ok(not_running());
    };
    let runtime = runtime()?;
    let Some(ControlResponse::Status { pid, swarm, .. }) =
        runtime.block_on(call(&socket, ControlRequest::Status))
    else {
        return Ok(not_running());
    };
    match runtime.block_on(call(&socket, ControlRequest::Shutdown)) {
        Some(ControlResponse::Stopping) => {}
        // It went away between the two requests.
        None => return Ok(not_running()),
        Some(other) => anyhow::bail!("the orchestrator answered a stop with {other:?}"),
    }
    if !global.quiet && !global.json {
        eprintln!("stopping Swarm/{swarm} (pid {pid}); its agents finish their Turns first");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.wait);
    let stopped = loop {
        if !process_alive(pid) {
            break true;
        }
        if std::time::Instant::now() >= deadline {
            break false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    if global.json {
        println!(
            "{}",
            serde_json::json!({ "swarm": swarm, "pid": pid, "stopped": stopped })
        );
    } else if stopped {
        println!("stopped Swarm/{swarm} (pid {pid})");
    } else {
        eprintln!(
            "error[E_ORCHESTRATOR_STILL_STOPPING]: pid {pid} has not exited after {} s",
            args.wait
        );
        eprintln!("   = help: it kills what is left at the end of its grace period; wait, or run `gdn stop` again");
    }
    Ok(if stopped {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

/// True while `pid` runs (a zombie waiting for its parent counts as gone).
fn process_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None).is_err() {
        return false;
    }
    #[cfg(target_os = "linux")]
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
        return !state.is_some_and(|rest| rest.starts_with('Z'));
    }
    true
}

/// `gdn restart [--agent NAME] [--fresh]`.
pub(crate) fn restart(global: &GlobalArgs, args: &RestartArgs) -> anyhow::Result<Outcome> {
    let target = target(global)?;
    let Some(socket) = target.socket else {
        return Ok(not_running());
    };
    let runtime = runtime()?;
    let started = std::time::Instant::now();
    // A whole-swarm restart re-reads the bundle first, as a new start
    // would: an invalid one is refused here and nothing restarts.
    let (swarm, project) = match &args.agent {
        Some(_) => (None, None),
        None => {
            let Some(ControlResponse::Status { swarm, .. }) =
                runtime.block_on(call(&socket, ControlRequest::Status))
            else {
                return Ok(not_running());
            };
            let project = match project::load(global, Some(&swarm), None)? {
                Ok(project) => project,
                Err(outcome) => {
                    eprintln!("the running swarm was left as it is");
                    return Ok(outcome);
                }
            };
            let info = Box::new(goondan_host::project::swarm_info(&project)?);
            (Some(info), Some(project))
        }
    };
    let request = ControlRequest::Restart {
        agent: args.agent.clone(),
        instance_key: None,
        fresh: args.fresh,
        swarm,
    };
    let Some(response) = runtime.block_on(call(&socket, request)) else {
        return Ok(not_running());
    };
    if let (
        Some(project),
        ControlResponse::Restarted {
            restarted,
            outcomes,
        },
    ) = (&project, &response)
    {
        let event = SwarmEvent::Reloaded {
            base: SwarmEventBase {
                timestamp: goondan_types::now_iso(),
                swarm_name: project.swarm_name.clone(),
                instance_key: project.instance_key.clone(),
                trigger: ReloadTrigger::Restart,
                reason: args.fresh.then(|| "--fresh".to_string()),
            },
            changed: Vec::new(),
            restarted: restarted.clone(),
            not_ready: outcomes
                .iter()
                .filter(|outcome| outcome.state != RestartState::Restarted)
                .map(|outcome| outcome.key.clone())
                .collect(),
            duration: started.elapsed().as_millis() as u64,
        };
        if let Err(error) = goondan_store::append_swarm_event(&project.workspace(), &event) {
            eprintln!(
                "warning[{}]: could not record the restart: {error}",
                error.code()
            );
        }
    }
    report_restart(global, &response)
}

fn report_restart(global: &GlobalArgs, response: &ControlResponse) -> anyhow::Result<Outcome> {
    let (restarted, outcomes) = match response {
        ControlResponse::Restarted {
            restarted,
            outcomes,
        } => (restarted, outcomes),
        ControlResponse::Failed {
            code,
            message,
            suggestion,
        } => {
            eprintln!("error[{code}]: {message}");
            if let Some(suggestion) = suggestion {
                eprintln!("   = help: {suggestion}");
            }
            return Ok(Outcome::Failure);
        }
        other => anyhow::bail!("the orchestrator answered a restart with {other:?}"),
    };
    // Only what the orchestrator saw happen is reported as done.
    let failed = outcomes
        .iter()
        .any(|outcome| outcome.state == RestartState::NotRunning);
    if global.json {
        println!(
            "{}",
            serde_json::json!({ "restarted": restarted, "outcomes": outcomes })
        );
    } else if restarted.is_empty() {
        println!("no running instance matched; nothing restarted");
    } else if outcomes.is_empty() {
        // An older orchestrator that does not report outcomes.
        for key in restarted {
            println!("restart requested for {key}");
        }
    } else {
        for outcome in outcomes {
            println!("{}", restart_line(outcome));
        }
    }
    Ok(if failed {
        Outcome::Failure
    } else {
        Outcome::Success
    })
}

/// One instance's restart, as it stands.
fn restart_line(outcome: &RestartOutcome) -> String {
    let key = &outcome.key;
    let pid = |pid: Option<u32>| pid.map_or_else(|| "?".to_string(), |pid| pid.to_string());
    match (outcome.state, outcome.old_pid) {
        (RestartState::Restarted, Some(old)) => format!(
            "restarted {key} (pid {old} exited; pid {} ready)",
            pid(outcome.new_pid)
        ),
        (RestartState::Restarted, None) => {
            format!("started {key} (pid {} ready)", pid(outcome.new_pid))
        }
        (RestartState::Stopping, old) => format!(
            "stopping {key}: pid {} is still finishing its Turn; it is killed at the end of the grace period and then replaced (not restarted yet)",
            pid(old)
        ),
        (RestartState::Starting, _) => format!(
            "stopped {key}; its new process (pid {}) is still starting (not ready yet)",
            pid(outcome.new_pid)
        ),
        (RestartState::NotRunning, _) => {
            let status = serde_json::to_value(outcome.status)
                .ok()
                .and_then(|value| value.as_str().map(str::to_string))
                .unwrap_or_default();
            format!("stopped {key}; no new process runs ({status}); see `gdn instance list` and `gdn logs --process {}`", key.replacen(':', "-", 1))
        }
    }
}

/// `gdn instance ...`.
pub(crate) fn instance(global: &GlobalArgs, args: &InstanceArgs) -> anyhow::Result<Outcome> {
    let target = target(global)?;
    let Some(command) = &args.command else {
        if std::io::stdin().is_terminal() && std::io::stdout().is_terminal() && !global.json {
            return super::instance_screen::run(global, &target);
        }
        return list(global, &target, None, Some(DEFAULT_LIST_LIMIT));
    };
    match command {
        InstanceCommand::List {
            agent,
            limit,
            all,
            cluster,
        } => {
            let limit = (!*all).then_some(*limit);
            match cluster {
                Some(urls) => super::cluster::list_instances(global, urls, agent.as_deref(), limit),
                None => list(global, &target, agent.as_deref(), limit),
            }
        }
        InstanceCommand::Restart { key, fresh } => {
            if let Some(response) = restart_live(&target, key, *fresh)? {
                return report_restart(global, &response);
            }
            if *fresh {
                let n_reset = for_matching(&target, key, |store, summary| {
                    store.reset_messages(&summary.agent_name, &summary.instance_key)
                })?;
                println!(
                    "no orchestrator is running; cleared the history of {n_reset} instance(s)"
                );
                return Ok(Outcome::Success);
            }
            Ok(not_running())
        }
        InstanceCommand::Export { key, cluster, to } => {
            super::cluster::export(global, key, cluster, to)
        }
        InstanceCommand::Delete { key, force } => {
            if !force && !confirm(key)? {
                eprintln!("error[E_CONFIRMATION_REQUIRED]: deleting {key} needs confirmation");
                eprintln!("   = help: pass --force to delete without asking");
                return Ok(Outcome::BadArguments);
            }
            let (n_deleted, stopped) = delete_instances(&target, key)?;
            if n_deleted == 0 && !stopped {
                eprintln!("error[E_INSTANCE_NOT_FOUND]: no instance matches `{key}`");
                eprintln!("   = help: list instances with `gdn instance list`");
                return Ok(Outcome::Failure);
            }
            println!(
                "deleted {n_deleted} instance(s) matching {key}{}",
                if stopped {
                    " (its processes were stopped)"
                } else {
                    ""
                }
            );
            Ok(Outcome::Success)
        }
    }
}

/// How many instances `gdn instance` lists when not on a terminal.
const DEFAULT_LIST_LIMIT: usize = 20;

/// Asks the running orchestrator to restart the instances `key` names;
/// `None` when none runs.
pub(super) fn restart_live(
    target: &Target,
    key: &str,
    fresh: bool,
) -> anyhow::Result<Option<ControlResponse>> {
    let Some(socket) = &target.socket else {
        return Ok(None);
    };
    let (agent, instance_key) = crate::project::split_key(key);
    let request = ControlRequest::Restart {
        agent,
        instance_key: Some(instance_key),
        fresh,
        swarm: None,
    };
    Ok(runtime()?.block_on(call(socket, request)))
}

/// Stops the processes of the instances `key` names (when an orchestrator
/// runs) and deletes their state: how many were deleted, and whether a
/// process was stopped.
pub(super) fn delete_instances(target: &Target, key: &str) -> anyhow::Result<(usize, bool)> {
    let mut stopped = false;
    if let Some(socket) = &target.socket {
        if let Some(response) = runtime()?.block_on(call(
            socket,
            ControlRequest::Delete {
                key: key.to_string(),
            },
        )) {
            stopped = matches!(response, ControlResponse::Deleted { stopped: true });
        }
    }
    let n_deleted = for_matching(target, key, |store, summary| {
        store.delete(&summary.agent_name, &summary.instance_key)
    })?;
    Ok((n_deleted, stopped))
}

fn matches(summary: &InstanceSummary, key: &str) -> bool {
    summary.instance_key == key || format!("{}:{}", summary.agent_name, summary.instance_key) == key
}

/// The stores of the target's workspace, or of every workspace when no
/// bundle names one.
pub(crate) fn stores(target: &Target) -> anyhow::Result<Vec<InstanceStore>> {
    if let Some(workspace) = &target.workspace {
        return Ok(vec![InstanceStore::new(workspace.clone())]);
    }
    let workspaces = target.state_root.workspaces_dir();
    let mut stores = Vec::new();
    let entries = match std::fs::read_dir(&workspaces) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(stores),
        Err(error) => {
            return Err(error).with_context(|| format!("reading {}", workspaces.display()))
        }
    };
    let mut ids: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_dir())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    ids.sort();
    for id in ids {
        stores.push(InstanceStore::new(target.state_root.workspace_by_id(&id)));
    }
    Ok(stores)
}

fn for_matching(
    target: &Target,
    key: &str,
    mut action: impl FnMut(&InstanceStore, &InstanceSummary) -> Result<(), goondan_store::StoreError>,
) -> anyhow::Result<usize> {
    let mut count = 0;
    for store in stores(target)? {
        for summary in store.list()? {
            if matches(&summary, key) {
                action(&store, &summary)?;
                count += 1;
            }
        }
    }
    Ok(count)
}

/// `gdn instance list`: the instances of `agent` (or all), the most
/// recently updated first, at most `limit` of them.
fn list(
    global: &GlobalArgs,
    target: &Target,
    agent: Option<&str>,
    limit: Option<usize>,
) -> anyhow::Result<Outcome> {
    let (rows, n_hidden) = instance_rows(target, agent, limit)?;
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "instances": rows, "hidden": n_hidden })
        )?;
        return Ok(Outcome::Success);
    }
    writeln!(
        out,
        "{:<24} {:<16} {:<11} {:<17} {:<25} {:<25} {:<25}",
        "INSTANCE KEY", "AGENT", "STATUS", "PROCESS", "CREATED", "UPDATED", "BACKOFF UNTIL"
    )?;
    for row in &rows {
        let text = |value: &JsonValue| match value {
            JsonValue::String(text) => text.clone(),
            JsonValue::Null => "-".to_string(),
            other => other.to_string(),
        };
        writeln!(
            out,
            "{:<24} {:<16} {:<11} {:<17} {:<25} {:<25} {:<25}",
            text(&row["instanceKey"]),
            text(&row["agentName"]),
            text(&row["status"]),
            text(&row["process"]),
            text(&row["createdAt"]),
            text(&row["updatedAt"]),
            text(&row["backoffUntil"]),
        )?;
    }
    if rows.is_empty() && !global.quiet {
        writeln!(
            out,
            "(no instances under {})",
            target.state_root.path().display()
        )?;
    }
    if n_hidden > 0 && !global.quiet {
        writeln!(out, "({n_hidden} more; pass --all or --limit)")?;
    }
    Ok(Outcome::Success)
}

/// The rows `gdn instance list` shows (JSON objects), the most recently
/// updated first, at most `limit`, and how many more there are.
pub(super) fn instance_rows(
    target: &Target,
    agent: Option<&str>,
    limit: Option<usize>,
) -> anyhow::Result<(Vec<JsonValue>, usize)> {
    let live = match &target.socket {
        Some(socket) => runtime()?.block_on(call(socket, ControlRequest::List)),
        None => None,
    };
    let live_instances: Vec<InstanceStatus> = match live {
        Some(ControlResponse::Instances { instances }) => instances,
        _ => Vec::new(),
    };
    let mut rows = Vec::new();
    for store in stores(target)? {
        for summary in store.list()? {
            if agent.is_some_and(|agent| agent != summary.agent_name) {
                continue;
            }
            let key = format!("{}:{}", summary.agent_name, summary.instance_key);
            let process = live_instances.iter().find(|instance| instance.key == key);
            let metadata = summary.metadata.as_ref();
            // The live orchestrator's view wins; without one, what the
            // next one would apply: the stored deadline, clamped like it
            // clamps it, and only while it lies ahead.
            let backoff_until = match process {
                Some(process) => process.backoff_until.clone(),
                None => metadata.and_then(|m| stored_backoff(m.backoff_until.as_deref())),
            };
            let consecutive_crashes = process
                .map(|p| p.consecutive_crashes)
                .or_else(|| metadata.map(|m| m.consecutive_crashes));
            rows.push(serde_json::json!({
                "workspace": store.workspace().workspace_id(),
                "instanceKey": summary.instance_key,
                "agentName": summary.agent_name,
                "status": metadata.map(|m| serde_json::to_value(m.status).unwrap_or(JsonValue::Null)),
                "process": process.map(|p| p.status),
                "pid": process.and_then(|p| p.pid),
                "createdAt": metadata.map(|m| m.created_at.clone()),
                "updatedAt": metadata.map(|m| m.updated_at.clone()),
                "consecutiveCrashes": consecutive_crashes,
                "backoffUntil": backoff_until,
            }));
        }
    }
    // RFC 3339 timestamps order as text; a row without one goes last.
    rows.sort_by(|a, b| {
        let updated = |row: &JsonValue| row["updatedAt"].as_str().map(str::to_string);
        updated(b).cmp(&updated(a))
    });
    let n_hidden = limit.map_or(0, |limit| rows.len().saturating_sub(limit));
    rows.truncate(rows.len() - n_hidden);
    Ok((rows, n_hidden))
}

/// A `backoffUntil` read from `metadata.json` as an orchestrator would
/// apply it: `None` once past, at most `MAX_BACKOFF_MS` from now.
fn stored_backoff(text: Option<&str>) -> Option<String> {
    let until = chrono::DateTime::parse_from_rfc3339(text?).ok()?;
    let until = std::time::SystemTime::from(until);
    let now = std::time::SystemTime::now();
    let remaining = until.duration_since(now).ok()?;
    let longest = std::time::Duration::from_millis(goondan_orchestrator::backoff::MAX_BACKOFF_MS);
    Some(goondan_types::iso_at(now + remaining.min(longest)))
}

fn confirm(key: &str) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        return Ok(false);
    }
    eprint!("delete every message and extension state of {key}? [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
