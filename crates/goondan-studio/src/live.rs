//! The live feed: new runtime events of a swarm as server-sent events.
//!
//! It tails the instances' `runtime-events.jsonl` files by polling their
//! sizes (every `Limits::live_poll_interval`, 50 ms by default), which
//! works the same whether a swarm runs, restarts or has stopped, needs
//! nothing from the orchestrator, and sees instances created after the
//! stream began (the folder list is read again every second). A line is
//! sent only once it is complete (ends with a newline), so a write in
//! progress is never sent half. Each event goes out as one SSE `data:`
//! line holding the stored event with `instance` (the folder name) added.
//! Reading is `goondan_store::follow` (at most 1 MiB per file per poll); a
//! line over the Studio's line cap (`Limits::max_line_bytes`) is not sent,
//! and at most the cap plus one poll's read of it is ever held.
//!
//! Chosen over subscribing through the control socket: that would need
//! a running orchestrator, a new request type and a fan-out in its main
//! loop, and would still not cover a swarm that is not running.

use crate::data::{instance_dirs, tagged};
use axum::body::Bytes;
use goondan_store::follow::FollowedLog;
use goondan_store::{InstancePaths, WorkspacePaths};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often the folder list is read again.
const RESCAN_INTERVAL: Duration = Duration::from_secs(1);
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// Starts following `workspace` (only the instance `only`, when given)
/// from the current end of each file. The returned receiver yields SSE
/// frames; the task ends when it is dropped.
/// A line longer than `max_line_bytes` is not sent.
pub(crate) fn follow(
    workspace: WorkspacePaths,
    only: Option<String>,
    poll_interval: Duration,
    max_line_bytes: usize,
) -> mpsc::Receiver<Bytes> {
    let (sender, receiver) = mpsc::channel::<Bytes>(256);
    tokio::spawn(async move {
        let mut followed: HashMap<String, FollowedLog> = HashMap::new();
        // Everything present now is history (the page loads it itself);
        // instances that appear later are followed from their start.
        rescan(
            &workspace,
            only.as_deref(),
            &mut followed,
            true,
            max_line_bytes,
        );
        let mut last_rescan = Instant::now();
        let mut last_sent = Instant::now();
        if sender
            .send(Bytes::from_static(b"event: ready\ndata: {}\n\n"))
            .await
            .is_err()
        {
            return;
        }
        loop {
            tokio::time::sleep(poll_interval).await;
            if sender.is_closed() {
                return;
            }
            if last_rescan.elapsed() >= RESCAN_INTERVAL {
                rescan(
                    &workspace,
                    only.as_deref(),
                    &mut followed,
                    false,
                    max_line_bytes,
                );
                last_rescan = Instant::now();
            }
            let mut frames = Vec::new();
            for (instance, file) in followed.iter_mut() {
                // A read that fails (the file went away between looks) is
                // tried again on the next poll.
                for line in file.new_lines().unwrap_or_default() {
                    let Ok(line) = std::str::from_utf8(&line) else {
                        continue;
                    };
                    if let Some(event) = tagged(line, instance) {
                        frames.push(format!("data: {event}\n\n"));
                    }
                }
            }
            if frames.is_empty() && last_sent.elapsed() >= KEEP_ALIVE_INTERVAL {
                frames.push(": keep-alive\n\n".to_string());
            }
            for frame in frames {
                if sender.send(Bytes::from(frame)).await.is_err() {
                    return;
                }
                last_sent = Instant::now();
            }
        }
    });
    receiver
}

fn rescan(
    workspace: &WorkspacePaths,
    only: Option<&str>,
    followed: &mut HashMap<String, FollowedLog>,
    from_end: bool,
    max_line_bytes: usize,
) {
    for (name, dir) in instance_dirs(workspace) {
        if only.is_some_and(|only| only != name) || followed.contains_key(&name) {
            continue;
        }
        let path = InstancePaths::from_dir(&dir).runtime_events_log();
        let offset = if from_end {
            std::fs::metadata(&path).map_or(0, |metadata| metadata.len())
        } else {
            0
        };
        followed.insert(name, FollowedLog::from_offset(path, offset, max_line_bytes));
    }
}
