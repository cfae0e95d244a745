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
//! Reading is `goondan_store::follow::WorkspaceFollower` (at most 1 MiB
//! per file per poll; a log cut back, truncated or replaced is neither
//! sent twice nor stalled on); a line over the Studio's line cap
//! (`Limits::max_line_bytes`) is not sent, and at most the cap plus one
//! poll's read of it is ever held. Only lines that are runtime events are
//! sent.
//!
//! Chosen over subscribing through the control socket: that would need
//! a running orchestrator, a new request type and a fan-out in its main
//! loop, and would still not cover a swarm that is not running.

use crate::data::tagged;
use axum::body::Bytes;
use goondan_store::follow::{FollowFrom, FollowOptions, WorkspaceFollower};
use goondan_store::WorkspacePaths;
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
        // Everything present now is history (the page loads it itself);
        // instances that appear later are followed from their start.
        let options = FollowOptions {
            instance: only,
            list_interval: RESCAN_INTERVAL,
            max_line_bytes,
            ..FollowOptions::default()
        };
        let mut follower = WorkspaceFollower::new(workspace, options, FollowFrom::Now);
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
            let mut frames: Vec<String> = follower
                .poll()
                .into_iter()
                .filter_map(|followed| tagged(&followed.line, followed.instance.as_deref()?))
                .map(|event| format!("data: {event}\n\n"))
                .collect();
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
