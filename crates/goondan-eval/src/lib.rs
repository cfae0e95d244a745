//! Evals (issue 39): `gdn eval` runs the cases of a bundle's `Eval`
//! resources as real swarms and reports how well the swarm did.
//!
//! * [`plan`]: which cases run, with which Models and how often (the
//!   matrix), and where their cassettes are;
//! * [`case`]: one case in its own fresh state root through
//!   [`goondan_host::start`] (real agent processes), within its time limit;
//! * [`observe`]: what the swarm's logs recorded (steps, tokens, cost, tool
//!   calls with their arguments, agents asked, errors);
//! * [`assertions`]: the deterministic checks;
//! * [`judge`]: the rubric scored by a judge Model, its answer parsed
//!   strictly;
//! * [`report`]: a run's results, its summary per case and Model, JUnit
//!   XML and Markdown;
//! * [`store`]: runs kept under the System Root, and [`compare`] of two.
//!
//! This crate prints nothing: the caller renders reports and progress.
//! Evals do not exist for `gdn run`: nothing here is reached from a swarm.

#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod assertions;
pub mod case;
pub mod compare;
mod error;
pub mod judge;
pub mod observe;
pub mod plan;
pub mod report;
pub mod run;
pub mod store;

pub use error::EvalError;
pub use plan::{EvalOptions, Plan};
pub use report::{CaseResult, CaseStatus, RunFlags, RunReport};
pub use run::{run, Progress, RunSettings};
