//! [`run`]: a whole `gdn eval`: the plan's case runs, at most `jobs` at
//! once, each in its own folder of the stored run; then the report,
//! stored under the System Root.

use crate::case::{run_case, CaseEnv};
use crate::plan::{EvalOptions, Plan};
use crate::report::{CaseResult, RunFlags, RunReport};
use crate::store::RunStore;
use crate::EvalError;
use futures_util::stream::{self, StreamExt};
use goondan_store::StateRoot;
use std::time::Instant;

/// Told of each case run as it ends, with how many ended and how many
/// there are.
pub type Progress<'a> = &'a (dyn Fn(&CaseResult, usize, usize) + Sync);

/// How to run.
#[derive(Clone)]
pub struct RunSettings {
    /// What to run.
    pub options: EvalOptions,
    /// Case runs at once (at least 1).
    pub jobs: usize,
    /// What every case shares.
    pub env: CaseEnv,
    /// The System Root the run is stored under.
    pub system_root: StateRoot,
}

/// Runs the plan of `settings` and stores its report.
pub async fn run(settings: &RunSettings, progress: Progress<'_>) -> Result<RunReport, EvalError> {
    let plan = Plan::new(&settings.env.bundle, &settings.options)?;
    let started_at = goondan_types::now_iso();
    let started = Instant::now();
    let store = RunStore::new(&settings.system_root);
    let (run_id, run_dir) = store.create(&started_at)?;
    let total = plan.jobs.len();
    let mut ended = 0;
    let mut results: Vec<(usize, CaseResult)> = Vec::with_capacity(total);
    let mut runs = stream::iter(plan.jobs.iter())
        .map(|job| {
            let state_dir = run_dir.join(job.index.to_string());
            async move {
                // Taken when the run starts (buffer_unordered polls it
                // first when a slot is free), on the clock of the report.
                let started_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                let mut result = run_case(job, &settings.env, state_dir).await;
                result.started_ms = started_ms;
                (job.index, result)
            }
        })
        .buffer_unordered(settings.jobs.max(1));
    while let Some((index, result)) = runs.next().await {
        ended += 1;
        progress(&result, ended, total);
        results.push((index, result));
    }
    results.sort_by_key(|(index, _)| *index);
    let bundle_dir = std::path::absolute(settings.env.bundle.root())
        .unwrap_or_else(|_| settings.env.bundle.root().to_path_buf());
    let mut report = RunReport::new(
        run_id,
        started_at,
        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        bundle_dir.display().to_string(),
        settings.options.replay.is_some(),
        results.into_iter().map(|(_, result)| result).collect(),
    );
    let shown = |path: &std::path::Path| path.display().to_string();
    let options = &settings.options;
    report.flags = RunFlags {
        cassettes: options
            .replay
            .as_deref()
            .or(options.record.as_deref())
            .map(shown),
        config: Some(shown(&settings.env.config)),
        env_file: settings.env.env_file.as_deref().map(shown),
        timeout_seconds: options.timeout.map(|timeout| timeout.as_secs_f64()),
    };
    store.save(&report)?;
    Ok(report)
}
