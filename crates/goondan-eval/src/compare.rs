//! [`compare`]: what changed between two stored runs, case run by case
//! run (matched by Eval, case, Model and repeat): which now pass or fail,
//! whose score went up or down, which are new or gone.

use crate::report::{CaseResult, CaseStatus, RunReport};
use serde::Serialize;

/// Which way a case moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Change {
    /// It passes now and did not, or its score rose.
    Better,
    /// It fails now and passed, or its score fell.
    Worse,
    /// Nothing a report shows moved.
    Same,
    /// Only in the second run.
    New,
    /// Only in the first run.
    Gone,
}

/// One case run in either report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaseChange {
    /// The Eval.
    pub eval: String,
    /// `case@model#n`.
    pub case: String,
    /// Its status in the first run.
    pub before: Option<CaseStatus>,
    /// Its status in the second run.
    pub after: Option<CaseStatus>,
    /// Its score in the first run.
    pub score_before: Option<f64>,
    /// Its score in the second run.
    pub score_after: Option<f64>,
    /// Which way it moved.
    pub change: Change,
}

/// Two runs side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// The first run's id.
    pub before: String,
    /// The second run's id.
    pub after: String,
    /// Every case run of either, the second run's order first.
    pub cases: Vec<CaseChange>,
}

impl Comparison {
    /// How many moved `change`'s way.
    pub fn count(&self, change: Change) -> usize {
        self.cases
            .iter()
            .filter(|case| case.change == change)
            .count()
    }
}

/// What changed from `before` to `after`.
pub fn compare(before: &RunReport, after: &RunReport) -> Comparison {
    let same_run = |a: &CaseResult, b: &CaseResult| {
        a.eval == b.eval && a.name == b.name && a.model == b.model && a.repeat == b.repeat
    };
    let mut cases = Vec::new();
    for new in &after.cases {
        let old = before.cases.iter().find(|old| same_run(old, new));
        let change = match old {
            None => Change::New,
            Some(old) => movement(old, new),
        };
        cases.push(CaseChange {
            eval: new.eval.clone(),
            case: new.label(),
            before: old.map(|old| old.status),
            after: Some(new.status),
            score_before: old.and_then(|old| old.score),
            score_after: new.score,
            change,
        });
    }
    for old in &before.cases {
        if !after.cases.iter().any(|new| same_run(old, new)) {
            cases.push(CaseChange {
                eval: old.eval.clone(),
                case: old.label(),
                before: Some(old.status),
                after: None,
                score_before: old.score,
                score_after: None,
                change: Change::Gone,
            });
        }
    }
    Comparison {
        before: before.run_id.clone(),
        after: after.run_id.clone(),
        cases,
    }
}

fn movement(old: &CaseResult, new: &CaseResult) -> Change {
    match (old.passed, new.passed) {
        (false, true) => return Change::Better,
        (true, false) => return Change::Worse,
        _ => {}
    }
    match (old.score, new.score) {
        (Some(a), Some(b)) if b > a => Change::Better,
        (Some(a), Some(b)) if b < a => Change::Worse,
        _ => Change::Same,
    }
}
