//! `Eval.spec` (issue 39, a Goondan-rs kind): cases for `gdn eval`, each an
//! input (or several turns) for an agent of the bundle with assertions on
//! what the swarm did, and optionally a rubric for a judge Model. Only the
//! shape is here; the rules that span fields (input or turns, a judge for
//! a rubric, ranges, references) are in the loader's rules, and running
//! the cases is `goondan-eval`'s.

use goondan_types::{JsonObject, JsonValue, ObjectRefLike};
use serde::Deserialize;

/// `Eval.spec`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvalSpec {
    /// The Swarm the cases run in (default: as `gdn run` picks it).
    #[serde(default)]
    pub swarm: Option<String>,
    /// The agent the cases talk to (default: the Swarm's entry agent).
    #[serde(default)]
    pub agent: Option<String>,
    /// The instance key of that agent (default: `eval`).
    #[serde(default)]
    pub instance_key: Option<String>,
    /// The Model that scores rubrics; needed only by cases with one.
    #[serde(default)]
    pub judge: Option<ObjectRefLike>,
    /// The lowest judged score (0 to 10) a case may get and pass; 7 when
    /// absent.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// Models to run every case with in turn (`--models` overrides it).
    #[serde(default)]
    pub models: Vec<String>,
    /// How many times each case runs (`--repeat` overrides it).
    #[serde(default)]
    pub repeat: Option<u32>,
    /// Seconds a case may take before it is stopped (default 120).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// The cases.
    pub cases: Vec<EvalCase>,
}

/// One case of an Eval.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvalCase {
    /// Unique within its Eval.
    pub name: String,
    /// The one user message (or use `turns`).
    #[serde(default)]
    pub input: Option<String>,
    /// Several user messages, sent one after the other to the same
    /// instance; assertions on the answer look at the last one.
    #[serde(default)]
    pub turns: Vec<String>,
    /// The agent for this case (default: the Eval's).
    #[serde(default)]
    pub agent: Option<String>,
    /// The instance key for this case (default: the Eval's).
    #[serde(default)]
    pub instance_key: Option<String>,
    /// What a good answer does, for the judge.
    #[serde(default)]
    pub expected: Option<String>,
    /// Criteria the judge scores.
    #[serde(default)]
    pub rubric: Vec<String>,
    /// This case's lowest passing score (default: the Eval's).
    #[serde(default)]
    pub threshold: Option<f64>,
    /// This case's time limit in seconds (default: the Eval's).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    /// Deterministic checks.
    #[serde(default, rename = "assert")]
    pub assertions: Vec<Assertion>,
}

/// One deterministic check: a map with one key.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Assertion {
    /// The answer contains this text.
    Contains(String),
    /// The answer does not contain this text.
    NotContains(String),
    /// The answer matches this regular expression (Rust `regex` syntax).
    Regex(String),
    /// The answer, trimmed, is exactly this text.
    Equals(String),
    /// The answer is JSON that satisfies this JSON Schema.
    JsonSchema(JsonValue),
    /// A tool with this name ran, with arguments containing `args`.
    ToolCalled(ToolCallAssertion),
    /// No tool call matched.
    ToolNotCalled(ToolCallAssertion),
    /// This agent ran a Turn during the case.
    AgentAsked(String),
    /// At most this many Steps, over every agent.
    MaxSteps(u64),
    /// At most this many tokens (input and output), over every agent.
    MaxTokens(u64),
    /// At most this many US dollars, over every priced model call.
    MaxCostUsd(f64),
    /// The case took at most this many milliseconds.
    MaxLatencyMs(u64),
    /// With `true`: no Turn, Step or tool call failed.
    NoErrors(bool),
}

/// A tool call to look for.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCallAssertion {
    /// The tool name as the model sees it (`agents__request`).
    pub name: String,
    /// Arguments the call must have (each key equal, recursively; other
    /// keys are allowed).
    #[serde(default)]
    pub args: Option<JsonObject>,
}

impl EvalCase {
    /// The user messages in order: `input`, or `turns`.
    pub fn messages(&self) -> Vec<String> {
        match &self.input {
            Some(input) => vec![input.clone()],
            None => self.turns.clone(),
        }
    }
}
