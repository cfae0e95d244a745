//! `gdn logs`: runtime events (filtered by agent, trace or type) of a
//! swarm's instances and its reloads (`swarm.reloaded`,
//! `swarm.reload_rejected`), or the raw log of one process, optionally
//! followed.
//!
//! On a terminal, events are a readable, colored table (time,
//! agent:instance, event, duration, tokens, and the tool, error code and
//! message); with `--json` or on a pipe, the JSON lines as stored. `-f`
//! follows either.
//!
//! Every log is read from its end (`goondan_store::tail`) and followed
//! from there, so `-l N` costs N lines whatever the log's size, and a line
//! over the store's default cap (16 MiB) is skipped, never loaded
//! (issue 35). `-f` on a swarm is `goondan_store::follow::WorkspaceFollower`:
//! it also follows the instances made after it started, from their first
//! line; on one process's log (`--process`) it is that file's
//! `FollowedLog`.

use crate::cli::{GlobalArgs, LogsArgs};
use crate::commands::target;
use crate::exit::Outcome;
use anyhow::Context;
use goondan_store::follow::{FollowFrom, FollowOptions, FollowedLog, WorkspaceFollower};
use goondan_store::tail::{read_last_lines, TailLimits, DEFAULT_MAX_LINE_BYTES};
use goondan_store::{read_runtime_events, InstanceStore, RuntimeEventFilter};
use goondan_types::{RuntimeEvent, SwarmEvent};
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// How often `-f` looks at the logs.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);
/// How often `-f` lists the instances again, for those made since.
const LIST_INTERVAL: Duration = Duration::from_secs(1);

/// Runs `gdn logs`.
pub(crate) fn run(global: &GlobalArgs, args: &LogsArgs) -> anyhow::Result<Outcome> {
    if let Some(urls) = &args.cluster {
        let filter = RuntimeEventFilter {
            agent_name: args.agent.clone(),
            trace_id: args.trace.clone(),
            event_type: args.event_type.clone(),
            last: Some(args.lines),
        };
        return super::cluster::logs(global, urls, &filter);
    }
    let target = target::target(global)?;
    let workspace = match (&args.instance_key, &target.workspace) {
        (Some(swarm_key), _) => target.state_root.workspace(swarm_key),
        (None, Some(workspace)) => workspace.clone(),
        (None, None) => {
            crate::render::error(
                "E_INSTANCE_NOT_FOUND",
                &"no swarm to read logs of",
                Some("run inside a bundle folder, pass --config, or pass --instance-key"),
            );
            return Ok(Outcome::ConfigError);
        }
    };
    if let Some(process) = &args.process {
        let paths: Vec<PathBuf> = args
            .stream
            .names()
            .iter()
            .map(|stream| workspace.runtime_log_file(process, stream))
            .collect();
        return tail_files(&paths, args.lines, args.follow);
    }
    let store = InstanceStore::new(workspace.clone());
    let swarm_log = goondan_store::swarm_events_log(&workspace);
    let filter = RuntimeEventFilter {
        agent_name: args.agent.clone(),
        trace_id: args.trace.clone(),
        event_type: args.event_type.clone(),
        last: Some(args.lines),
    };
    // (timestamp, line): runtime events of every instance and the swarm's
    // reloads, in the order they happened; and where each log was read to,
    // for following on from there.
    let mut records: Vec<(String, String)> = Vec::new();
    let mut read_to: HashMap<PathBuf, u64> = HashMap::new();
    for summary in store.list()? {
        let file = goondan_store::InstancePaths::from_dir(summary.dir).runtime_events_log();
        let page = read_runtime_events(&file, &filter)?;
        records.extend(
            page.records
                .into_iter()
                .map(|record| (record.event.base().timestamp.clone(), record.line)),
        );
        read_to.insert(file, page.resume_at);
    }
    let (reloads, swarm_read_to) = goondan_store::read_swarm_events_to(&swarm_log)?;
    records.extend(
        reloads
            .into_iter()
            .filter(|record| filter.matches_swarm_event(&record.event))
            .map(|record| (record.event.base().timestamp.clone(), record.line)),
    );
    read_to.insert(swarm_log, swarm_read_to);
    records.sort_by(|a, b| a.0.cmp(&b.0));
    let skip = records.len().saturating_sub(args.lines);
    let table = Table::new(global);
    let mut out = std::io::stdout().lock();
    if let Some(table) = &table {
        if !global.quiet {
            let name = target::SwarmName::of(&workspace);
            let folder = name
                .folder
                .as_ref()
                .map(|folder| format!(" ({})", folder.display()))
                .unwrap_or_default();
            writeln!(
                out,
                "{}",
                table.dim(&format!("Swarm {}{folder}", name.short()))
            )?;
        }
        writeln!(out, "{}", table.header())?;
    }
    for (_, line) in &records[skip..] {
        write_event(&mut out, table.as_ref(), line)?;
    }
    out.flush()?;
    if args.follow {
        // Every instance's log from where its history was read to, and
        // those of instances made since from their start.
        let options = FollowOptions {
            filter: RuntimeEventFilter {
                last: None,
                ..filter
            },
            swarm_events: true,
            list_interval: LIST_INTERVAL,
            ..FollowOptions::default()
        };
        let mut follower = WorkspaceFollower::new(workspace, options, FollowFrom::Offsets(read_to));
        loop {
            std::thread::sleep(FOLLOW_INTERVAL);
            for followed in follower.poll() {
                write_event(&mut out, table.as_ref(), &followed.line)?;
            }
            out.flush()?;
        }
    }
    Ok(Outcome::Success)
}

/// Prints the last `lines` lines of each process log in `paths` that
/// exists, then, with `follow`, what is appended to any of them.
fn tail_files(paths: &[PathBuf], lines: usize, follow: bool) -> anyhow::Result<Outcome> {
    let mut out = std::io::stdout().lock();
    let mut followed = Vec::new();
    for path in paths {
        // A missing log is followed from its start once it appears.
        let (last, report) = read_last_lines(path, lines, TailLimits::default(), |_| true)
            .with_context(|| format!("reading {}", path.display()))?;
        for line in &last {
            writeln!(out, "{}", String::from_utf8_lossy(line))?;
        }
        followed.push(FollowedLog::from_offset(
            path.clone(),
            report.end,
            DEFAULT_MAX_LINE_BYTES,
        ));
    }
    out.flush()?;
    if paths.iter().all(|path| !path.exists()) {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        crate::render::error(
            "E_LOG_NOT_FOUND",
            &format_args!("no log at {}", shown.join(" or ")),
            Some("process names are `orchestrator`, `<agent>-<instanceKey>` or `connection-<name>`; agents log to stderr only"),
        );
        return Ok(Outcome::Failure);
    }
    if !follow {
        return Ok(Outcome::Success);
    }
    loop {
        std::thread::sleep(FOLLOW_INTERVAL);
        for file in followed.iter_mut() {
            for line in file.new_lines()? {
                writeln!(out, "{}", String::from_utf8_lossy(&line))?;
            }
        }
        out.flush()?;
    }
}

/// One event: a row of `table`, or its JSON line as stored.
fn write_event(out: &mut impl Write, table: Option<&Table>, line: &str) -> std::io::Result<()> {
    match table {
        Some(table) => writeln!(out, "{}", table.row(line)),
        None => writeln!(out, "{line}"),
    }
}

/// The cells of one row of [`Table`].
struct Row<'a> {
    timestamp: &'a str,
    /// `agent:instance`, or `Swarm/<name>` for a reload.
    who: &'a str,
    kind: &'a str,
    duration: Option<u64>,
    tokens: Option<u64>,
    detail: &'a str,
    failed: bool,
}

/// The table `gdn logs` shows on a terminal.
struct Table {
    colored: bool,
}

impl Table {
    /// A table when stdout is a terminal and `--json` is not given.
    fn new(global: &GlobalArgs) -> Option<Table> {
        use std::io::IsTerminal;
        (!global.json && std::io::stdout().is_terminal()).then(|| Table {
            colored: crate::progress::colored(global),
        })
    }

    fn paint(&self, text: &str, ansi: &str) -> String {
        if self.colored {
            format!("\x1b[{ansi}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn dim(&self, text: &str) -> String {
        self.paint(text, "2")
    }

    fn header(&self) -> String {
        let header = format!(
            "{:<12} {:<24} {:<22} {:>9} {:>8}  DETAIL",
            "TIME", "AGENT:INSTANCE", "EVENT", "DURATION", "TOKENS"
        );
        self.paint(&header, "1")
    }

    /// `line` as a row; a line that is no event is shown as it is.
    fn row(&self, line: &str) -> String {
        if let Ok(event) = serde_json::from_str::<RuntimeEvent>(line) {
            return self.runtime_row(&event);
        }
        if let Ok(event) = serde_json::from_str::<SwarmEvent>(line) {
            return self.swarm_row(&event);
        }
        line.to_string()
    }

    fn runtime_row(&self, event: &RuntimeEvent) -> String {
        let base = event.base();
        let (duration, tokens, detail, failed) = match event {
            RuntimeEvent::TurnStarted { source, .. } => (
                None,
                None,
                source
                    .as_ref()
                    .map(|source| format!("from {}", source.name))
                    .unwrap_or_default(),
                false,
            ),
            RuntimeEvent::TurnCompleted {
                duration,
                token_usage,
                step_count,
                ..
            } => (
                Some(*duration),
                token_usage.as_ref().map(|usage| usage.total_tokens),
                format!("{step_count} step(s)"),
                false,
            ),
            RuntimeEvent::TurnFailed {
                duration,
                error_message,
                ..
            } => (Some(*duration), None, error_message.clone(), true),
            RuntimeEvent::StepStarted { step_index, .. } => {
                (None, None, format!("step {step_index}"), false)
            }
            RuntimeEvent::StepCompleted {
                duration,
                token_usage,
                tool_call_count,
                model,
                ..
            } => (
                Some(*duration),
                token_usage.as_ref().map(|usage| usage.total_tokens),
                format!(
                    "{tool_call_count} tool call(s){}",
                    model
                        .as_ref()
                        .map(|model| format!(", Model/{model}"))
                        .unwrap_or_default()
                ),
                false,
            ),
            RuntimeEvent::StepFailed {
                duration,
                error_message,
                ..
            } => (Some(*duration), None, error_message.clone(), true),
            RuntimeEvent::ToolCalled {
                tool_name,
                input_summary,
                ..
            } => (
                None,
                None,
                match input_summary
                    .as_deref()
                    .filter(|summary| !summary.is_empty())
                {
                    Some(summary) => format!("{tool_name} {summary}"),
                    None => tool_name.clone(),
                },
                false,
            ),
            RuntimeEvent::ToolCompleted {
                tool_name,
                status,
                duration,
                error_code,
                error_message,
                ..
            } => {
                let failed = *status == goondan_types::ToolCallStatus::Error;
                let mut detail = tool_name.clone();
                if let Some(code) = error_code {
                    detail.push_str(&format!(" [{code}]"));
                }
                if let Some(message) = error_message {
                    detail.push_str(&format!(" {message}"));
                }
                (Some(*duration), None, detail, failed)
            }
            RuntimeEvent::ToolFailed {
                tool_name,
                duration,
                error_message,
                ..
            } => (
                Some(*duration),
                None,
                format!("{tool_name} {error_message}"),
                true,
            ),
            RuntimeEvent::ToolProgress {
                tool_name, message, ..
            } => (None, None, format!("{tool_name} {message}"), false),
            RuntimeEvent::BudgetExceeded { error_message, .. } => {
                (None, None, error_message.clone(), true)
            }
        };
        self.format_row(Row {
            timestamp: &base.timestamp,
            who: &format!("{}:{}", base.agent_name, base.instance_key),
            kind: event.type_name(),
            duration,
            tokens,
            detail: &detail,
            failed,
        })
    }

    fn swarm_row(&self, event: &SwarmEvent) -> String {
        let base = event.base();
        let (duration, detail, failed) = match event {
            SwarmEvent::Reloaded {
                changed,
                restarted,
                duration,
                ..
            } => (
                Some(*duration),
                format!(
                    "changed {}; restarted {}",
                    changed.join(", "),
                    restarted.join(", ")
                ),
                false,
            ),
            SwarmEvent::ReloadRejected {
                code,
                error_message,
                ..
            } => (None, format!("[{code}] {error_message}"), true),
        };
        self.format_row(Row {
            timestamp: &base.timestamp,
            who: &format!("Swarm/{}", base.swarm_name),
            kind: event.type_name(),
            duration,
            tokens: None,
            detail: &detail,
            failed,
        })
    }

    fn format_row(&self, row: Row<'_>) -> String {
        let Row {
            timestamp,
            who,
            kind,
            duration,
            tokens,
            detail,
            failed,
        } = row;
        // `2026-01-01T12:34:56.789Z` → `12:34:56.789`: the day is in
        // `--json`; a terminal reads the time of day.
        let time = timestamp.get(11..23).unwrap_or(timestamp);
        let duration = duration.map(|ms| format!("{ms} ms")).unwrap_or_default();
        let tokens = tokens.map(|n| n.to_string()).unwrap_or_default();
        let kind_cell = format!("{kind:<22}");
        let kind_cell = if failed {
            self.paint(&kind_cell, "31")
        } else if kind.ends_with(".completed") || kind == "swarm.reloaded" {
            self.paint(&kind_cell, "32")
        } else {
            kind_cell
        };
        let detail = if failed {
            self.paint(detail, "31")
        } else {
            detail.to_string()
        };
        format!(
            "{} {who:<24} {kind_cell} {duration:>9} {tokens:>8}  {detail}",
            self.dim(&format!("{time:<12}"))
        )
        .trim_end()
        .to_string()
    }
}
