//! [`Plan`]: the case runs of one `gdn eval`, in order: every selected
//! Eval's cases, times each Model of the matrix (`--models`, else the
//! Eval's `spec.models`, else the agents' own Models), times `--repeat`
//! (else the Eval's `spec.repeat`, else 1); and where each run's
//! cassettes are when recording or replaying.

use crate::EvalError;
use goondan_config::spec::{EvalCase, EvalSpec};
use goondan_config::{Bundle, Resource};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The judged score a case needs when neither it nor its Eval sets one.
pub const DEFAULT_THRESHOLD: f64 = 7.0;
/// A case's time limit when neither it, its Eval nor `--timeout` sets one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// The instance key cases talk to when neither the case nor its Eval
/// names one.
pub const DEFAULT_INSTANCE_KEY: &str = "eval";

/// What `gdn eval` was asked, beyond the bundle.
#[derive(Debug, Clone, Default)]
pub struct EvalOptions {
    /// Only these Evals (all when empty).
    pub names: Vec<String>,
    /// The Models of the matrix (overrides `spec.models`).
    pub models: Vec<String>,
    /// Runs per case (overrides `spec.repeat`).
    pub repeat: Option<u32>,
    /// Every case's time limit (overrides `timeoutSeconds`).
    pub timeout: Option<Duration>,
    /// Record each run's model exchanges as cassettes in this folder.
    pub record: Option<PathBuf>,
    /// Answer each run from the cassettes in this folder, offline.
    pub replay: Option<PathBuf>,
}

/// The cassettes of one run: its agents' and its judge's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cassettes {
    /// Every agent's exchanges.
    pub agents: PathBuf,
    /// The judge's exchange.
    pub judge: PathBuf,
}

/// One run of one case.
#[derive(Debug, Clone)]
pub struct CaseJob {
    /// Its place in the plan (0-based).
    pub index: usize,
    /// The Eval's name.
    pub eval: String,
    /// The case.
    pub case: EvalCase,
    /// The Swarm (`None`: as `gdn run` picks).
    pub swarm: Option<String>,
    /// The agent the case talks to (`None`: the entry agent).
    pub agent: Option<String>,
    /// The instance it talks to.
    pub instance_key: String,
    /// The Model every agent runs with (`None`: their own).
    pub model: Option<String>,
    /// Which repeat this is (1-based).
    pub repeat: u32,
    /// The lowest passing judged score.
    pub threshold: f64,
    /// The time limit of its Turns and its judge together: one deadline
    /// from the first message sent.
    pub timeout: Duration,
    /// The judge Model's name, for a case with a rubric.
    pub judge: Option<String>,
    /// Where to record, with `--record`.
    pub record: Option<Cassettes>,
    /// Where to replay from, with `--replay`.
    pub replay: Option<Cassettes>,
}

impl CaseJob {
    /// Whether the judge scores this run: the case has a rubric, or an
    /// expected behavior and its Eval a judge.
    pub fn judged(&self) -> bool {
        !self.case.rubric.is_empty() || (self.case.expected.is_some() && self.judge.is_some())
    }

    /// `eval/case`, with `@model` in a matrix and `#n` past the first
    /// repeat: how reports name a run.
    pub fn label(&self) -> String {
        let mut label = format!("{}/{}", self.eval, self.case.name);
        if let Some(model) = &self.model {
            label.push('@');
            label.push_str(model);
        }
        if self.repeat > 1 {
            label.push_str(&format!("#{}", self.repeat));
        }
        label
    }
}

/// The runs of one `gdn eval`.
#[derive(Debug, Clone)]
pub struct Plan {
    /// In order.
    pub jobs: Vec<CaseJob>,
}

impl Plan {
    /// The runs `options` ask of `bundle`.
    pub fn new(bundle: &Bundle, options: &EvalOptions) -> Result<Plan, EvalError> {
        let evals = select(bundle, &options.names)?;
        let mut jobs = Vec::new();
        for eval in evals {
            let spec = &eval.spec;
            let models: Vec<Option<String>> = match (&options.models, &spec.models) {
                (cli, _) if !cli.is_empty() => cli.iter().cloned().map(Some).collect(),
                (_, file) if !file.is_empty() => file.iter().cloned().map(Some).collect(),
                _ => vec![None],
            };
            for model in models.iter().flatten() {
                if bundle.model(model).is_none() {
                    return Err(EvalError::UnknownModel {
                        name: model.clone(),
                    });
                }
            }
            let repeats = options.repeat.or(spec.repeat).unwrap_or(1).max(1);
            for case in &spec.cases {
                for model in &models {
                    for repeat in 1..=repeats {
                        jobs.push(job(eval, spec, case, model, repeat, options, jobs.len()));
                    }
                }
            }
        }
        Ok(Plan { jobs })
    }
}

fn job(
    eval: &Resource<EvalSpec>,
    spec: &EvalSpec,
    case: &EvalCase,
    model: &Option<String>,
    repeat: u32,
    options: &EvalOptions,
    index: usize,
) -> CaseJob {
    let seconds = case.timeout_seconds.or(spec.timeout_seconds);
    let timeout = options
        .timeout
        .or_else(|| seconds.map(Duration::from_secs_f64))
        .unwrap_or(DEFAULT_TIMEOUT);
    let cassettes = |dir: &Path| cassettes(dir, eval.name(), &case.name, model.as_deref(), repeat);
    CaseJob {
        index,
        eval: eval.name().to_string(),
        case: case.clone(),
        swarm: spec.swarm.clone(),
        agent: case.agent.clone().or_else(|| spec.agent.clone()),
        instance_key: case
            .instance_key
            .clone()
            .or_else(|| spec.instance_key.clone())
            .unwrap_or_else(|| DEFAULT_INSTANCE_KEY.to_string()),
        model: model.clone(),
        repeat,
        threshold: case
            .threshold
            .or(spec.threshold)
            .unwrap_or(DEFAULT_THRESHOLD),
        timeout,
        judge: spec
            .judge
            .as_ref()
            .and_then(|judge| judge.to_object_ref().ok())
            .map(|reference| reference.name),
        record: options.record.as_deref().map(cassettes),
        replay: options.replay.as_deref().map(cassettes),
    }
}

/// The Evals named (all when `names` is empty), in the bundle's order.
fn select<'a>(
    bundle: &'a Bundle,
    names: &[String],
) -> Result<Vec<&'a Resource<EvalSpec>>, EvalError> {
    let evals = bundle.evals();
    if evals.is_empty() {
        return Err(EvalError::NoEvals);
    }
    for name in names {
        if !evals.iter().any(|eval| eval.name() == name) {
            return Err(EvalError::UnknownEval {
                name: name.clone(),
                known: evals.iter().map(|eval| eval.name().to_string()).collect(),
            });
        }
    }
    Ok(evals
        .iter()
        .filter(|eval| names.is_empty() || names.iter().any(|name| name == eval.name()))
        .collect())
}

/// `DIR/<eval>/<case>[@model][.n].jsonl` and its `.judge.jsonl` twin;
/// names are kept to file-safe characters.
fn cassettes(dir: &Path, eval: &str, case: &str, model: Option<&str>, repeat: u32) -> Cassettes {
    let mut stem = file_safe(case);
    if let Some(model) = model {
        stem.push('@');
        stem.push_str(&file_safe(model));
    }
    if repeat > 1 {
        stem.push_str(&format!(".{repeat}"));
    }
    let folder = dir.join(file_safe(eval));
    Cassettes {
        agents: folder.join(format!("{stem}.jsonl")),
        judge: folder.join(format!("{stem}.judge.jsonl")),
    }
}

fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cassette_names_keep_model_and_repeat_apart() {
        let dir = Path::new("/c");
        let plain = cassettes(dir, "smoke", "asks the/researcher", None, 1);
        assert_eq!(
            plain.agents,
            Path::new("/c/smoke/asks_the_researcher.jsonl")
        );
        assert_eq!(
            plain.judge,
            Path::new("/c/smoke/asks_the_researcher.judge.jsonl")
        );
        let matrix = cassettes(dir, "smoke", "a", Some("fast"), 3);
        assert_eq!(matrix.agents, Path::new("/c/smoke/a@fast.3.jsonl"));
    }
}
