//! `gdn instance cancel|history|messages|fork|rewind|edit`: a person
//! steering a swarm
//! (docs/operator-control.md). Cancelling goes to the running
//! orchestrator; the history is read from disk; fork and rewind are asked
//! of the running orchestrator (`ControlRequest::Fork`, `Rewind`: it
//! holds the instances and rewrites them, as it does for the Studio), and
//! only with none running rewrite the instance on disk themselves
//! (`goondan_store::InstanceStore`, under its lock).
//! Their `--cluster` forms are in `commands/cluster.rs`, which
//! `commands/manage.rs` picks.

use super::target::{call, stores, Target};
use crate::cli::GlobalArgs;
use crate::exit::Outcome;
use crate::render::usd;
use goondan_client::ControlSocket;
use goondan_orchestrator::control::{ControlRequest, ControlResponse, EditChange};
use goondan_orchestrator::orchestrator::{CancelOutcome, CancelledTurn};
use goondan_store::{
    EditTarget, ExtensionStateSource, ForkReport, InstanceStore, InstanceSummary, RewindReport,
    TurnOutcome, TurnRecord, TurnRef,
};
use std::io::Write;

/// Who the log names for what this command does.
pub(crate) const BY: &str = "cli";

/// The widest input a history row shows, in characters.
const INPUT_COLUMN: usize = 48;

/// `gdn instance cancel KEY`.
pub(crate) fn cancel(global: &GlobalArgs, target: &Target, key: &str) -> anyhow::Result<Outcome> {
    let started = std::time::Instant::now();
    let no_orchestrator = || {
        crate::render::error(
            "E_NO_TURN_RUNNING",
            &format_args!("no orchestrator is running for this swarm, so no Turn of `{key}` runs"),
            Some("start the swarm with `gdn run --detach` in its bundle's folder; `gdn instance list` shows its instances"),
        );
        Outcome::Failure
    };
    let Some(socket) = &target.socket else {
        return Ok(no_orchestrator());
    };
    let request = ControlRequest::Cancel {
        key: key.to_string(),
        by: BY.to_string(),
    };
    let outcome = match crate::runtime::current_thread()?.block_on(call(socket, request))? {
        None => return Ok(no_orchestrator()),
        Some(ControlResponse::Cancelled(outcome)) => outcome,
        Some(ControlResponse::Failed(refused)) => {
            return Ok(crate::answers::print_refusal(&refused))
        }
        Some(other) => anyhow::bail!("the orchestrator answered a cancel with {other:?}"),
    };
    Ok(report_cancel(global, &outcome, started))
}

/// Prints what a cancel stopped (on one host or through a cluster's
/// owners), `started` being when the command began.
pub(crate) fn report_cancel(
    global: &GlobalArgs,
    outcome: &CancelOutcome,
    started: std::time::Instant,
) -> Outcome {
    let elapsed = started.elapsed().as_millis();
    if global.json {
        println!(
            "{}",
            serde_json::json!({
                "cancelled": outcome.cancelled,
                "ended": outcome.ended,
                "elapsedMs": elapsed,
            })
        );
    } else {
        for turn in &outcome.cancelled {
            println!(
                "cancelled the Turn of {} (event {})",
                turn.key, turn.event_id
            );
        }
        if outcome.ended {
            println!(
                "{} Turn(s) cancelled and closed in {elapsed} ms",
                outcome.cancelled.len()
            );
        }
    }
    if !outcome.ended {
        crate::render::warning(
            "E_TURN_STILL_RUNNING",
            &"the cancelled Turn had not ended when the wait ran out",
            Some("it ends at its next step; `gdn instance list` shows when the instance is idle"),
        );
    }
    Outcome::Success
}

/// `gdn instance history KEY [--archived]`.
pub(crate) fn history(
    global: &GlobalArgs,
    target: &Target,
    key: &str,
    archived: bool,
) -> anyhow::Result<Outcome> {
    let (store, summary) = match resolve(target, key)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let (agent, instance_key) = (&summary.agent_name, &summary.instance_key);
    // The person reading asked for all of it: no read budget; both logs
    // are streamed in blocks and only one summary per Turn is held.
    let history = store.history(agent, instance_key, Default::default())?;
    let archives = if archived {
        store.archived_history(agent, instance_key)?
    } else {
        Vec::new()
    };
    let mut out = std::io::stdout().lock();
    if global.json {
        let archives: Vec<serde_json::Value> = archives
            .iter()
            .map(|archive| {
                serde_json::json!({
                    "id": archive.id,
                    "dir": archive.dir,
                    "manifest": archive.manifest,
                    "turns": archive.turns,
                })
            })
            .collect();
        let mut report = serde_json::json!({
            "agentName": agent,
            "instanceKey": instance_key,
            "turns": history.turns,
        });
        if archived {
            report["archived"] = archives.into();
        }
        writeln!(out, "{report}")?;
        return Ok(Outcome::Success);
    }
    writeln!(
        out,
        "{agent}:{instance_key}: {} Turn(s)",
        history.turns.len()
    )?;
    if !history.turns.is_empty() {
        write_turn_table(&mut out, &history.turns)?;
    }
    if history.n_unreadable > 0 {
        writeln!(
            out,
            "({} line(s) of its log are not messages this version reads)",
            history.n_unreadable
        )?;
    }
    for archive in &archives {
        let manifest = &archive.manifest;
        writeln!(
            out,
            "\narchived by {} at {} (rewound to Turn {}), {}:",
            manifest.by,
            manifest.archived_at,
            manifest.rewound_to.turn_index,
            archive.dir.display()
        )?;
        if archive.turns.is_empty() {
            writeln!(out, "  (pending events only)")?;
        } else {
            write_turn_table(&mut out, &archive.turns)?;
        }
    }
    if archived && archives.is_empty() {
        writeln!(out, "(no archived Turns)")?;
    }
    Ok(Outcome::Success)
}

fn write_turn_table(out: &mut impl Write, turns: &[TurnRecord]) -> std::io::Result<()> {
    let rows: Vec<[String; 4]> = turns
        .iter()
        .map(|turn| {
            let index = turn
                .index
                .map_or_else(|| "?".to_string(), |index| index.to_string());
            let cost = turn.cost_usd.map_or_else(|| "-".to_string(), usd);
            let status = match &turn.outcome {
                TurnOutcome::Completed => "completed".to_string(),
                TurnOutcome::Failed { .. } => "failed".to_string(),
                TurnOutcome::Cancelled {
                    cancelled_by: Some(by),
                } => format!("cancelled ({by})"),
                TurnOutcome::Cancelled { cancelled_by: None } => "cancelled".to_string(),
                TurnOutcome::Unknown => "-".to_string(),
            };
            [index, cost, status, shorten(&turn.input, INPUT_COLUMN)]
        })
        .collect();
    // Columns as wide as their widest cell, so a long status (who
    // cancelled) or a large cost never pushes the next column out of line.
    let width = |column: usize, heading: &str| {
        rows.iter()
            .map(|row| row[column].chars().count())
            .chain([heading.len()])
            .max()
            .unwrap_or(0)
    };
    let (cost_width, status_width) = (width(1, "COST"), width(2, "STATUS"));
    writeln!(
        out,
        "{:>4}  {:<29} {:<24} {:>cost_width$}  {:<status_width$}  INPUT",
        "#", "TURN ID", "TIME", "COST", "STATUS"
    )?;
    for (turn, [index, cost, status, input]) in turns.iter().zip(&rows) {
        writeln!(
            out,
            "{index:>4}  {:<29} {:<24} {cost:>cost_width$}  {status:<status_width$}  {input}",
            turn.turn_id.as_deref().unwrap_or("-"),
            turn.created_at.as_deref().unwrap_or("-"),
        )?;
    }
    Ok(())
}

/// `text` cut to `width` characters, an ellipsis marking the cut.
fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// What `gdn instance fork` and `gdn instance rewind` were asked.
pub(crate) struct Rewrite<'a> {
    /// The instance, as typed.
    pub(crate) key: &'a str,
    /// The Turn, as typed.
    pub(crate) turn: &'a str,
    /// Cancel a running Turn first.
    pub(crate) cancel: bool,
}

/// `gdn instance fork KEY --at TURN [--as NEWKEY] [--cancel]`.
pub(crate) fn fork(
    global: &GlobalArgs,
    target: &Target,
    asked: &Rewrite<'_>,
    new_key: Option<&str>,
) -> anyhow::Result<Outcome> {
    let (store, summary) = match resolve(target, asked.key)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let (agent, instance_key) = (summary.agent_name.as_str(), summary.instance_key.as_str());
    let request = ControlRequest::Fork {
        key: summary.routing_key().to_string(),
        at: asked.turn.to_string(),
        new_key: new_key.map(str::to_string),
        by: BY.to_string(),
        cancel: asked.cancel,
    };
    let report = match ask_orchestrator(target, &request)? {
        Some(ControlResponse::Forked { report, cancelled }) => {
            tell_cancelled(&cancelled);
            report
        }
        Some(ControlResponse::Failed(refused)) => {
            return Ok(crate::answers::print_refusal(&refused))
        }
        Some(other) => anyhow::bail!("the orchestrator answered a fork with {other:?}"),
        // No orchestrator runs, so no process writes: the lock is the only
        // guard needed.
        None => {
            let new_key =
                new_key.map_or_else(|| goondan_store::fork_key(instance_key), str::to_string);
            let turn = TurnRef::parse(asked.turn);
            match store.fork(agent, instance_key, &turn, &new_key, BY) {
                Ok(report) => report,
                Err(error) => return Ok(store_error(&error)),
            }
        }
    };
    print_fork(global, &report)?;
    Ok(Outcome::Success)
}

fn print_fork(global: &GlobalArgs, report: &ForkReport) -> anyhow::Result<()> {
    if global.json {
        println!("{}", serde_json::to_value(report)?);
    } else {
        println!(
            "forked {agent}:{} at Turn {} ({}) into {agent}:{}: {} message(s)",
            report.forked_from,
            report.at.turn_index,
            report.at.turn_id.as_deref().unwrap_or("id unknown"),
            report.instance_key,
            report.n_messages,
            agent = report.agent_name,
        );
        println!(
            "{}",
            state_line(report.extension_state, report.at.turn_index)
        );
    }
    warn_if_fallback(report.extension_state, report.at.turn_index, "the fork");
    Ok(())
}

/// `gdn instance rewind KEY --to TURN [--cancel]`.
pub(crate) fn rewind(
    global: &GlobalArgs,
    target: &Target,
    asked: &Rewrite<'_>,
) -> anyhow::Result<Outcome> {
    let (store, summary) = match resolve(target, asked.key)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let (agent, instance_key) = (summary.agent_name.as_str(), summary.instance_key.as_str());
    let request = ControlRequest::Rewind {
        key: summary.routing_key().to_string(),
        to: asked.turn.to_string(),
        by: BY.to_string(),
        cancel: asked.cancel,
    };
    let report = match ask_orchestrator(target, &request)? {
        Some(ControlResponse::Rewound { report, cancelled }) => {
            tell_cancelled(&cancelled);
            report
        }
        Some(ControlResponse::Failed(refused)) => {
            return Ok(crate::answers::print_refusal(&refused))
        }
        Some(other) => anyhow::bail!("the orchestrator answered a rewind with {other:?}"),
        None => match store.rewind(agent, instance_key, &TurnRef::parse(asked.turn), BY) {
            Ok(report) => report,
            Err(error) => return Ok(store_error(&error)),
        },
    };
    print_rewind(global, &report)?;
    Ok(Outcome::Success)
}

fn print_rewind(global: &GlobalArgs, report: &RewindReport) -> anyhow::Result<()> {
    let (agent, instance_key) = (&report.agent_name, &report.instance_key);
    if global.json {
        println!("{}", serde_json::to_value(report)?);
    } else {
        match &report.archive {
            Some(archive) => println!(
                "rewound {agent}:{instance_key} to Turn {} ({}): {} Turn(s), {} message(s){} archived in {}",
                report.to.turn_index,
                report.to.turn_id.as_deref().unwrap_or("id unknown"),
                archive.n_turns,
                archive.n_messages,
                if archive.n_pending_events > 0 {
                    format!(" and {} pending event(s)", archive.n_pending_events)
                } else {
                    String::new()
                },
                archive.dir.display()
            ),
            None => println!(
                "{agent}:{instance_key} already ends with Turn {}; nothing to rewind",
                report.to.turn_index
            ),
        }
        if report.archive.is_some() {
            println!(
                "{}",
                state_line(report.extension_state, report.to.turn_index)
            );
        }
    }
    if report.archive.is_some() {
        warn_if_fallback(report.extension_state, report.to.turn_index, "the instance");
    }
    Ok(())
}

/// `gdn instance messages KEY [--last N]`: the newest committed messages,
/// oldest first, each with its id, role and the start of its text.
pub(crate) fn messages(
    global: &GlobalArgs,
    target: &Target,
    key: &str,
    last: usize,
) -> anyhow::Result<Outcome> {
    let (store, summary) = match resolve(target, key)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let paths = store
        .workspace()
        .instance(&summary.agent_name, &summary.instance_key);
    let (lines, _) =
        goondan_store::tail::read_last_lines(&paths.base_log(), last, Default::default(), |_| {
            true
        })?;
    let messages: Vec<goondan_types::Message> = lines
        .iter()
        .filter_map(|line| serde_json::from_slice(line).ok())
        .collect();
    let pending = std::fs::metadata(paths.events_log()).is_ok_and(|file| file.len() > 0);
    if global.json {
        println!(
            "{}",
            serde_json::json!({"messages": messages, "pendingTurn": pending})
        );
        return Ok(Outcome::Success);
    }
    let mut out = std::io::stdout().lock();
    for message in &messages {
        let edited = if message
            .metadata
            .contains_key(goondan_store::EDIT_METADATA_KEY)
        {
            " (edited)"
        } else {
            ""
        };
        writeln!(
            out,
            "{:<30} {:<9} {}{edited}",
            message.id,
            message.data.role(),
            shorten(&message_line(&message.data), INPUT_COLUMN * 2),
        )?;
    }
    if pending {
        writeln!(
            out,
            "(an interrupted Turn's events are pending: it resumes at the next start)"
        )?;
    }
    Ok(Outcome::Success)
}

/// One line saying what a message holds: its text, then the tools it
/// calls or the results it carries.
fn message_line(message: &goondan_types::ModelMessage) -> String {
    use goondan_types::ContentPart;
    let mut pieces = vec![message.text()];
    for part in message.parts() {
        match part {
            ContentPart::ToolCall {
                tool_name, input, ..
            } => pieces.push(format!("calls {tool_name} {input}")),
            ContentPart::ToolResult {
                tool_name, output, ..
            } => pieces.push(match output.to_json() {
                goondan_types::JsonValue::String(text) => format!("{tool_name}: {text}"),
                value => format!("{tool_name}: {value}"),
            }),
            ContentPart::Image { .. } => pieces.push("[image]".to_string()),
            ContentPart::File { .. } => pieces.push("[file]".to_string()),
            _ => {}
        }
    }
    pieces.retain(|piece| !piece.is_empty());
    pieces.join("; ").replace(['\n', '\r'], " ")
}

/// `gdn instance edit KEY (--message ID --text T | --extension NAME
/// --state JSON) [--cancel]`: asked of the running orchestrator, which
/// holds the instance while it is written, and only with none running
/// written on disk here.
pub(crate) fn edit(
    global: &GlobalArgs,
    target: &Target,
    key: &str,
    change: EditChange,
    cancel: bool,
) -> anyhow::Result<Outcome> {
    let (store, summary) = match resolve(target, key)? {
        Ok(found) => found,
        Err(outcome) => return Ok(outcome),
    };
    let (agent, instance_key) = (summary.agent_name.as_str(), summary.instance_key.as_str());
    let request = ControlRequest::Edit {
        key: summary.routing_key().to_string(),
        change: change.clone(),
        by: BY.to_string(),
        cancel,
    };
    let report = match ask_orchestrator(target, &request)? {
        Some(ControlResponse::Edited { report, cancelled }) => {
            tell_cancelled(&cancelled);
            report
        }
        Some(ControlResponse::Failed(refused)) => {
            return Ok(crate::answers::print_refusal(&refused))
        }
        Some(other) => anyhow::bail!("the orchestrator answered an edit with {other:?}"),
        None => {
            let edited = match &change {
                EditChange::Message { message_id, text } => {
                    store.edit_message(agent, instance_key, message_id, text, BY)
                }
                EditChange::ExtensionState { extension, state } => {
                    store.edit_extension_state(agent, instance_key, extension, state, BY)
                }
            };
            match edited {
                Ok(report) => report,
                Err(error) => return Ok(store_error(&error)),
            }
        }
    };
    if global.json {
        println!("{}", serde_json::to_value(&report)?);
    } else {
        let what = match &report.record.target {
            EditTarget::Message { message_id } => format!("message {message_id}"),
            EditTarget::ExtensionState { extension } => format!("the state of {extension}"),
        };
        println!(
            "edited {what} of {agent}:{instance_key}; its next Turn runs on it (what it replaced is kept in {})",
            report.record_file.display()
        );
    }
    Ok(Outcome::Success)
}

/// The line saying where a fork's or a rewind's extension state came
/// from.
pub(crate) fn state_line(source: ExtensionStateSource, turn_index: usize) -> String {
    match source {
        ExtensionStateSource::Snapshot => {
            format!("extension state: as Turn {turn_index} left it (from its snapshot)")
        }
        ExtensionStateSource::Unchanged => {
            format!("extension state: unchanged since Turn {turn_index}")
        }
        ExtensionStateSource::CurrentFallback => {
            "extension state: the current one (see the warning)".to_string()
        }
    }
}

fn warn_if_fallback(source: ExtensionStateSource, turn_index: usize, who: &str) {
    if source.is_exact() {
        return;
    }
    crate::render::warning(
        "W_EXTENSION_STATE_CURRENT",
        &format_args!(
            "Turns after Turn {turn_index} ran before per-Turn extension state snapshots existed, so the state Turn {turn_index} left is unknown; {who} got the current extension state"
        ),
        Some("check the instance's extensions/ folder if an extension's state matters for it"),
    );
}

/// Sends a fork or a rewind to the running orchestrator, which holds
/// the instances and rewrites them; `None` when none listens (nothing
/// was asked, so the caller rewrites on disk itself). A failure after the
/// orchestrator took the request is an error, never a second attempt.
fn ask_orchestrator(
    target: &Target,
    request: &ControlRequest,
) -> anyhow::Result<Option<ControlResponse>> {
    let Some(socket) = &target.socket else {
        return Ok(None);
    };
    let socket = ControlSocket::new(socket);
    Ok(crate::runtime::current_thread()?.block_on(socket.call_if_running(request))?)
}

/// Says which running Turns a `--cancel` stopped first.
fn tell_cancelled(cancelled: &[CancelledTurn]) {
    for turn in cancelled {
        eprintln!("cancelled the running Turn of {} first", turn.key);
    }
}

/// The one instance `key` names (`agent:instanceKey`, or an instance key
/// only one agent has), with its store.
fn resolve(
    target: &Target,
    key: &str,
) -> anyhow::Result<Result<(InstanceStore, InstanceSummary), Outcome>> {
    let mut found = Vec::new();
    for store in stores(target)? {
        for summary in store.list()? {
            if summary.routing_key().is_named_by(key) {
                found.push((store.clone(), summary));
            }
        }
    }
    // `agent:key` names one instance even when another agent's key is
    // spelled the same.
    let exact = |summary: &InstanceSummary| summary.routing_key().to_string() == key;
    if found.len() > 1 && found.iter().any(|(_, summary)| exact(summary)) {
        found.retain(|(_, summary)| exact(summary));
    }
    match found.len() {
        1 => Ok(Ok(found.remove(0))),
        0 => {
            crate::render::error(
                "E_INSTANCE_NOT_FOUND",
                &format_args!("no instance matches `{key}`"),
                Some("list instances with `gdn instance list`"),
            );
            Ok(Err(Outcome::Failure))
        }
        _ => {
            let names: Vec<String> = found
                .iter()
                .map(|(_, summary)| summary.routing_key().to_string())
                .collect();
            crate::render::error(
                "E_INSTANCE_AMBIGUOUS",
                &format_args!(
                    "`{key}` names {} instances: {}",
                    names.len(),
                    names.join(", ")
                ),
                Some("name one as agent:instanceKey"),
            );
            Ok(Err(Outcome::Failure))
        }
    }
}

/// Prints a store refusal as every command prints coded errors.
fn store_error(error: &goondan_store::StoreError) -> Outcome {
    crate::render::error(error.code(), error, error.suggestion().as_deref());
    Outcome::Failure
}
