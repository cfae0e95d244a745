//! `gdn eval`: runs the bundle's Eval cases (`goondan-eval` does the
//! work) and renders what came of them: a progress line on a terminal, a
//! table (case, model, score, result, tokens, cost, time), `--json`,
//! `--junit`, `--markdown`, and with `--baseline` what changed since a
//! stored run. `gdn eval compare A B` compares two stored runs and
//! `gdn eval runs` lists them. Exits 1 when a case missed its threshold
//! or a check.

use crate::cli::{EvalArgs, EvalCommand, GlobalArgs};
use crate::exit::Outcome;
use crate::project;
use goondan_eval::case::CaseEnv;
use goondan_eval::compare::{compare, Change, Comparison};
use goondan_eval::store::RunStore;
use goondan_eval::{CaseResult, EvalError, EvalOptions, RunReport, RunSettings};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Runs `gdn eval`.
pub(crate) fn run(global: &GlobalArgs, args: &EvalArgs) -> anyhow::Result<Outcome> {
    let store = RunStore::new(&project::state_root(global)?);
    match &args.command {
        Some(EvalCommand::Compare { before, after }) => {
            return compare_runs(global, &store, before, after)
        }
        Some(EvalCommand::Runs) => return list_runs(global, &store),
        None => {}
    }
    if let Some(seconds) = args.timeout {
        if !(seconds.is_finite() && seconds > 0.0) {
            crate::render::error(
                "E_EVAL_TIMEOUT",
                &format_args!("--timeout {seconds} is not a number of seconds above 0"),
                Some("for example --timeout 60"),
            );
            return Ok(Outcome::BadArguments);
        }
    }
    if let Err(outcome) = super::package::install_before_run(global) {
        return Ok(outcome);
    }
    let config = global.config.clone().unwrap_or_else(|| PathBuf::from("."));
    let env_file = args
        .env_file
        .as_deref()
        .map(std::path::absolute)
        .transpose()?;
    let bundle = match goondan_host::project::load(
        &config,
        env_file.clone(),
        project::packages_root(global),
    ) {
        Ok(bundle) => bundle,
        Err(not_loaded) => {
            crate::render::not_loaded(&not_loaded, project::format(global), global.quiet);
            return Ok(if not_loaded.invalid {
                Outcome::ValidationFailed
            } else {
                Outcome::ConfigError
            });
        }
    };
    let absolute = |path: &Option<PathBuf>| path.as_deref().map(std::path::absolute).transpose();
    let settings = RunSettings {
        options: EvalOptions {
            names: args.names.clone(),
            cases: args.cases.clone(),
            models: args
                .models
                .iter()
                .filter(|m| !m.is_empty())
                .cloned()
                .collect(),
            repeat: args.repeat,
            timeout: args.timeout.map(Duration::from_secs_f64),
            record: absolute(&args.record)?,
            replay: absolute(&args.replay)?,
        },
        jobs: args.jobs.map(|n| n as usize).unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(1)
        }),
        env: CaseEnv {
            bundle: Arc::new(bundle),
            config: std::path::absolute(&config)?,
            env_file,
            program: std::env::current_exe()?,
            install_packages: super::package::installer(global),
        },
        system_root: project::state_root(global)?,
    };
    let baseline = match &args.baseline {
        Some(id) => match store.load(id) {
            Ok(report) => Some(report),
            Err(error) => return Ok(eval_error(&error)),
        },
        None => None,
    };
    let progress =
        ProgressLine::new(!global.json && !global.quiet && std::io::stderr().is_terminal());
    let runtime = crate::runtime::current_thread()?;
    let report = match runtime.block_on(goondan_eval::run(&settings, &|result, ended, total| {
        progress.show(result, ended, total)
    })) {
        Ok(report) => report,
        Err(error) => {
            progress.clear();
            return Ok(eval_error(&error));
        }
    };
    progress.clear();
    if let Some(path) = &args.junit {
        write_file(path, &report.to_junit())?;
    }
    if let Some(path) = &args.markdown {
        write_file(path, &report.to_markdown())?;
    }
    let comparison = baseline.as_ref().map(|baseline| compare(baseline, &report));
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(out, "{}", serde_json::to_string(&report)?)?;
    } else {
        print_table(&mut out, &report)?;
        if let Some(comparison) = &comparison {
            writeln!(out)?;
            print_comparison(&mut out, comparison)?;
        }
    }
    out.flush()?;
    let regressed = comparison.as_ref().is_some_and(regressed);
    Ok(if report.passed && !regressed {
        Outcome::Success
    } else {
        Outcome::Failure
    })
}

/// True when some case run got worse: a CI step comparing runs fails on it.
fn regressed(comparison: &Comparison) -> bool {
    comparison.count(Change::Worse) > 0
}

fn compare_runs(
    global: &GlobalArgs,
    store: &RunStore,
    before: &str,
    after: &str,
) -> anyhow::Result<Outcome> {
    let (before, after) = match (store.load(before), store.load(after)) {
        (Ok(before), Ok(after)) => (before, after),
        (Err(error), _) | (_, Err(error)) => return Ok(eval_error(&error)),
    };
    let comparison = compare(&before, &after);
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(out, "{}", serde_json::to_string(&comparison)?)?;
    } else {
        print_comparison(&mut out, &comparison)?;
    }
    out.flush()?;
    Ok(if regressed(&comparison) {
        Outcome::Failure
    } else {
        Outcome::Success
    })
}

fn list_runs(global: &GlobalArgs, store: &RunStore) -> anyhow::Result<Outcome> {
    let runs = match store.list() {
        Ok(runs) => runs,
        Err(error) => return Ok(eval_error(&error)),
    };
    let mut out = std::io::stdout().lock();
    if global.json {
        writeln!(out, "{}", serde_json::to_string(&runs)?)?;
        return Ok(Outcome::Success);
    }
    if runs.is_empty() {
        writeln!(
            out,
            "(no eval runs stored under {})",
            store.root().display()
        )?;
        return Ok(Outcome::Success);
    }
    writeln!(
        out,
        "{:<22} {:<26} {:>6} {:>7}",
        "RUN", "STARTED", "CASES", "FAILED"
    )?;
    for run in runs {
        let replay = if run.replay { "  (replay)" } else { "" };
        writeln!(
            out,
            "{:<22} {:<26} {:>6} {:>7}{replay}",
            run.run_id, run.started_at, run.cases, run.failed
        )?;
    }
    Ok(Outcome::Success)
}

fn eval_error(error: &EvalError) -> Outcome {
    crate::render::error(error.code(), error, error.suggestion());
    match error {
        EvalError::UnknownEval { .. }
        | EvalError::UnknownCase { .. }
        | EvalError::UnknownModel { .. }
        | EvalError::RunNotFound { .. } => Outcome::BadArguments,
        EvalError::NoEvals => Outcome::ConfigError,
        _ => Outcome::Failure,
    }
}

fn write_file(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    if let Some(parent) = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The table: one row per case run, the failures under it, then a tally.
fn print_table(out: &mut impl Write, report: &RunReport) -> std::io::Result<()> {
    let width = report
        .cases
        .iter()
        .map(|case| case.eval.len() + 1 + case.label().len())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "{:<width$}  {:<14} {:>6} {:<7} {:>8} {:>10} {:>8}",
        "CASE", "MODEL", "SCORE", "RESULT", "TOKENS", "COST USD", "TIME"
    )?;
    for case in &report.cases {
        writeln!(
            out,
            "{:<width$}  {:<14} {:>6} {:<7} {:>8} {:>10} {:>8}",
            format!("{}/{}", case.eval, case.label()),
            case.model.as_deref().unwrap_or("-"),
            case.score.map_or("-".into(), |score| format!("{score:.1}")),
            case.status.as_str(),
            case.input_tokens + case.output_tokens,
            crate::render::usd(case.cost_usd),
            format!("{:.2}s", case.latency_ms as f64 / 1000.0),
        )?;
        for failure in &case.failures {
            writeln!(out, "    {}: {}", failure.assertion, failure.message)?;
        }
    }
    let repeated: Vec<_> = report
        .summary
        .iter()
        .filter(|summary| summary.runs > 1)
        .collect();
    if !repeated.is_empty() {
        writeln!(out, "\nover repeats:")?;
        for summary in repeated {
            let score = match (summary.mean_score, summary.spread) {
                (Some(mean), Some(spread)) => format!(", score {mean:.2} ± {spread:.2}"),
                _ => String::new(),
            };
            writeln!(
                out,
                "  {}/{}{}: {}/{} passed{score}",
                summary.eval,
                summary.name,
                summary
                    .model
                    .as_deref()
                    .map(|m| format!("@{m}"))
                    .unwrap_or_default(),
                summary.passed,
                summary.runs
            )?;
        }
    }
    writeln!(
        out,
        "\n{} of {} passed{} in {:.1} s (run {})",
        report.cases.len() - report.n_failed(),
        report.cases.len(),
        if report.replay { ", replayed" } else { "" },
        report.duration_ms as f64 / 1000.0,
        report.run_id
    )
}

fn print_comparison(out: &mut impl Write, comparison: &Comparison) -> std::io::Result<()> {
    writeln!(out, "compared with run {}:", comparison.before)?;
    let status = |status: Option<goondan_eval::CaseStatus>| status.map_or("-", |s| s.as_str());
    let score = |score: Option<f64>| score.map_or(String::new(), |s| format!(" {s:.1}"));
    for case in comparison
        .cases
        .iter()
        .filter(|case| case.change != Change::Same)
    {
        let word = match case.change {
            Change::Better => "better",
            Change::Worse => "WORSE",
            Change::New => "new",
            Change::Gone => "gone",
            Change::Same => "same",
        };
        writeln!(
            out,
            "  {word:<6} {}/{}: {}{} -> {}{}",
            case.eval,
            case.case,
            status(case.before),
            score(case.score_before),
            status(case.after),
            score(case.score_after)
        )?;
    }
    writeln!(
        out,
        "{} better, {} worse, {} unchanged, {} new, {} gone",
        comparison.count(Change::Better),
        comparison.count(Change::Worse),
        comparison.count(Change::Same),
        comparison.count(Change::New),
        comparison.count(Change::Gone)
    )
}

/// One line on a terminal's stderr, rewritten as cases end; nothing when
/// stderr is not a terminal (a CI log gets the table at the end).
struct ProgressLine {
    on: bool,
}

impl ProgressLine {
    fn new(on: bool) -> ProgressLine {
        ProgressLine { on }
    }

    fn show(&self, result: &CaseResult, ended: usize, total: usize) {
        if !self.on {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K[{ended}/{total}] {}/{} {}",
            result.eval,
            result.label(),
            result.status.as_str()
        );
        let _ = err.flush();
    }

    fn clear(&self) {
        if self.on {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}
