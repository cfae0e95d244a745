//! `gdn logs`: runtime events (filtered by agent, trace or type) of a
//! swarm's instances and its reloads (`swarm.reloaded`,
//! `swarm.reload_rejected`), or the raw log of one process, optionally
//! followed.
//!
//! Every log is read from its end (`goondan_store::tail`) and followed
//! from there (`goondan_store::follow`), so `-l N` costs N lines whatever
//! the log's size, and a line over the store's default cap (16 MiB) is
//! skipped, never loaded (issue 35).

use crate::cli::{GlobalArgs, LogsArgs};
use crate::commands::target;
use crate::exit::Outcome;
use anyhow::Context;
use goondan_store::follow::FollowedLog;
use goondan_store::tail::{read_last_lines, TailLimits, DEFAULT_MAX_LINE_BYTES};
use goondan_store::{read_runtime_events, InstanceStore, RuntimeEventFilter};
use goondan_types::{RuntimeEvent, SwarmEvent};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

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
    let files: Vec<PathBuf> = store
        .list()?
        .into_iter()
        .map(|summary| goondan_store::InstancePaths::from_dir(summary.dir).runtime_events_log())
        .chain(std::iter::once(swarm_log.clone()))
        .collect();
    let filter = RuntimeEventFilter {
        agent_name: args.agent.clone(),
        trace_id: args.trace.clone(),
        event_type: args.event_type.clone(),
        last: Some(args.lines),
    };
    // (timestamp, line): runtime events of every instance and the swarm's
    // reloads, in the order they happened.
    let mut records: Vec<(String, String)> = Vec::new();
    for file in files.iter().filter(|file| **file != swarm_log) {
        records.extend(
            read_runtime_events(file, &filter)?
                .records
                .into_iter()
                .map(|record| (record.event.base().timestamp.clone(), record.line)),
        );
    }
    records.extend(
        goondan_store::read_swarm_events(&swarm_log)?
            .into_iter()
            .filter(|record| filter.matches_swarm_event(&record.event))
            .map(|record| (record.event.base().timestamp.clone(), record.line)),
    );
    records.sort_by(|a, b| a.0.cmp(&b.0));
    let skip = records.len().saturating_sub(args.lines);
    let mut out = std::io::stdout().lock();
    for (_, line) in &records[skip..] {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    if args.follow {
        let mut followed: Vec<FollowedLog> = files
            .iter()
            .map(|file| {
                let length = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
                FollowedLog::from_offset(file.clone(), length, DEFAULT_MAX_LINE_BYTES)
            })
            .collect();
        let follow_filter = RuntimeEventFilter {
            last: None,
            ..filter
        };
        loop {
            std::thread::sleep(Duration::from_millis(200));
            for file in followed.iter_mut() {
                for line in file.new_lines()? {
                    let line = String::from_utf8_lossy(&line);
                    let line = line.as_ref();
                    let shown = if let Ok(event) = serde_json::from_str::<RuntimeEvent>(line) {
                        follow_filter.matches(&event)
                    } else if let Ok(event) = serde_json::from_str::<SwarmEvent>(line) {
                        follow_filter.matches_swarm_event(&event)
                    } else {
                        false
                    };
                    if shown {
                        writeln!(out, "{line}")?;
                    }
                }
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
        std::thread::sleep(Duration::from_millis(200));
        for file in followed.iter_mut() {
            for line in file.new_lines()? {
                writeln!(out, "{}", String::from_utf8_lossy(&line))?;
            }
        }
        out.flush()?;
    }
}
