//! `gdn restart`, `gdn stop` and `gdn instance list|restart|delete`: act
//! on instance state and, through its control socket, on a running
//! orchestrator; `gdn instance cancel|history|fork|rewind` are
//! `operator.rs`'s.
//!
//! The orchestrator is found from the bundle (`--config` or the current
//! folder) when one loads, its workspace keyed by the bundle's identity;
//! else from the one record under `runtime/active/`.

use super::target::{
    call, delete_instances, for_matching, instance_rows, restart_live, target, Target,
};
use crate::cli::{GlobalArgs, InstanceArgs, InstanceCommand, RestartArgs, StopArgs};
use crate::exit::Outcome;
use crate::project;
use goondan_orchestrator::control::{ControlRequest, ControlResponse, EditChange};
use goondan_orchestrator::orchestrator::{RestartOutcome, RestartState};
use goondan_types::{JsonValue, ReloadTrigger, SwarmEvent, SwarmEventBase};
use std::io::{BufRead, IsTerminal, Write};

fn not_running() -> Outcome {
    crate::render::error(
        "E_ORCHESTRATOR_NOT_RUNNING",
        &"no orchestrator is running for this swarm",
        Some("start one with `gdn run` (or `gdn run --detach`)"),
    );
    Outcome::Failure
}

/// `gdn stop [--wait SECONDS]`: asks the orchestrator to drain and stop,
/// then waits until its process is gone, so a script can rely on it.
pub(crate) fn stop(global: &GlobalArgs, args: &StopArgs) -> anyhow::Result<Outcome> {
    let target = target(global)?;
    let Some(socket) = target.socket else {
        return Ok(not_running());
    };
    let runtime = crate::runtime::current_thread()?;
    let Some(ControlResponse::Status { pid, swarm, .. }) =
        runtime.block_on(call(&socket, ControlRequest::Status))?
    else {
        return Ok(not_running());
    };
    match runtime.block_on(call(&socket, ControlRequest::Shutdown))? {
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
        crate::render::error(
            "E_ORCHESTRATOR_STILL_STOPPING",
            &format_args!("pid {pid} has not exited after {} s", args.wait),
            Some("it kills what is left at the end of its grace period; wait, or run `gdn stop` again"),
        );
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
    let runtime = crate::runtime::current_thread()?;
    let started = std::time::Instant::now();
    // A whole-swarm restart re-reads the bundle first, as a new start
    // would: an invalid one is refused here and nothing restarts.
    let (swarm, project) = match &args.agent {
        Some(_) => (None, None),
        None => {
            let Some(ControlResponse::Status { swarm, .. }) =
                runtime.block_on(call(&socket, ControlRequest::Status))?
            else {
                return Ok(not_running());
            };
            let project = match project::load(global, Some(&swarm), None)? {
                Ok(project) => project,
                Err(outcome) => {
                    crate::render::after_error("the running swarm was left as it is");
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
    let Some(response) = runtime.block_on(call(&socket, request))? else {
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
        ControlResponse::Failed(refused) => {
            crate::answers::print_refusal(refused);
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
                if global.json {
                    println!("{}", serde_json::json!({ "cleared": n_reset, "key": key }));
                } else {
                    println!(
                        "no orchestrator is running; cleared the history of {n_reset} instance(s)"
                    );
                }
                return Ok(Outcome::Success);
            }
            Ok(not_running())
        }
        InstanceCommand::Cancel { key, cluster } => {
            match cluster.as_deref().filter(|urls| !urls.is_empty()) {
                Some(urls) => super::cluster::cancel(global, urls, key),
                None => super::operator::cancel(global, &target, key),
            }
        }
        InstanceCommand::History {
            key,
            archived,
            cluster,
        } => match cluster.as_deref().filter(|urls| !urls.is_empty()) {
            Some(_) if *archived => {
                crate::render::error(
                    "E_CLUSTER_UNSUPPORTED",
                    &"--archived lists the archive folders of one host; a cluster keeps each rewind's archive as an object in the cluster",
                    Some("leave out --archived; docs/operator-control.md (In a cluster) says where the archives are"),
                );
                Ok(Outcome::BadArguments)
            }
            Some(urls) => super::cluster::history(global, urls, key),
            None => super::operator::history(global, &target, key, *archived),
        },
        InstanceCommand::Fork {
            key,
            at,
            new_key,
            cancel,
            cluster,
        } => {
            let asked = super::operator::Rewrite {
                key,
                turn: at,
                cancel: *cancel,
            };
            match cluster.as_deref().filter(|urls| !urls.is_empty()) {
                Some(urls) => super::cluster::fork(global, urls, &asked, new_key.as_deref()),
                None => super::operator::fork(global, &target, &asked, new_key.as_deref()),
            }
        }
        InstanceCommand::Messages { key, last } => {
            super::operator::messages(global, &target, key, *last)
        }
        InstanceCommand::Edit {
            key,
            message,
            text,
            extension,
            state,
            cancel,
        } => {
            let change = match (message, text, extension, state) {
                (Some(message_id), Some(text), _, _) => EditChange::Message {
                    message_id: message_id.clone(),
                    text: text.clone(),
                },
                (_, _, Some(extension), Some(state)) => match serde_json::from_str(state) {
                    Ok(state) => EditChange::ExtensionState {
                        extension: extension.clone(),
                        state,
                    },
                    Err(error) => {
                        crate::render::error(
                            "E_CLI_ARGS",
                            &format_args!("--state is not JSON: {error}"),
                            Some("give the whole state as one JSON value, for example --state '{\"count\": 0}'"),
                        );
                        return Ok(Outcome::BadArguments);
                    }
                },
                // clap requires one of the two pairs.
                _ => unreachable!("gdn instance edit without --message or --extension"),
            };
            super::operator::edit(global, &target, key, change, *cancel)
        }
        InstanceCommand::Rewind {
            key,
            to,
            cancel,
            cluster,
        } => {
            let asked = super::operator::Rewrite {
                key,
                turn: to,
                cancel: *cancel,
            };
            match cluster.as_deref().filter(|urls| !urls.is_empty()) {
                Some(urls) => super::cluster::rewind(global, urls, &asked),
                None => super::operator::rewind(global, &target, &asked),
            }
        }
        InstanceCommand::Export { key, cluster, to } => {
            super::cluster::export(global, key, cluster, to)
        }
        InstanceCommand::Delete { key, force } => {
            if !force && !confirm(key)? {
                crate::render::error(
                    "E_CONFIRMATION_REQUIRED",
                    &format_args!("deleting {key} needs confirmation"),
                    Some("pass --force to delete without asking"),
                );
                return Ok(Outcome::BadArguments);
            }
            let (n_deleted, stopped) = delete_instances(&target, key)?;
            if n_deleted == 0 && !stopped {
                crate::render::error(
                    "E_INSTANCE_NOT_FOUND",
                    &format_args!("no instance matches `{key}`"),
                    Some("list instances with `gdn instance list`"),
                );
                return Ok(Outcome::Failure);
            }
            if global.json {
                println!(
                    "{}",
                    serde_json::json!({ "deleted": n_deleted, "key": key, "stopped": stopped })
                );
            } else if !global.quiet {
                println!(
                    "deleted {n_deleted} instance(s) matching {key}{}",
                    if stopped {
                        " (its processes were stopped)"
                    } else {
                        ""
                    }
                );
            }
            Ok(Outcome::Success)
        }
    }
}

/// How many instances `gdn instance` lists when not on a terminal.
const DEFAULT_LIST_LIMIT: usize = 20;

/// `gdn instance list`: the instances of `agent` (or all), the most
/// recently updated first, at most `limit` of them.
fn list(
    global: &GlobalArgs,
    target: &Target,
    agent: Option<&str>,
    limit: Option<usize>,
) -> anyhow::Result<Outcome> {
    let (rows, n_hidden) = instance_rows(target, agent, limit)?;
    super::target::say_what_is_shown(global, target);
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "instances": rows, "hidden": n_hidden })
        )?;
        return Ok(Outcome::Success);
    }
    let names: Vec<super::target::SwarmName> = rows
        .iter()
        .map(|row| super::target::SwarmName {
            package: row["package"].as_str().map(str::to_string),
            swarm: row["swarmName"].as_str().map(str::to_string),
            folder: row["bundleDir"].as_str().map(std::path::PathBuf::from),
            workspace_id: row["workspace"].as_str().unwrap_or_default().to_string(),
        })
        .collect();
    let swarms = super::target::shown_names(&names);
    let width = swarms.iter().map(String::len).max().unwrap_or(0).max(5);
    writeln!(
        out,
        "{:<width$} {:<24} {:<16} {:<11} {:<17} {:<25} {:<25} {:<25}",
        "SWARM",
        "INSTANCE KEY",
        "AGENT",
        "STATUS",
        "PROCESS",
        "CREATED",
        "UPDATED",
        "BACKOFF UNTIL"
    )?;
    for (row, swarm) in rows.iter().zip(&swarms) {
        let text = |value: &JsonValue| match value {
            JsonValue::String(text) => text.clone(),
            JsonValue::Null => "-".to_string(),
            other => other.to_string(),
        };
        writeln!(
            out,
            "{:<width$} {:<24} {:<16} {:<11} {:<17} {:<25} {:<25} {:<25}",
            swarm,
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
