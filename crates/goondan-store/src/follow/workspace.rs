//! Every runtime-event log of one workspace, followed: the instances there
//! when it began and those made after, each from where the last look
//! stopped, filtered as `gdn logs` filters.
//!
//! The instances folder is listed again every
//! [`FollowOptions::list_interval`] (and whenever the caller asks), so an
//! instance made after the follower began (a delegation's first Turn, a
//! fork, a new conversation) is followed from its first line. A folder
//! that went away is dropped; one of the same name made again is new.
//! Each log is a [`FollowedLog`], with its bounded read per look, its line
//! cap and its rules for a file cut back or replaced. Optionally the
//! swarm's reload log (`swarm-events.jsonl`) is followed with them.
//!
//! What it does not do: wait. The caller looks ([`WorkspaceFollower::poll`])
//! as often as it wants to (a thread of its own, a task, a loop), so the
//! follower never holds a runtime or a lock; nor does it print.

use super::FollowedLog;
use crate::paths::{InstancePaths, WorkspacePaths};
use crate::runtime_events::RuntimeEventFilter;
use crate::swarm_events::swarm_events_log;
use crate::tail::DEFAULT_MAX_LINE_BYTES;
use goondan_types::{RuntimeEvent, SwarmEvent};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to follow and how.
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// Only the events that pass (its `last` is not used).
    pub filter: RuntimeEventFilter,
    /// Only the instance of this folder name (`agent:instanceKey`, as
    /// under `instances/`); every instance when unset. The swarm's reload
    /// log is no instance's, so a set instance leaves it out.
    pub instance: Option<String>,
    /// Follows the swarm's reload log too.
    pub swarm_events: bool,
    /// How often the instances folder is listed again for new instances.
    pub list_interval: Duration,
    /// A longer line is dropped and counted.
    pub max_line_bytes: usize,
}

impl Default for FollowOptions {
    /// Every instance's events, no reloads, a listing a second, the line
    /// cap of the tail reader.
    fn default() -> Self {
        FollowOptions {
            filter: RuntimeEventFilter::default(),
            instance: None,
            swarm_events: false,
            list_interval: Duration::from_secs(1),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// Where following each log begins.
#[derive(Debug, Clone, Default)]
pub enum FollowFrom {
    /// From now on: a log there when the follower is made is followed from
    /// its end, one that appears later from its start.
    #[default]
    Now,
    /// Where a reader of the history stopped: each log named here (by
    /// path) from its offset, every other one (made after that reader
    /// listed them) from its start.
    Offsets(HashMap<PathBuf, u64>),
}

/// One event read from a followed log.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowedEvent {
    /// The instance's folder name; `None` for the swarm's reload log.
    pub instance: Option<String>,
    /// The line as stored, for verbatim output.
    pub line: String,
    /// The parsed event.
    pub event: LoggedEvent,
}

impl FollowedEvent {
    /// When it happened (ISO 8601).
    pub fn timestamp(&self) -> &str {
        match &self.event {
            LoggedEvent::Runtime(event) => &event.base().timestamp,
            LoggedEvent::Swarm(event) => &event.base().timestamp,
        }
    }
}

/// The event of a followed line: an instance's, or the swarm's.
#[derive(Debug, Clone, PartialEq)]
pub enum LoggedEvent {
    /// From an instance's `runtime-events.jsonl`.
    Runtime(RuntimeEvent),
    /// From the swarm's `swarm-events.jsonl`.
    Swarm(SwarmEvent),
}

/// What the follower passed over so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FollowStats {
    /// Lines over the line cap, dropped.
    pub n_long_lines: u64,
    /// Complete lines that are no event this version knows.
    pub n_unreadable: u64,
    /// Times a log was found replaced or rewritten and read from its
    /// start again.
    pub n_rewrites: u64,
    /// Looks at a log that failed (other than its absence), tried again
    /// on the next one.
    pub n_read_errors: u64,
}

/// The runtime-event logs of one workspace, followed.
#[derive(Debug)]
pub struct WorkspaceFollower {
    workspace: WorkspacePaths,
    options: FollowOptions,
    /// By instance folder name.
    instances: BTreeMap<String, FollowedLog>,
    swarm: Option<FollowedLog>,
    /// Set once the first listing is done: logs found later start at 0.
    first_listing_done: bool,
    /// Where the logs of [`FollowFrom::Offsets`] start.
    offsets: HashMap<PathBuf, u64>,
    from_now: bool,
    listed_at: Instant,
    stats: FollowStats,
    /// Counts of logs dropped with their folders, kept in `stats`.
    n_long_lines_dropped: u64,
    n_rewrites_dropped: u64,
}

impl WorkspaceFollower {
    /// Follows `workspace` from `from`, listing its instances now.
    pub fn new(workspace: WorkspacePaths, options: FollowOptions, from: FollowFrom) -> Self {
        let (from_now, offsets) = match from {
            FollowFrom::Now => (true, HashMap::new()),
            FollowFrom::Offsets(offsets) => (false, offsets),
        };
        let swarm = (options.swarm_events && options.instance.is_none()).then(|| {
            let path = swarm_events_log(&workspace);
            start_log(path, from_now, &offsets, options.max_line_bytes)
        });
        let mut follower = WorkspaceFollower {
            workspace,
            options,
            instances: BTreeMap::new(),
            swarm,
            first_listing_done: false,
            offsets,
            from_now,
            listed_at: Instant::now(),
            stats: FollowStats::default(),
            n_long_lines_dropped: 0,
            n_rewrites_dropped: 0,
        };
        follower.list_instances();
        follower
    }

    /// The followed workspace.
    pub fn workspace(&self) -> &WorkspacePaths {
        &self.workspace
    }

    /// What it passed over so far.
    pub fn stats(&self) -> FollowStats {
        let logs = self.instances.values().chain(self.swarm.as_ref());
        let (n_long_lines, n_rewrites) = logs.fold(
            (self.n_long_lines_dropped, self.n_rewrites_dropped),
            |(long, rewrites), log| (long + log.n_long_lines(), rewrites + log.n_rewrites()),
        );
        FollowStats {
            n_long_lines,
            n_rewrites,
            ..self.stats
        }
    }

    /// Lists the instances folder now: follows the instances not followed
    /// yet, drops those whose folder went away. [`Self::poll`] does this
    /// by itself every [`FollowOptions::list_interval`].
    pub fn list_instances(&mut self) {
        self.listed_at = Instant::now();
        let mut present: Vec<(String, PathBuf)> = Vec::new();
        if let Ok(entries) = std::fs::read_dir(self.workspace.instances_dir()) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                // Dot-names are a fork being staged or a deletion under way.
                if name.starts_with('.')
                    || !entry.file_type().is_ok_and(|kind| kind.is_dir())
                    || self
                        .options
                        .instance
                        .as_ref()
                        .is_some_and(|only| *only != name)
                {
                    continue;
                }
                present.push((name, entry.path()));
            }
        }
        let first = !self.first_listing_done;
        self.first_listing_done = true;
        let present_names: HashSet<&str> = present.iter().map(|(name, _)| name.as_str()).collect();
        let (mut n_long_lines, mut n_rewrites) = (0, 0);
        self.instances.retain(|name, log| {
            let kept = present_names.contains(name.as_str());
            if !kept {
                n_long_lines += log.n_long_lines();
                n_rewrites += log.n_rewrites();
            }
            kept
        });
        self.n_long_lines_dropped += n_long_lines;
        self.n_rewrites_dropped += n_rewrites;
        for (name, dir) in present {
            if self.instances.contains_key(&name) {
                continue;
            }
            let path = InstancePaths::from_dir(&dir).runtime_events_log();
            let log = start_log(
                path,
                self.from_now && first,
                &self.offsets,
                self.options.max_line_bytes,
            );
            self.instances.insert(name, log);
        }
    }

    /// The events that passed the filter since the last look, oldest
    /// first across the logs (each log's own order kept). Lists the
    /// instances folder first when the last listing is
    /// [`FollowOptions::list_interval`] old.
    pub fn poll(&mut self) -> Vec<FollowedEvent> {
        if self.listed_at.elapsed() >= self.options.list_interval {
            self.list_instances();
        }
        let mut events = Vec::new();
        for (name, log) in self.instances.iter_mut() {
            read_log(log, Some(name), &self.options, &mut self.stats, &mut events);
        }
        if let Some(log) = self.swarm.as_mut() {
            read_log(log, None, &self.options, &mut self.stats, &mut events);
        }
        events.sort_by(|a, b| a.timestamp().cmp(b.timestamp()));
        events
    }
}

/// A log followed from its end (`from_end`), from its offset in
/// `offsets`, or else from its start.
fn start_log(
    path: PathBuf,
    from_end: bool,
    offsets: &HashMap<PathBuf, u64>,
    max_line_bytes: usize,
) -> FollowedLog {
    if from_end {
        return FollowedLog::from_end(path, max_line_bytes);
    }
    let offset = offsets.get(&path).copied().unwrap_or(0);
    FollowedLog::from_offset(path, offset, max_line_bytes)
}

/// Reads what `log` gained into `events`: the lines that are events of
/// its kind and pass the filter.
fn read_log(
    log: &mut FollowedLog,
    instance: Option<&String>,
    options: &FollowOptions,
    stats: &mut FollowStats,
    events: &mut Vec<FollowedEvent>,
) {
    let lines = match log.new_lines() {
        Ok(lines) => lines,
        Err(_) => {
            stats.n_read_errors += 1;
            return;
        }
    };
    for line in lines {
        let Ok(line) = String::from_utf8(line) else {
            stats.n_unreadable += 1;
            continue;
        };
        let event = match instance {
            Some(_) => serde_json::from_str::<RuntimeEvent>(&line).map(LoggedEvent::Runtime),
            None => serde_json::from_str::<SwarmEvent>(&line).map(LoggedEvent::Swarm),
        };
        let Ok(event) = event else {
            stats.n_unreadable += 1;
            continue;
        };
        let passes = match &event {
            LoggedEvent::Runtime(event) => options.filter.matches(event),
            LoggedEvent::Swarm(event) => options.filter.matches_swarm_event(event),
        };
        if passes {
            events.push(FollowedEvent {
                instance: instance.cloned(),
                line,
                event,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::StateRoot;
    use std::io::Write;
    use std::path::Path;

    fn event_line(agent: &str, instance_key: &str, kind: &str, trace: &str, at: u32) -> String {
        let mut event = serde_json::json!({
            "type": kind,
            "timestamp": format!("2026-01-01T00:00:{at:02}.000Z"),
            "agentName": agent,
            "instanceKey": instance_key,
            "traceId": trace,
            "spanId": "aaaaaaaaaaaaaaaa",
            "turnId": "turn_1",
        });
        if kind == "step.started" {
            event["stepId"] = "step_1".into();
            event["stepIndex"] = 0.into();
        }
        if kind == "turn.completed" {
            event["stepCount"] = 1.into();
            event["duration"] = 5.into();
        }
        let line = event.to_string();
        serde_json::from_str::<RuntimeEvent>(&line).expect("a runtime event");
        line + "\n"
    }

    fn append(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }

    fn log_of(workspace: &WorkspacePaths, agent: &str) -> PathBuf {
        workspace.instance(agent, "default").runtime_events_log()
    }

    /// `(instance, type)` of each event of a look.
    fn seen(follower: &mut WorkspaceFollower) -> Vec<(String, String)> {
        follower
            .poll()
            .into_iter()
            .map(|followed| {
                let kind = match &followed.event {
                    LoggedEvent::Runtime(event) => event.type_name().to_string(),
                    LoggedEvent::Swarm(event) => event.type_name().to_string(),
                };
                (followed.instance.unwrap_or_default(), kind)
            })
            .collect()
    }

    /// A workspace whose `alpha:default` logged one `turn.started`.
    fn alpha_started() -> (tempfile::TempDir, WorkspacePaths, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let workspace = StateRoot::new(dir.path()).workspace("main");
        let alpha = log_of(&workspace, "alpha");
        append(
            &alpha,
            &event_line("alpha", "default", "turn.started", "t1", 1),
        );
        (dir, workspace, alpha)
    }

    fn options() -> FollowOptions {
        FollowOptions {
            list_interval: Duration::ZERO,
            ..FollowOptions::default()
        }
    }

    #[test]
    fn an_instance_made_after_it_began_is_followed_from_its_first_line() {
        let (_dir, workspace, alpha) = alpha_started();
        let mut follower = WorkspaceFollower::new(workspace.clone(), options(), FollowFrom::Now);
        // What was there is history.
        assert!(seen(&mut follower).is_empty());
        append(
            &alpha,
            &event_line("alpha", "default", "turn.completed", "t1", 3),
        );
        let beta = log_of(&workspace, "beta");
        append(
            &beta,
            &event_line("beta", "default", "turn.started", "t1", 2),
        );
        assert_eq!(
            seen(&mut follower),
            [
                ("beta:default".to_string(), "turn.started".to_string()),
                ("alpha:default".to_string(), "turn.completed".to_string()),
            ],
            "both, oldest first"
        );
        // A fork being staged is not an instance yet.
        let staging = workspace.instances_dir().join(".staging-1-abc");
        append(
            &InstancePaths::from_dir(&staging).runtime_events_log(),
            &event_line("alpha", "fork", "turn.started", "t2", 4),
        );
        assert!(seen(&mut follower).is_empty());
        // Deleted and made again: the new one is read from its start.
        std::fs::remove_dir_all(workspace.instances_dir().join("beta:default")).unwrap();
        assert!(seen(&mut follower).is_empty());
        append(
            &beta,
            &event_line("beta", "default", "turn.started", "t3", 5),
        );
        assert_eq!(
            seen(&mut follower),
            [("beta:default".to_string(), "turn.started".to_string())]
        );
    }

    #[test]
    fn offsets_go_on_where_the_history_stopped_and_the_rest_from_the_start() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = StateRoot::new(dir.path()).workspace("main");
        let alpha = log_of(&workspace, "alpha");
        let beta = log_of(&workspace, "beta");
        append(
            &alpha,
            &event_line("alpha", "default", "turn.started", "t1", 1),
        );
        let history_end = std::fs::metadata(&alpha).unwrap().len();
        // Written after the history was read, before following began.
        append(
            &alpha,
            &event_line("alpha", "default", "turn.completed", "t1", 2),
        );
        append(
            &beta,
            &event_line("beta", "default", "turn.started", "t1", 3),
        );
        let offsets = HashMap::from([(alpha.clone(), history_end)]);
        let mut follower =
            WorkspaceFollower::new(workspace, options(), FollowFrom::Offsets(offsets));
        assert_eq!(
            seen(&mut follower),
            [
                ("alpha:default".to_string(), "turn.completed".to_string()),
                ("beta:default".to_string(), "turn.started".to_string()),
            ]
        );
    }

    /// A line a writer was in the middle of when the history was read is
    /// left out of it and shown once whole.
    #[test]
    fn a_line_torn_when_the_history_was_read_comes_once_it_is_whole() {
        let (_dir, workspace, alpha) = alpha_started();
        let whole = event_line("alpha", "default", "turn.completed", "t1", 2);
        let (first_half, second_half) = whole.split_at(40);
        append(&alpha, first_half);
        let history = crate::read_runtime_events(&alpha, &RuntimeEventFilter::default()).unwrap();
        assert_eq!(history.records.len(), 1);
        let offsets = HashMap::from([(alpha.clone(), history.resume_at)]);
        let mut follower =
            WorkspaceFollower::new(workspace, options(), FollowFrom::Offsets(offsets));
        assert!(seen(&mut follower).is_empty());
        append(&alpha, second_half);
        assert_eq!(
            seen(&mut follower),
            [("alpha:default".to_string(), "turn.completed".to_string())]
        );
        assert_eq!(follower.stats(), FollowStats::default());
    }

    #[test]
    fn a_truncated_log_is_read_again_from_its_start_without_repeats() {
        let (_dir, workspace, alpha) = alpha_started();
        append(
            &alpha,
            &event_line("alpha", "default", "turn.completed", "t1", 2),
        );
        let mut follower = WorkspaceFollower::new(workspace, options(), FollowFrom::Now);
        assert!(seen(&mut follower).is_empty());
        // `gdn instance restart --fresh` empties it; a new Turn writes
        // more than it held before the next look.
        std::fs::File::create(&alpha).unwrap();
        for (kind, at) in [
            ("turn.started", 3),
            ("step.started", 4),
            ("turn.completed", 5),
        ] {
            append(&alpha, &event_line("alpha", "default", kind, "t2", at));
        }
        let kinds: Vec<String> = seen(&mut follower).into_iter().map(|(_, k)| k).collect();
        assert_eq!(kinds, ["turn.started", "step.started", "turn.completed"]);
        assert!(seen(&mut follower).is_empty());
        assert_eq!(follower.stats().n_rewrites, 1);
    }

    #[test]
    fn a_line_over_the_cap_is_skipped_and_counted_and_what_follows_comes() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = StateRoot::new(dir.path()).workspace("main");
        let alpha = log_of(&workspace, "alpha");
        append(&alpha, "");
        let mut follower = WorkspaceFollower::new(
            workspace,
            FollowOptions {
                max_line_bytes: 1024,
                ..options()
            },
            FollowFrom::Now,
        );
        append(&alpha, &"x".repeat(5000));
        assert!(seen(&mut follower).is_empty());
        append(&alpha, "\n");
        append(&alpha, "not an event\n");
        append(
            &alpha,
            &event_line("alpha", "default", "turn.started", "t1", 1),
        );
        assert_eq!(
            seen(&mut follower),
            [("alpha:default".to_string(), "turn.started".to_string())]
        );
        let stats = follower.stats();
        assert_eq!((stats.n_long_lines, stats.n_unreadable), (1, 1));
    }

    #[test]
    fn filters_by_agent_instance_trace_and_type_and_reloads_come_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = StateRoot::new(dir.path()).workspace("main");
        let lines = [
            ("alpha", "turn.started", "t1"),
            ("alpha", "step.started", "t1"),
            ("beta", "turn.started", "t1"),
            ("alpha", "turn.started", "t2"),
        ];
        let reload = serde_json::json!({
            "type": "swarm.reloaded",
            "timestamp": "2026-01-01T00:00:09.000Z",
            "swarmName": "main",
            "instanceKey": "main",
            "trigger": "watch",
            "changed": ["Agent/alpha"],
            "restarted": ["alpha:default"],
            "duration": 5,
        });
        let check = |options: FollowOptions, expected: &[(&str, &str)]| {
            let mut follower =
                WorkspaceFollower::new(workspace.clone(), options.clone(), FollowFrom::Now);
            for (at, (agent, kind, trace)) in lines.iter().enumerate() {
                let line = event_line(agent, "default", kind, trace, at as u32);
                append(&log_of(&workspace, agent), &line);
            }
            append(&swarm_events_log(&workspace), &format!("{reload}\n"));
            let seen = seen(&mut follower);
            let seen: Vec<(&str, &str)> = seen
                .iter()
                .map(|(instance, kind)| (instance.as_str(), kind.as_str()))
                .collect();
            assert_eq!(seen, expected, "{options:?}");
        };
        let filter =
            |agent: Option<&str>, trace: Option<&str>, kind: Option<&str>| RuntimeEventFilter {
                agent_name: agent.map(str::to_string),
                trace_id: trace.map(str::to_string),
                event_type: kind.map(str::to_string),
                last: None,
            };
        check(
            FollowOptions {
                filter: filter(Some("alpha"), Some("t1"), None),
                ..options()
            },
            &[
                ("alpha:default", "turn.started"),
                ("alpha:default", "step.started"),
            ],
        );
        check(
            FollowOptions {
                filter: filter(None, None, Some("turn.*")),
                swarm_events: true,
                ..options()
            },
            &[
                ("alpha:default", "turn.started"),
                ("beta:default", "turn.started"),
                ("alpha:default", "turn.started"),
            ],
        );
        check(
            FollowOptions {
                filter: filter(Some("alpha"), None, Some("swarm.*")),
                swarm_events: true,
                ..options()
            },
            &[("", "swarm.reloaded")],
        );
        check(
            FollowOptions {
                instance: Some("beta:default".into()),
                swarm_events: true,
                ..options()
            },
            &[("beta:default", "turn.started")],
        );
    }
}
