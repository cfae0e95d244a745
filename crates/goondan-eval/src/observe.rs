//! [`Observed`]: what a case's swarm did, read back from what its
//! instances recorded in the case's own state root: the runtime events of
//! every instance (Steps, tokens, cost, failures, which agents ran a
//! Turn) and the stored conversations (each tool call with the arguments
//! the model gave it, which no runtime event carries).

use crate::EvalError;
use goondan_store::WorkspacePaths;
use goondan_store::{read_runtime_events, InstancePaths, InstanceStore, RuntimeEventFilter};
use goondan_types::{JsonValue, RuntimeEvent, ToolCallStatus};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};

/// One tool call a model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObservedToolCall {
    /// The agent whose model asked.
    pub agent: String,
    /// The tool name as the model saw it (`agents__request`).
    pub name: String,
    /// The arguments.
    pub args: JsonValue,
}

/// Totals and facts over every instance of a case.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Observed {
    /// Steps (model calls) completed.
    pub steps: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// US dollars of the priced model calls.
    pub cost_usd: f64,
    /// Model calls without a known price.
    pub unpriced_calls: u64,
    /// Every tool call, per agent in the order stored.
    pub tool_calls: Vec<ObservedToolCall>,
    /// The agents that ran a Turn, sorted.
    pub agents: Vec<String>,
    /// Every failure recorded: a failed Turn, Step or tool call, a tool
    /// result with an error, a budget refusal.
    pub errors: Vec<String>,
    /// Milliseconds the Turns of the instance the case talked to took, as
    /// they recorded it (a delegation's Turns run inside them).
    pub turn_ms: u64,
}

impl Observed {
    /// Input and output tokens together.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }
}

/// Reads what every instance of `workspace` recorded; `target` is the
/// `(agent, instance key)` the case talked to.
pub fn observe(workspace: &WorkspacePaths, target: (&str, &str)) -> Result<Observed, EvalError> {
    let store = InstanceStore::new(workspace.clone());
    let summaries = store.list().map_err(|error| EvalError::Host {
        code: error.code().to_string(),
        message: format!("listing the case's instances: {error}"),
    })?;
    let mut observed = Observed::default();
    let mut agents = BTreeSet::new();
    for summary in summaries {
        let paths = InstancePaths::from_dir(&summary.dir);
        let page = read_runtime_events(&paths.runtime_events_log(), &RuntimeEventFilter::default())
            .map_err(|error| EvalError::Host {
                code: error.code().to_string(),
                message: format!("reading {}: {error}", paths.runtime_events_log().display()),
            })?;
        let is_target = (summary.agent_name.as_str(), summary.instance_key.as_str()) == target;
        for record in page.records {
            if let (true, RuntimeEvent::TurnCompleted { duration, .. }) = (is_target, &record.event)
            {
                observed.turn_ms += duration;
            }
            tally(
                &mut observed,
                &mut agents,
                &summary.agent_name,
                record.event,
            );
        }
        collect_tool_calls(&paths, &summary.agent_name, &mut observed.tool_calls);
    }
    observed.agents = agents.into_iter().collect();
    Ok(observed)
}

fn tally(observed: &mut Observed, agents: &mut BTreeSet<String>, agent: &str, event: RuntimeEvent) {
    match event {
        RuntimeEvent::TurnStarted { .. } => {
            agents.insert(agent.to_string());
        }
        RuntimeEvent::StepCompleted {
            token_usage,
            cost_usd,
            ..
        } => {
            observed.steps += 1;
            if let Some(usage) = token_usage {
                observed.input_tokens += usage.prompt_tokens;
                observed.output_tokens += usage.completion_tokens;
            }
            match cost_usd {
                Some(cost) => observed.cost_usd += cost,
                None => observed.unpriced_calls += 1,
            }
        }
        RuntimeEvent::TurnFailed { error_message, .. } => observed
            .errors
            .push(format!("{agent}: turn.failed: {error_message}")),
        RuntimeEvent::StepFailed { error_message, .. } => observed
            .errors
            .push(format!("{agent}: step.failed: {error_message}")),
        RuntimeEvent::ToolFailed {
            tool_name,
            error_message,
            ..
        } => observed
            .errors
            .push(format!("{agent}: tool.failed {tool_name}: {error_message}")),
        RuntimeEvent::ToolCompleted {
            tool_name,
            status: ToolCallStatus::Error,
            ..
        } => observed
            .errors
            .push(format!("{agent}: tool {tool_name} returned an error")),
        RuntimeEvent::BudgetExceeded { error_message, .. } => observed
            .errors
            .push(format!("{agent}: budget.exceeded: {error_message}")),
        _ => {}
    }
}

/// The `tool-call` parts of an instance's stored messages (its folded
/// base, then events not yet folded), each call once.
fn collect_tool_calls(paths: &InstancePaths, agent: &str, out: &mut Vec<ObservedToolCall>) {
    let mut seen = HashSet::new();
    for file in ["base.jsonl", "events.jsonl"] {
        let Ok(text) = std::fs::read_to_string(paths.messages_dir().join(file)) else {
            continue;
        };
        for line in text.lines() {
            if let Ok(value) = serde_json::from_str::<JsonValue>(line) {
                find_tool_calls(&value, agent, &mut seen, out);
            }
        }
    }
}

fn find_tool_calls(
    value: &JsonValue,
    agent: &str,
    seen: &mut HashSet<String>,
    out: &mut Vec<ObservedToolCall>,
) {
    match value {
        JsonValue::Object(object) => {
            if object.get("type").and_then(JsonValue::as_str) == Some("tool-call") {
                let id = object
                    .get("toolCallId")
                    .and_then(JsonValue::as_str)
                    .unwrap_or_default()
                    .to_string();
                if let Some(name) = object.get("toolName").and_then(JsonValue::as_str) {
                    if seen.insert(id) {
                        out.push(ObservedToolCall {
                            agent: agent.to_string(),
                            name: name.to_string(),
                            args: object.get("input").cloned().unwrap_or(JsonValue::Null),
                        });
                    }
                }
                return;
            }
            for child in object.values() {
                find_tool_calls(child, agent, seen, out);
            }
        }
        JsonValue::Array(items) => {
            for item in items {
                find_tool_calls(item, agent, seen, out);
            }
        }
        _ => {}
    }
}
