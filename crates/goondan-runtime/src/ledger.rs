//! The token and cost ledger of one agent instance, and the Swarm's
//! `policy.budget` checked before every model call.
//!
//! Every model call's usage is priced here ([`Ledger::record`]) right after
//! the call returns, added to the instance's lifetime totals (which the
//! host writes to `metadata.json` after each Turn) and, when a budget
//! needs it, to the Swarm-wide tallies shared by all agent processes
//! ([`goondan_store::SwarmUsageTally`]). Before the next call,
//! [`Ledger::admit`] refuses it with [`BudgetExceeded`]
//! (`E_BUDGET_EXCEEDED`) once a limit is reached.
//!
//! A limit is checked against what was already used, since the size of
//! the next answer is unknown before it is asked for: the call that
//! reaches a limit completes, and the one after it is refused. So a
//! budget may be overshot by at most one model call per running agent.
//!
//! This module does not know where the totals are stored: the instance's
//! come in with [`Ledger::with_instance_totals`] and go out with
//! [`Ledger::instance_totals`].

use goondan_model::ModelPrice;
use goondan_store::{StoreError, SwarmUsageTally, UsageTotals};
use goondan_types::TokenUsage;
use std::sync::Mutex;
use thiserror::Error;

/// The code of a refused model call.
pub const BUDGET_EXCEEDED: &str = "E_BUDGET_EXCEEDED";

/// `Swarm.spec.policy.budget`, as numbers. An absent limit is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BudgetLimits {
    /// Tokens of one root Turn and every inter-agent Turn under it (one
    /// trace).
    pub max_tokens_per_turn: Option<u64>,
    /// Tokens of one instance over its life.
    pub max_tokens_per_instance: Option<u64>,
    /// US dollars of one instance over its life.
    pub max_cost_usd_per_instance: Option<f64>,
    /// US dollars of the whole Swarm per UTC day.
    pub max_cost_usd_per_day: Option<f64>,
}

impl BudgetLimits {
    /// True when some limit is set.
    pub fn any(&self) -> bool {
        self.max_tokens_per_turn.is_some()
            || self.max_tokens_per_instance.is_some()
            || self.max_cost_usd_per_instance.is_some()
            || self.max_cost_usd_per_day.is_some()
    }

    /// True when a limit needs the Swarm-wide tallies (shared by agents).
    fn needs_swarm_tally(&self) -> bool {
        self.max_tokens_per_turn.is_some() || self.max_cost_usd_per_day.is_some()
    }
}

/// Which limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetLimit {
    /// `maxTokensPerTurn`.
    TokensPerTurn,
    /// `maxTokensPerInstance`.
    TokensPerInstance,
    /// `maxCostUsdPerInstance`.
    CostUsdPerInstance,
    /// `maxCostUsdPerDay`.
    CostUsdPerDay,
}

impl BudgetLimit {
    /// The field name under `spec.policy.budget`.
    pub fn field(self) -> &'static str {
        match self {
            BudgetLimit::TokensPerTurn => "maxTokensPerTurn",
            BudgetLimit::TokensPerInstance => "maxTokensPerInstance",
            BudgetLimit::CostUsdPerInstance => "maxCostUsdPerInstance",
            BudgetLimit::CostUsdPerDay => "maxCostUsdPerDay",
        }
    }
}

/// A model call refused by a budget (`E_BUDGET_EXCEEDED`). Nothing was
/// sent to the model and nothing stored was changed.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("{}", self.describe())]
pub struct BudgetExceeded {
    /// The limit.
    pub limit: BudgetLimit,
    /// Its configured value.
    pub limit_value: f64,
    /// What was already used against it.
    pub used: f64,
    /// What the limit counts (`trace 4bf9...`, `instance coder:u1`,
    /// `swarm on 2026-05-01`).
    pub scope: String,
}

impl BudgetExceeded {
    fn describe(&self) -> String {
        let (used, limit) = match self.limit {
            BudgetLimit::TokensPerTurn | BudgetLimit::TokensPerInstance => (
                format!("{} tokens", self.used),
                format!("{} tokens", self.limit_value),
            ),
            BudgetLimit::CostUsdPerInstance | BudgetLimit::CostUsdPerDay => (
                format!("${:.6}", self.used),
                format!("${:.6}", self.limit_value),
            ),
        };
        // The suggestion is part of the message: a Turn's error reaches
        // its caller (a terminal, another agent) as code and message only.
        format!(
            "{BUDGET_EXCEEDED}: model call refused: the {} used {used}, reaching spec.policy.budget.{} ({limit}); to go on, {}",
            self.scope,
            self.limit.field(),
            self.suggestion()
        )
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        BUDGET_EXCEEDED
    }

    /// How to get going again.
    pub fn suggestion(&self) -> &'static str {
        match self.limit {
            BudgetLimit::TokensPerTurn => {
                "send a new input (each root Turn starts a new count), or raise spec.policy.budget.maxTokensPerTurn and restart the swarm (gdn restart)"
            }
            BudgetLimit::TokensPerInstance | BudgetLimit::CostUsdPerInstance => {
                "raise the limit in spec.policy.budget and restart the swarm (gdn restart), or start the instance afresh with gdn instance delete <agent>:<instanceKey> (its conversation and usage go with it)"
            }
            BudgetLimit::CostUsdPerDay => {
                "wait for the next UTC day, or raise spec.policy.budget.maxCostUsdPerDay and restart the swarm (gdn restart)"
            }
        }
    }
}

/// Why [`Ledger::admit`] did not admit a call.
#[derive(Debug, Error)]
pub enum AdmitError {
    /// A limit is reached.
    #[error(transparent)]
    Exceeded(#[from] BudgetExceeded),
    /// The Swarm-wide tally could not be read; the call is refused rather
    /// than let a budget go unchecked.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The ledger of one agent instance. See the module documentation.
#[derive(Debug)]
pub struct Ledger {
    instance: String,
    model: String,
    price: Option<ModelPrice>,
    limits: BudgetLimits,
    tally: Option<SwarmUsageTally>,
    totals: Mutex<UsageTotals>,
}

/// What one recorded model call came to.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    /// The Model resource's name.
    pub model: String,
    /// US dollars, when the Model's price is known.
    pub cost_usd: Option<f64>,
}

fn utc_day() -> String {
    chrono::Utc::now().format("%Y-%m-%d").to_string()
}

impl Ledger {
    /// A ledger for the instance `instance` (`agent:key`, used in
    /// messages) calling the Model named `model` at `price` (`None`: the
    /// price is unknown, only tokens are counted), with no budget.
    pub fn new(
        instance: impl Into<String>,
        model: impl Into<String>,
        price: Option<ModelPrice>,
    ) -> Self {
        Ledger {
            instance: instance.into(),
            model: model.into(),
            price,
            limits: BudgetLimits::default(),
            tally: None,
            totals: Mutex::new(UsageTotals::default()),
        }
    }

    /// Applies `limits`; the Swarm-wide ones count in `tally`, which is
    /// touched only when such a limit is set.
    pub fn with_budget(mut self, limits: BudgetLimits, tally: SwarmUsageTally) -> Self {
        self.limits = limits;
        self.tally = limits.needs_swarm_tally().then_some(tally);
        self
    }

    /// Starts from the instance's stored lifetime totals.
    pub fn with_instance_totals(self, totals: UsageTotals) -> Self {
        *self.lock() = totals;
        self
    }

    /// The instance's lifetime totals so far.
    pub fn instance_totals(&self) -> UsageTotals {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, UsageTotals> {
        // Adding numbers cannot leave the totals half-updated.
        self.totals
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a model call of the trace `trace_id` may go out now.
    pub fn admit(&self, trace_id: &str) -> Result<(), AdmitError> {
        if !self.limits.any() {
            return Ok(());
        }
        let totals = self.instance_totals();
        let instance_scope = || format!("instance {}", self.instance);
        if let Some(limit) = self.limits.max_tokens_per_instance {
            if totals.tokens() >= limit {
                return Err(BudgetExceeded {
                    limit: BudgetLimit::TokensPerInstance,
                    limit_value: limit as f64,
                    used: totals.tokens() as f64,
                    scope: instance_scope(),
                }
                .into());
            }
        }
        if let Some(limit) = self.limits.max_cost_usd_per_instance {
            if totals.cost_usd >= limit {
                return Err(BudgetExceeded {
                    limit: BudgetLimit::CostUsdPerInstance,
                    limit_value: limit,
                    used: totals.cost_usd,
                    scope: instance_scope(),
                }
                .into());
            }
        }
        let Some(tally) = &self.tally else {
            return Ok(());
        };
        let day = utc_day();
        let swarm = tally.read(trace_id, &day)?;
        if let Some(limit) = self.limits.max_tokens_per_turn {
            if swarm.trace_tokens >= limit {
                return Err(BudgetExceeded {
                    limit: BudgetLimit::TokensPerTurn,
                    limit_value: limit as f64,
                    used: swarm.trace_tokens as f64,
                    scope: format!("Turn (trace {trace_id}, every agent it reached)"),
                }
                .into());
            }
        }
        if let Some(limit) = self.limits.max_cost_usd_per_day {
            if swarm.day_cost_usd >= limit {
                return Err(BudgetExceeded {
                    limit: BudgetLimit::CostUsdPerDay,
                    limit_value: limit,
                    used: swarm.day_cost_usd,
                    scope: format!("swarm on {day} (UTC)"),
                }
                .into());
            }
        }
        Ok(())
    }

    /// Records one model call of the trace `trace_id` and returns what it
    /// came to. A Swarm tally that cannot be written is logged: the call
    /// already happened, and the instance totals still count it.
    pub fn record(&self, trace_id: &str, usage: &TokenUsage) -> RecordedCall {
        let cost_usd = self.price.map(|price| price.cost_usd(usage));
        self.lock().add(usage, cost_usd);
        if let Some(tally) = &self.tally {
            if let Err(error) = tally.add(trace_id, &utc_day(), usage, cost_usd) {
                tracing::warn!(code = error.code(), %error, "the swarm's usage tally was not updated");
            }
        }
        RecordedCall {
            model: self.model.clone(),
            cost_usd,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_model::PriceSource;
    use goondan_store::StateRoot;

    fn usage(prompt: u64, completion: u64) -> TokenUsage {
        TokenUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }
    }

    fn price() -> ModelPrice {
        ModelPrice {
            input_usd_per_token: 0.001,
            output_usd_per_token: 0.002,
            source: PriceSource::ModelSpec,
        }
    }

    #[test]
    fn records_price_each_call_and_sum_per_instance() {
        let ledger = Ledger::new("a:k", "m", Some(price()));
        let first = ledger.record("t", &usage(100, 10));
        assert_eq!(first.model, "m");
        assert!((first.cost_usd.unwrap() - 0.12).abs() < 1e-12);
        ledger.record("t", &usage(1, 1));
        let totals = ledger.instance_totals();
        assert_eq!(
            (
                totals.input_tokens,
                totals.output_tokens,
                totals.model_calls
            ),
            (101, 11, 2)
        );
        let unpriced = Ledger::new("a:k", "m", None).record("t", &usage(5, 5));
        assert_eq!(unpriced.cost_usd, None);
    }

    #[test]
    fn each_limit_refuses_the_call_after_it_is_reached() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                BudgetLimits {
                    max_tokens_per_turn: Some(20),
                    ..Default::default()
                },
                BudgetLimit::TokensPerTurn,
            ),
            (
                BudgetLimits {
                    max_tokens_per_instance: Some(20),
                    ..Default::default()
                },
                BudgetLimit::TokensPerInstance,
            ),
            (
                BudgetLimits {
                    max_cost_usd_per_instance: Some(0.03),
                    ..Default::default()
                },
                BudgetLimit::CostUsdPerInstance,
            ),
            (
                BudgetLimits {
                    max_cost_usd_per_day: Some(0.03),
                    ..Default::default()
                },
                BudgetLimit::CostUsdPerDay,
            ),
        ];
        for (index, (limits, expected)) in cases.into_iter().enumerate() {
            let workspace = StateRoot::new(dir.path()).workspace(&format!("w{index}"));
            let ledger = Ledger::new("a:k", "m", Some(price()))
                .with_budget(limits, SwarmUsageTally::new(&workspace));
            ledger.admit("t1").unwrap();
            ledger.record("t1", &usage(10, 5));
            ledger.admit("t1").unwrap();
            ledger.record("t1", &usage(10, 5));
            let refused = match ledger.admit("t1") {
                Err(AdmitError::Exceeded(refused)) => refused,
                other => panic!("{expected:?}: {other:?}"),
            };
            assert_eq!(refused.limit, expected);
            assert!(
                refused.to_string().starts_with(BUDGET_EXCEEDED),
                "{refused}"
            );
            assert!(refused.to_string().contains(expected.field()));
            // Per Turn, a new trace starts afresh.
            if expected == BudgetLimit::TokensPerTurn {
                ledger.admit("t2").unwrap();
            }
        }
    }

    #[test]
    fn other_agents_of_the_trace_count_toward_the_turn() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = StateRoot::new(dir.path()).workspace("main");
        let limits = BudgetLimits {
            max_tokens_per_turn: Some(30),
            ..Default::default()
        };
        let caller =
            Ledger::new("a:k", "m", None).with_budget(limits, SwarmUsageTally::new(&workspace));
        let callee =
            Ledger::new("b:k", "m", None).with_budget(limits, SwarmUsageTally::new(&workspace));
        caller.record("t", &usage(10, 5));
        callee.record("t", &usage(10, 5));
        assert!(matches!(caller.admit("t"), Err(AdmitError::Exceeded(_))));
        // The instance totals stay each instance's own.
        assert_eq!(caller.instance_totals().tokens(), 15);
    }

    #[test]
    fn no_budget_touches_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = StateRoot::new(dir.path()).workspace("main");
        let ledger = Ledger::new("a:k", "m", None).with_budget(
            BudgetLimits {
                max_tokens_per_instance: Some(5),
                ..Default::default()
            },
            SwarmUsageTally::new(&workspace),
        );
        ledger.record("t", &usage(1, 1));
        ledger.admit("t").unwrap();
        assert!(!workspace.dir().join("usage").exists());
    }
}
