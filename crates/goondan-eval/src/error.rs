//! [`EvalError`]: why an eval could not run, or why one case has no
//! result (its judge answered badly, its swarm did not start). A case that
//! ran and missed its assertions is not an error: it is a failed case in
//! the report.

use thiserror::Error;

/// What went wrong, with a stable code and a suggestion.
#[derive(Debug, Error)]
pub enum EvalError {
    /// `gdn eval NAME` named an Eval the bundle does not define.
    #[error("Eval/{name} is not defined in this bundle{}", known_list(.known))]
    UnknownEval {
        /// The name asked for.
        name: String,
        /// The Evals there are.
        known: Vec<String>,
    },
    /// `gdn eval --case NAME` named a case no selected Eval has.
    #[error("no case `{name}` in {scope}{}", known_list(.known))]
    UnknownCase {
        /// The name asked for.
        name: String,
        /// Where it was looked for: `Eval/a, Eval/b` or `any Eval`.
        scope: String,
        /// The case names there are, in the bundle's order.
        known: Vec<String>,
    },
    /// The bundle defines no Eval at all.
    #[error("the bundle defines no Eval")]
    NoEvals,
    /// `--models` (or `spec.models`) named a Model the bundle lacks.
    #[error("Model/{name} (in the matrix) is not defined in this bundle")]
    UnknownModel {
        /// The name asked for.
        name: String,
    },
    /// The case's swarm could not start or stopped under it.
    #[error("the case's swarm: {message}")]
    Host {
        /// The host's or orchestrator's code.
        code: String,
        /// What it said.
        message: String,
    },
    /// The judge Model could not be built or called.
    #[error("the judge Model/{model}: {message}")]
    JudgeCall {
        /// The judge's name.
        model: String,
        /// What went wrong.
        message: String,
    },
    /// The judge answered, and not with the JSON it was asked for.
    #[error("the judge's answer is not the JSON asked for: {problem}; it answered: {answer}")]
    JudgeAnswer {
        /// What is wrong with it.
        problem: String,
        /// The start of what it said.
        answer: String,
    },
    /// A stored run could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A stored run is not a run this version can read.
    #[error("{path}: not a stored eval run: {message}")]
    BadRun {
        /// The file.
        path: String,
        /// The parse error.
        message: String,
    },
    /// `gdn eval compare` named a run that is not stored.
    #[error("no stored eval run `{id}` under {root}")]
    RunNotFound {
        /// The id asked for.
        id: String,
        /// Where runs are kept.
        root: String,
    },
    /// `--replay` found no cassette for a case.
    #[error("no cassette for case `{case}` at {path}")]
    CassetteMissing {
        /// `eval/case`.
        case: String,
        /// The file looked for.
        path: String,
    },
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        String::new()
    } else {
        format!(" (there are: {})", known.join(", "))
    }
}

impl EvalError {
    /// The stable code.
    pub fn code(&self) -> &str {
        match self {
            EvalError::UnknownEval { .. } => "E_EVAL_NOT_FOUND",
            EvalError::UnknownCase { .. } => "E_EVAL_CASE_NOT_FOUND",
            EvalError::NoEvals => "E_EVAL_NONE",
            EvalError::UnknownModel { .. } => "E_EVAL_MODEL_NOT_FOUND",
            EvalError::Host { code, .. } => code,
            EvalError::JudgeCall { .. } => "E_EVAL_JUDGE_CALL",
            EvalError::JudgeAnswer { .. } => "E_EVAL_JUDGE_ANSWER",
            EvalError::Io { .. } => "E_EVAL_IO",
            EvalError::BadRun { .. } => "E_EVAL_RUN_UNREADABLE",
            EvalError::RunNotFound { .. } => "E_EVAL_RUN_NOT_FOUND",
            EvalError::CassetteMissing { .. } => "E_EVAL_CASSETTE_MISSING",
        }
    }

    /// What to do about it.
    pub fn suggestion(&self) -> Option<&'static str> {
        Some(match self {
            EvalError::UnknownEval { .. } => "run `gdn eval` with no name to run every Eval",
            EvalError::UnknownCase { .. } => {
                "name a case of the Evals run (`--case` takes a case's `name`), or leave --case out to run them all"
            }
            EvalError::NoEvals => {
                "add a document of `kind: Eval` to goondan.yaml or a file under evals/ (docs/eval.md)"
            }
            EvalError::UnknownModel { .. } => "name Models the bundle defines",
            EvalError::Host { .. } => return None,
            EvalError::JudgeCall { .. } => "check the judge Model's key and endpoint",
            EvalError::JudgeAnswer { .. } => {
                "use a judge Model that follows instructions; the prompt is in docs/eval.md"
            }
            EvalError::Io { .. } => "check the System Root's permissions",
            EvalError::BadRun { .. } => "remove the damaged run folder",
            EvalError::RunNotFound { .. } => "list the stored runs with `gdn eval runs`",
            EvalError::CassetteMissing { .. } => {
                "record the cases first with `gdn eval --record DIR`"
            }
        })
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> EvalError {
        let what = what.into();
        move |source| EvalError::Io { what, source }
    }
}
