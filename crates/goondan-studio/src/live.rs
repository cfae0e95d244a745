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
//! A line over the Studio's line cap (`Limits::max_line_bytes`) is not
//! sent, and at most the cap plus one poll's read of it is ever held.
//!
//! Chosen over subscribing through the control socket: that would need
//! a running orchestrator, a new request type and a fan-out in its main
//! loop, and would still not cover a swarm that is not running.

use crate::data::{instance_dirs, tagged};
use axum::body::Bytes;
use goondan_store::{InstancePaths, WorkspacePaths};
use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often the folder list is read again.
const RESCAN_INTERVAL: Duration = Duration::from_secs(1);
/// A comment line this often keeps proxies from closing an idle stream.
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(15);
/// Bytes read from one file per poll, so one huge burst cannot hold the
/// task (the rest comes on the next poll).
const MAX_READ_PER_POLL: u64 = 1024 * 1024;

/// One followed file.
struct Followed {
    path: PathBuf,
    offset: u64,
    /// Bytes after the last newline, waiting for the rest of their line.
    partial: Vec<u8>,
    /// The line being appended is over the line cap: its bytes are
    /// dropped up to its newline, so a line that never ends cannot grow
    /// `partial` without bound.
    skipping: bool,
}

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
        let mut followed: HashMap<String, Followed> = HashMap::new();
        // Everything present now is history (the page loads it itself);
        // instances that appear later are followed from their start.
        rescan(&workspace, only.as_deref(), &mut followed, true);
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
                rescan(&workspace, only.as_deref(), &mut followed, false);
                last_rescan = Instant::now();
            }
            let mut frames = Vec::new();
            for (instance, file) in followed.iter_mut() {
                for line in read_new_lines(file, max_line_bytes) {
                    if let Some(event) = tagged(&line, instance) {
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
    followed: &mut HashMap<String, Followed>,
    from_end: bool,
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
        followed.insert(
            name,
            Followed {
                path,
                offset,
                partial: Vec::new(),
                skipping: false,
            },
        );
    }
}

/// The complete lines appended to `file` since the last call, leaving out
/// any longer than `max_line_bytes`.
fn read_new_lines(file: &mut Followed, max_line_bytes: usize) -> Vec<String> {
    let Ok(length) = std::fs::metadata(&file.path).map(|metadata| metadata.len()) else {
        return Vec::new();
    };
    if length < file.offset {
        // Deleted and made again (`gdn instance delete`): start over.
        file.offset = 0;
        file.partial.clear();
        file.skipping = false;
    }
    if length == file.offset {
        return Vec::new();
    }
    let Ok(mut handle) = std::fs::File::open(&file.path) else {
        return Vec::new();
    };
    if handle.seek(SeekFrom::Start(file.offset)).is_err() {
        return Vec::new();
    }
    let mut chunk = Vec::new();
    let wanted = (length - file.offset).min(MAX_READ_PER_POLL);
    if handle.take(wanted).read_to_end(&mut chunk).is_err() {
        return Vec::new();
    }
    file.offset += chunk.len() as u64;
    let mut new_bytes: &[u8] = &chunk;
    if file.skipping {
        let Some(newline) = chunk.iter().position(|&byte| byte == b'\n') else {
            return Vec::new();
        };
        new_bytes = &chunk[newline + 1..];
        file.skipping = false;
    }
    file.partial.extend_from_slice(new_bytes);
    let complete = match file.partial.iter().rposition(|&byte| byte == b'\n') {
        Some(last_newline) => {
            let rest = file.partial.split_off(last_newline + 1);
            std::mem::replace(&mut file.partial, rest)
        }
        None => Vec::new(),
    };
    if file.partial.len() > max_line_bytes {
        file.partial = Vec::new();
        file.skipping = true;
    }
    complete
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty() && line.len() <= max_line_bytes)
        .filter_map(|line| String::from_utf8(line.to_vec()).ok())
        .collect()
}
