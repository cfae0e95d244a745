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
    /// Only the cases of these names, in the Evals selected (all when
    /// empty). Each is a case's name, or several names separated by
    /// commas; a value that is itself a case's name is taken whole.
    pub cases: Vec<String>,
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
        let cases = select_cases(&evals, &options.names, &options.cases)?;
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
                if !cases.is_empty() && !cases.contains(&case.name.as_str()) {
                    continue;
                }
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

/// The case names `asked` (`--case`) come to, checked against the cases
/// of `evals`: each value is a case's name, or names separated by commas
/// (a value that is a case's name as it stands is not split, so a name
/// with a comma in it still works). Empty when nothing was asked: every
/// case runs.
fn select_cases<'a>(
    evals: &[&Resource<EvalSpec>],
    eval_names: &[String],
    asked: &'a [String],
) -> Result<Vec<&'a str>, EvalError> {
    let known: Vec<&str> = evals
        .iter()
        .flat_map(|eval| eval.spec.cases.iter().map(|case| case.name.as_str()))
        .collect();
    let mut names = Vec::new();
    for value in asked {
        if known.contains(&value.as_str()) {
            names.push(value.as_str());
            continue;
        }
        for name in value
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
        {
            if !known.contains(&name) {
                let mut listed: Vec<String> = Vec::new();
                for case in &known {
                    if !listed.iter().any(|seen| seen == case) {
                        listed.push(case.to_string());
                    }
                }
                return Err(EvalError::UnknownCase {
                    name: name.to_string(),
                    scope: if eval_names.is_empty() {
                        "any Eval".to_string()
                    } else {
                        eval_names
                            .iter()
                            .map(|name| format!("Eval/{name}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    },
                    known: listed,
                });
            }
            names.push(name);
        }
    }
    Ok(names)
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

    /// A bundle of two Evals, `a` (cases `one`, `two`, `x,y`) and `b`
    /// (cases `one`, `three`).
    fn two_evals() -> (tempfile::TempDir, Bundle) {
        let dir = tempfile::tempdir().unwrap();
        let eval = |name: &str, cases: &[&str]| {
            let cases: String = cases
                .iter()
                .map(|case| format!("    - name: \"{case}\"\n      input: hi\n"))
                .collect();
            format!("---\napiVersion: goondan.ai/v1\nkind: Eval\nmetadata:\n  name: {name}\nspec:\n  cases:\n{cases}")
        };
        let text = format!(
            "apiVersion: goondan.ai/v1\nkind: Model\nmetadata:\n  name: m\nspec:\n  provider: scripted\n  model: s\n---\napiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: echo\nspec:\n  modelConfig:\n    modelRef: Model/m\n---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata:\n  name: default\nspec:\n  entryAgent: Agent/echo\n  agents:\n    - ref: Agent/echo\n{}{}",
            eval("a", &["one", "two", "x,y"]),
            eval("b", &["one", "three"]),
        );
        std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
        let loaded =
            goondan_config::load_bundle(dir.path(), &goondan_config::LoadOptions::default())
                .unwrap();
        let bundle = loaded
            .bundle
            .unwrap_or_else(|| panic!("{:?}", loaded.diagnostics));
        (dir, bundle)
    }

    #[test]
    fn case_names_select_the_cases_of_that_name_or_name_the_ones_there_are() {
        let (_dir, bundle) = two_evals();
        let planned = |names: &[&str], cases: &[&str]| -> Result<Vec<String>, EvalError> {
            let options = EvalOptions {
                names: names.iter().map(|n| n.to_string()).collect(),
                cases: cases.iter().map(|n| n.to_string()).collect(),
                ..EvalOptions::default()
            };
            Plan::new(&bundle, &options).map(|plan| plan.jobs.iter().map(CaseJob::label).collect())
        };
        let cases: [(&[&str], &[&str], &[&str]); 6] = [
            (&[], &[], &["a/one", "a/two", "a/x,y", "b/one", "b/three"]),
            (&[], &["one"], &["a/one", "b/one"]),
            (&["b"], &["one"], &["b/one"]),
            (&[], &["two", "three"], &["a/two", "b/three"]),
            (&[], &["two, three"], &["a/two", "b/three"]),
            // A name with a comma in it is taken whole.
            (&[], &["x,y"], &["a/x,y"]),
        ];
        for (names, asked, expected) in cases {
            assert_eq!(
                planned(names, asked).unwrap(),
                expected,
                "{names:?} {asked:?}"
            );
        }
        let error = planned(&["b"], &["two"]).unwrap_err();
        assert_eq!(error.code(), "E_EVAL_CASE_NOT_FOUND");
        assert_eq!(
            error.to_string(),
            "no case `two` in Eval/b (there are: one, three)"
        );
        let error = planned(&[], &["one,nope"]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "no case `nope` in any Eval (there are: one, two, x,y, three)"
        );
    }

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
