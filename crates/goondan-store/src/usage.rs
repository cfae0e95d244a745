//! The token and cost ledger on disk: an instance's lifetime totals (kept
//! in its `metadata.json` by the instance's single writer) and the
//! Swarm-wide tallies budgets need across processes ([`SwarmUsageTally`]:
//! tokens per trace and US dollars per UTC day).
//!
//! The per-call records themselves are the `step.completed` runtime
//! events (`tokenUsage`, `model`, `costUsd`); `gdn usage` reads those.
//!
//! Why a locked file and not the orchestrator: every AgentProcess of a
//! Swarm must see the others' spending before its next model call, also
//! when the orchestrator restarts, and an IPC round trip per model call
//! would put the orchestrator on every Step's path. A short exclusive
//! `flock` on `usage/tally.lock` around a read, add and atomic rename is
//! correct between any number of processes, survives a crash of any of
//! them (the kernel drops the lock; a rename is all or nothing), and costs
//! a few small file operations per model call, only when a budget asks
//! for it.

use crate::durability::{create_dir_all, write_file_atomically, SyncPolicy};
use crate::paths::WorkspacePaths;
use crate::StoreError;
use goondan_types::TokenUsage;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Usage summed over model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// Input (prompt) tokens.
    pub input_tokens: u64,
    /// Output (completion) tokens.
    pub output_tokens: u64,
    /// US dollars, summed over the calls whose price was known.
    pub cost_usd: f64,
    /// Model calls counted.
    pub model_calls: u64,
}

impl UsageTotals {
    /// Adds one model call.
    pub fn add(&mut self, usage: &TokenUsage, cost_usd: Option<f64>) {
        self.input_tokens += usage.prompt_tokens;
        self.output_tokens += usage.completion_tokens;
        self.cost_usd += cost_usd.unwrap_or(0.0);
        self.model_calls += 1;
    }

    /// Input plus output tokens.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// What the Swarm-wide tally holds for one check: the tokens of one
/// trace and the dollars of one day.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SwarmUsage {
    /// Tokens used by every Turn of the trace, in every agent.
    pub trace_tokens: u64,
    /// US dollars spent by the Swarm on the day.
    pub day_cost_usd: f64,
}

/// The content of `usage/days/<YYYY-MM-DD>.json`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DayFile {
    #[serde(flatten)]
    totals: UsageTotals,
}

/// Trace files older than this are removed when a new one is written: a
/// Turn (and the inter-agent chain under it) is long over by then.
const TRACE_FILE_LIFETIME: Duration = Duration::from_secs(2 * 24 * 60 * 60);

/// The Swarm-wide usage tallies of one workspace, shared by its agent
/// processes: `usage/traces/<traceId>` (tokens of one trace) and
/// `usage/days/<YYYY-MM-DD>.json` (the Swarm's totals of one UTC day).
#[derive(Debug, Clone)]
pub struct SwarmUsageTally {
    dir: PathBuf,
}

impl SwarmUsageTally {
    /// The tallies of `workspace` (nothing is created until the first
    /// [`SwarmUsageTally::add`]).
    pub fn new(workspace: &WorkspacePaths) -> Self {
        SwarmUsageTally {
            dir: workspace.dir().join("usage"),
        }
    }

    /// `usage/days/<day>.json`.
    pub fn day_file(&self, day: &str) -> PathBuf {
        self.dir.join("days").join(format!("{day}.json"))
    }

    fn trace_file(&self, trace_id: &str) -> Option<PathBuf> {
        // A trace id is hex; anything else could name a path elsewhere.
        let valid = !trace_id.is_empty()
            && trace_id.len() <= 64
            && trace_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        valid.then(|| self.dir.join("traces").join(trace_id))
    }

    /// Takes the exclusive lock, waiting for other processes.
    fn lock(&self) -> Result<File, StoreError> {
        create_dir_all(&self.dir)?;
        let path = self.dir.join("tally.lock");
        let file = crate::owner_only::open_options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|source| StoreError::io("opening", &path, source))?;
        file.lock()
            .map_err(|source| StoreError::io("locking", &path, source))?;
        Ok(file)
    }

    /// The tokens of `trace_id` and the Swarm's spending on `day`.
    pub fn read(&self, trace_id: &str, day: &str) -> Result<SwarmUsage, StoreError> {
        let _lock = self.lock()?;
        self.read_locked(trace_id, day)
    }

    fn read_locked(&self, trace_id: &str, day: &str) -> Result<SwarmUsage, StoreError> {
        let trace_tokens = match self.trace_file(trace_id) {
            Some(path) => read_optional(&path)?
                .and_then(|text| text.trim().parse::<u64>().ok())
                .unwrap_or(0),
            None => 0,
        };
        let day_path = self.day_file(day);
        let day_cost_usd = match read_optional(&day_path)? {
            Some(text) => {
                serde_json::from_str::<DayFile>(&text)
                    .map_err(|error| StoreError::CorruptState {
                        path: day_path.clone(),
                        reason: error.to_string(),
                    })?
                    .totals
                    .cost_usd
            }
            None => 0.0,
        };
        Ok(SwarmUsage {
            trace_tokens,
            day_cost_usd,
        })
    }

    /// Adds one model call to the trace's tokens and the day's totals, in
    /// one critical section, and returns the tallies after it.
    pub fn add(
        &self,
        trace_id: &str,
        day: &str,
        usage: &TokenUsage,
        cost_usd: Option<f64>,
    ) -> Result<SwarmUsage, StoreError> {
        let _lock = self.lock()?;
        let before = self.read_locked(trace_id, day)?;
        let day_path = self.day_file(day);
        let mut day_file = match read_optional(&day_path)? {
            Some(text) => serde_json::from_str::<DayFile>(&text).unwrap_or_default(),
            None => DayFile::default(),
        };
        day_file.totals.add(usage, cost_usd);
        create_dir_all(&self.dir.join("days"))?;
        let bytes = serde_json::to_vec_pretty(&day_file)
            .map_err(|error| StoreError::encode("the day's usage", error))?;
        write_file_atomically(&day_path, &bytes, SyncPolicy::ProcessCrash)?;
        let tokens = usage.prompt_tokens + usage.completion_tokens;
        let trace_tokens = before.trace_tokens + tokens;
        if let Some(path) = self.trace_file(trace_id) {
            let traces = self.dir.join("traces");
            let first_of_trace = !path.exists();
            create_dir_all(&traces)?;
            write_file_atomically(
                &path,
                trace_tokens.to_string().as_bytes(),
                SyncPolicy::ProcessCrash,
            )?;
            if first_of_trace {
                remove_old_files(&traces, TRACE_FILE_LIFETIME);
            }
        }
        Ok(SwarmUsage {
            trace_tokens,
            day_cost_usd: day_file.totals.cost_usd,
        })
    }
}

fn read_optional(path: &Path) -> Result<Option<String>, StoreError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StoreError::io("reading", path, source)),
    }
}

/// Best effort: a file that cannot be removed now is tried again later.
fn remove_old_files(dir: &Path, lifetime: Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|metadata| metadata.modified())
            .ok()
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|age| age > lifetime);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StateRoot;

    fn usage(prompt: u64, completion: u64) -> TokenUsage {
        TokenUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }
    }

    #[test]
    fn tallies_add_per_trace_and_per_day() {
        let dir = tempfile::tempdir().unwrap();
        let tally = SwarmUsageTally::new(&StateRoot::new(dir.path()).workspace("main"));
        assert_eq!(
            tally.read("t1", "2026-01-01").unwrap(),
            SwarmUsage::default()
        );
        tally
            .add("t1", "2026-01-01", &usage(10, 5), Some(0.5))
            .unwrap();
        tally
            .add("t2", "2026-01-01", &usage(1, 1), Some(0.25))
            .unwrap();
        let after = tally.add("t1", "2026-01-01", &usage(3, 2), None).unwrap();
        assert_eq!(after.trace_tokens, 20);
        assert!((after.day_cost_usd - 0.75).abs() < 1e-12);
        assert_eq!(tally.read("t2", "2026-01-02").unwrap().day_cost_usd, 0.0);
        assert_eq!(tally.read("t2", "2026-01-02").unwrap().trace_tokens, 2);
    }

    #[test]
    fn concurrent_writers_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = StateRoot::new(dir.path()).workspace("main");
        let writers: Vec<_> = (0..8)
            .map(|_| {
                // Each writer has its own handle, as each process would.
                let tally = SwarmUsageTally::new(&workspace);
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        tally
                            .add("t", "2026-01-01", &usage(2, 1), Some(0.5))
                            .unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let total = SwarmUsageTally::new(&workspace)
            .read("t", "2026-01-01")
            .unwrap();
        assert_eq!(total.trace_tokens, 8 * 25 * 3);
        assert!((total.day_cost_usd - 100.0).abs() < 1e-9);
    }

    #[test]
    fn a_trace_id_that_is_not_a_name_is_not_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let tally = SwarmUsageTally::new(&StateRoot::new(dir.path()).workspace("main"));
        let after = tally
            .add("../../escape", "2026-01-01", &usage(1, 1), None)
            .unwrap();
        assert_eq!(after.trace_tokens, 2);
        assert!(!dir.path().join("escape").exists());
        assert_eq!(
            tally
                .read("../../escape", "2026-01-01")
                .unwrap()
                .trace_tokens,
            0
        );
    }
}
