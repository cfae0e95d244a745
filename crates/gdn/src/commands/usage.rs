//! `gdn usage`: the token and cost ledger, summed by swarm, agent,
//! instance or UTC day.
//!
//! The rows come from the `step.completed` runtime events of every
//! instance (one per model call, with `tokenUsage`, `model` and
//! `costUsd`; a scripted or replayed call has no usage and counts at zero
//! cost), so a day's row counts the calls made that day. A Swarm is
//! shown by its Package and Swarm names (`swarm.json` in its workspace). Instances
//! deleted with `gdn instance delete` take their events with them.
//! Nothing here writes.

use crate::cli::{GlobalArgs, UsageArgs, UsageGroup};
use crate::commands::target;
use crate::exit::Outcome;
use goondan_store::{read_runtime_events, InstancePaths, RuntimeEventFilter};
use goondan_types::RuntimeEvent;
use std::collections::BTreeMap;
use std::io::Write;

/// One row of the report.
#[derive(Debug, Default, Clone, PartialEq)]
struct UsageRow {
    /// The Swarm's workspace id.
    swarm: String,
    /// What people call it ([`target::SwarmName`]).
    name: target::SwarmName,
    /// The agent, when rows are per agent or instance.
    agent_name: Option<String>,
    /// The agent instance's key, when rows are per instance.
    instance_key: Option<String>,
    /// The UTC day, when rows are per day.
    day: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    /// US dollars of the priced calls.
    cost_usd: f64,
    model_calls: u64,
    /// Calls whose Model had no price (their tokens count, no cost).
    unpriced_calls: u64,
}

impl UsageRow {
    /// The `--json` object (camelCase, like every other JSON we print).
    fn to_json(&self) -> serde_json::Value {
        let mut object = serde_json::json!({
            "workspace": self.swarm,
            "agentName": self.agent_name,
            "instanceKey": self.instance_key,
            "day": self.day,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "costUsd": self.cost_usd,
            "modelCalls": self.model_calls,
            "unpricedCalls": self.unpriced_calls,
        });
        if let Some(fields) = object.as_object_mut() {
            self.name.json_fields(fields);
        }
        object
    }

    fn add(&mut self, input_tokens: u64, output_tokens: u64, cost_usd: Option<f64>) {
        self.input_tokens += input_tokens;
        self.output_tokens += output_tokens;
        self.model_calls += 1;
        match cost_usd {
            Some(cost) => self.cost_usd += cost,
            None => self.unpriced_calls += 1,
        }
    }
}

/// Runs `gdn usage`.
pub(crate) fn run(global: &GlobalArgs, args: &UsageArgs) -> anyhow::Result<Outcome> {
    let target = target::target(global)?;
    let filter = RuntimeEventFilter {
        agent_name: args.agent.clone(),
        event_type: Some("step.completed".into()),
        ..RuntimeEventFilter::default()
    };
    let mut rows: BTreeMap<(String, String, String, String), UsageRow> = BTreeMap::new();
    for store in target::stores(&target)? {
        let swarm = store.workspace().workspace_id().to_string();
        let name = target::SwarmName::of(store.workspace());
        for summary in store.list()? {
            let log = InstancePaths::from_dir(&summary.dir).runtime_events_log();
            for record in read_runtime_events(&log, &filter)?.records {
                let RuntimeEvent::StepCompleted {
                    base,
                    token_usage,
                    cost_usd,
                    ..
                } = record.event
                else {
                    continue;
                };
                // A scripted or replayed call reports no usage: it is a
                // call all the same, and it cost nothing.
                let (input_tokens, output_tokens, cost_usd) = match token_usage {
                    Some(usage) => (usage.prompt_tokens, usage.completion_tokens, cost_usd),
                    None => (0, 0, Some(cost_usd.unwrap_or(0.0))),
                };
                let day = base.timestamp.get(..10).unwrap_or_default().to_string();
                if args
                    .since
                    .as_deref()
                    .is_some_and(|since| day.as_str() < since)
                {
                    continue;
                }
                let (agent_name, instance_key, day) = match args.by {
                    UsageGroup::Swarm => (None, None, None),
                    UsageGroup::Agent => (Some(summary.agent_name.clone()), None, None),
                    UsageGroup::Instance => (
                        Some(summary.agent_name.clone()),
                        Some(summary.instance_key.clone()),
                        None,
                    ),
                    UsageGroup::Day => (None, None, Some(day)),
                };
                let key = (
                    swarm.clone(),
                    day.clone().unwrap_or_default(),
                    agent_name.clone().unwrap_or_default(),
                    instance_key.clone().unwrap_or_default(),
                );
                rows.entry(key)
                    .or_insert_with(|| UsageRow {
                        swarm: swarm.clone(),
                        name: name.clone(),
                        agent_name,
                        instance_key,
                        day,
                        ..UsageRow::default()
                    })
                    .add(input_tokens, output_tokens, cost_usd);
            }
        }
    }
    let rows: Vec<UsageRow> = rows.into_values().collect();
    target::say_what_is_shown(global, &target);
    let mut out = std::io::stdout().lock();
    if global.json {
        let objects: Vec<serde_json::Value> = rows.iter().map(UsageRow::to_json).collect();
        writeln!(out, "{}", serde_json::Value::Array(objects))?;
        return Ok(Outcome::Success);
    }
    render_table(&mut out, &rows, args.by)?;
    if rows.is_empty() && !global.quiet {
        writeln!(
            out,
            "(no model calls recorded under {})",
            target.state_root.path().display()
        )?;
    }
    Ok(Outcome::Success)
}

fn render_table(out: &mut impl Write, rows: &[UsageRow], by: UsageGroup) -> std::io::Result<()> {
    let label = match by {
        UsageGroup::Swarm => "SWARM",
        UsageGroup::Agent => "SWARM / AGENT",
        UsageGroup::Instance => "SWARM / AGENT:INSTANCE",
        UsageGroup::Day => "SWARM / DAY",
    };
    writeln!(
        out,
        "{:<44} {:>8} {:>12} {:>12} {:>12}",
        label, "CALLS", "INPUT", "OUTPUT", "COST USD"
    )?;
    let mut total = UsageRow::default();
    let names: Vec<target::SwarmName> = rows.iter().map(|row| row.name.clone()).collect();
    let swarms = target::shown_names(&names);
    for (row, swarm) in rows.iter().zip(&swarms) {
        let name = match by {
            UsageGroup::Swarm => swarm.clone(),
            UsageGroup::Agent => {
                format!("{} / {}", swarm, row.agent_name.as_deref().unwrap_or("-"))
            }
            UsageGroup::Instance => format!(
                "{} / {}:{}",
                swarm,
                row.agent_name.as_deref().unwrap_or("-"),
                row.instance_key.as_deref().unwrap_or("-")
            ),
            UsageGroup::Day => format!("{} / {}", swarm, row.day.as_deref().unwrap_or("-")),
        };
        writeln!(
            out,
            "{:<44} {:>8} {:>12} {:>12} {:>12}",
            name,
            row.model_calls,
            row.input_tokens,
            row.output_tokens,
            cost_text(row)
        )?;
        total.input_tokens += row.input_tokens;
        total.output_tokens += row.output_tokens;
        total.cost_usd += row.cost_usd;
        total.model_calls += row.model_calls;
        total.unpriced_calls += row.unpriced_calls;
    }
    if rows.len() > 1 {
        writeln!(
            out,
            "{:<44} {:>8} {:>12} {:>12} {:>12}",
            "TOTAL",
            total.model_calls,
            total.input_tokens,
            total.output_tokens,
            cost_text(&total)
        )?;
    }
    if total.unpriced_calls > 0 {
        writeln!(
            out,
            "({} calls had no known price and count no cost: set Model.spec.pricing)",
            total.unpriced_calls
        )?;
    }
    Ok(())
}

/// Dollars with six decimals; `-` when no call of the row had a price.
fn cost_text(row: &UsageRow) -> String {
    if row.unpriced_calls == row.model_calls {
        "-".to_string()
    } else {
        format!("{:.6}", row.cost_usd)
    }
}
