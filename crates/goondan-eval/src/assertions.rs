//! The deterministic checks of a case ([`Assertion`]), each against the
//! last answer, what the swarm recorded ([`Observed`]) and how long its
//! Turns took. A check that fails says what it wanted and what it saw.

use crate::observe::Observed;
use goondan_config::spec::{Assertion, ToolCallAssertion};
use goondan_types::JsonValue;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The longest excerpt of an answer a failure quotes.
const QUOTE_CHARS: usize = 120;

/// One check that did not hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The check's key (`contains`, `toolCalled`, `threshold`, ...).
    pub assertion: String,
    /// What was wanted and what was seen.
    pub message: String,
}

impl Failure {
    /// A failure of `assertion`.
    pub fn new(assertion: &str, message: impl Into<String>) -> Failure {
        Failure {
            assertion: assertion.to_string(),
            message: message.into(),
        }
    }
}

/// What a case's checks look at.
#[derive(Debug, Clone, Copy)]
pub struct Evidence<'a> {
    /// The last answer's text.
    pub answer: &'a str,
    /// What the swarm recorded.
    pub observed: &'a Observed,
    /// How long the case's Turns took together.
    pub latency: Duration,
}

/// `None` when `assertion` holds for `evidence`.
pub fn check(assertion: &Assertion, evidence: &Evidence<'_>) -> Option<Failure> {
    let answer = evidence.answer;
    let observed = evidence.observed;
    let fail = |key: &str, message: String| Some(Failure::new(key, message));
    match assertion {
        Assertion::Contains(text) => (!answer.contains(text.as_str())).then(|| {
            Failure::new(
                "contains",
                format!(
                    "the answer does not contain {text:?}; it is {}",
                    quote(answer)
                ),
            )
        }),
        Assertion::NotContains(text) => answer.contains(text.as_str()).then(|| {
            Failure::new(
                "notContains",
                format!("the answer contains {text:?}: {}", quote(answer)),
            )
        }),
        Assertion::Regex(pattern) => match regex::Regex::new(pattern) {
            Ok(regex) if regex.is_match(answer) => None,
            Ok(_) => fail(
                "regex",
                format!(
                    "the answer does not match /{pattern}/; it is {}",
                    quote(answer)
                ),
            ),
            Err(error) => fail(
                "regex",
                format!("/{pattern}/ is not a regular expression: {error}"),
            ),
        },
        Assertion::Equals(text) => (answer.trim() != text.trim()).then(|| {
            Failure::new(
                "equals",
                format!("the answer is {}, not {text:?}", quote(answer)),
            )
        }),
        Assertion::JsonSchema(schema) => json_schema(schema, answer),
        Assertion::ToolCalled(wanted) => match matching_calls(wanted, observed) {
            0 => fail(
                "toolCalled",
                format!(
                    "no call of {} {}; calls made: {}",
                    wanted.name,
                    args_text(wanted),
                    calls_text(observed)
                ),
            ),
            _ => None,
        },
        Assertion::ToolNotCalled(wanted) => match matching_calls(wanted, observed) {
            0 => None,
            n => fail(
                "toolNotCalled",
                format!(
                    "{} was called {n} time(s) {}",
                    wanted.name,
                    args_text(wanted)
                ),
            ),
        },
        Assertion::AgentAsked(agent) => (!observed.agents.iter().any(|a| a == agent)).then(|| {
            Failure::new(
                "agentAsked",
                format!(
                    "Agent/{agent} ran no Turn; the agents that did: {}",
                    observed.agents.join(", ")
                ),
            )
        }),
        Assertion::MaxSteps(limit) => (observed.steps > *limit).then(|| {
            Failure::new(
                "maxSteps",
                format!("{} Steps, more than {limit}", observed.steps),
            )
        }),
        Assertion::MaxTokens(limit) => (observed.tokens() > *limit).then(|| {
            Failure::new(
                "maxTokens",
                format!("{} tokens, more than {limit}", observed.tokens()),
            )
        }),
        Assertion::MaxCostUsd(limit) => {
            if observed.unpriced_calls > 0 {
                fail(
                    "maxCostUsd",
                    format!(
                        "{} model call(s) have no price, so the cost is unknown",
                        observed.unpriced_calls
                    ),
                )
            } else if observed.cost_usd > *limit {
                fail(
                    "maxCostUsd",
                    format!("${:.6}, more than ${limit}", observed.cost_usd),
                )
            } else {
                None
            }
        }
        Assertion::MaxLatencyMs(limit) => {
            let millis = evidence.latency.as_millis();
            (millis > u128::from(*limit))
                .then(|| Failure::new("maxLatencyMs", format!("{millis} ms, more than {limit} ms")))
        }
        Assertion::NoErrors(true) => (!observed.errors.is_empty()).then(|| {
            Failure::new(
                "noErrors",
                format!(
                    "{} error(s): {}",
                    observed.errors.len(),
                    observed.errors.join("; ")
                ),
            )
        }),
        Assertion::NoErrors(false) => None,
    }
}

fn json_schema(schema: &JsonValue, answer: &str) -> Option<Failure> {
    let value: JsonValue = match serde_json::from_str(answer.trim()) {
        Ok(value) => value,
        Err(error) => {
            return Some(Failure::new(
                "jsonSchema",
                format!("the answer is not JSON ({error}): {}", quote(answer)),
            ))
        }
    };
    let validator = match jsonschema::validator_for(schema) {
        Ok(validator) => validator,
        Err(error) => {
            return Some(Failure::new(
                "jsonSchema",
                format!("not a valid JSON Schema: {error}"),
            ))
        }
    };
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .map(|error| format!("{} at `{}`", error, error.instance_path()))
        .collect();
    (!problems.is_empty()).then(|| {
        Failure::new(
            "jsonSchema",
            format!("the answer breaks the schema: {}", problems.join("; ")),
        )
    })
}

fn matching_calls(wanted: &ToolCallAssertion, observed: &Observed) -> usize {
    observed
        .tool_calls
        .iter()
        .filter(|call| call.name == wanted.name)
        .filter(|call| match &wanted.args {
            None => true,
            Some(args) => args.iter().all(|(key, value)| {
                call.args
                    .get(key)
                    .is_some_and(|actual| contains_value(actual, value))
            }),
        })
        .count()
}

/// True when `actual` has everything `wanted` has: equal scalars and
/// arrays, and for objects each wanted key, recursively.
fn contains_value(actual: &JsonValue, wanted: &JsonValue) -> bool {
    match (actual, wanted) {
        (JsonValue::Object(actual), JsonValue::Object(wanted)) => wanted
            .iter()
            .all(|(key, value)| actual.get(key).is_some_and(|a| contains_value(a, value))),
        _ => actual == wanted,
    }
}

fn args_text(wanted: &ToolCallAssertion) -> String {
    match &wanted.args {
        Some(args) => format!("with {}", JsonValue::Object(args.clone())),
        None => String::new(),
    }
}

fn calls_text(observed: &Observed) -> String {
    if observed.tool_calls.is_empty() {
        return "none".into();
    }
    observed
        .tool_calls
        .iter()
        .map(|call| format!("{} {} (by {})", call.name, call.args, call.agent))
        .collect::<Vec<_>>()
        .join(", ")
}

fn quote(text: &str) -> String {
    let mut excerpt: String = text.chars().take(QUOTE_CHARS).collect();
    if excerpt.len() < text.len() {
        excerpt.push('…');
    }
    format!("{excerpt:?}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::ObservedToolCall;
    use serde_json::json;

    fn observed() -> Observed {
        Observed {
            steps: 3,
            input_tokens: 100,
            output_tokens: 20,
            cost_usd: 0.002,
            tool_calls: vec![ObservedToolCall {
                agent: "coordinator".into(),
                name: "agents__request".into(),
                args: json!({"target": "researcher", "input": "tides", "meta": {"a": 1, "b": 2}}),
            }],
            agents: vec!["coordinator".into(), "researcher".into()],
            ..Observed::default()
        }
    }

    fn assertion(value: JsonValue) -> Assertion {
        serde_json::from_value(value).unwrap()
    }

    /// Each assertion once holding and once failing, on purpose.
    #[test]
    fn every_assertion_passes_and_fails() {
        let observed = observed();
        let evidence = Evidence {
            answer: "Goondan is a runtime",
            observed: &observed,
            latency: Duration::from_millis(40),
        };
        let cases = [
            (json!({"contains": "runtime"}), json!({"contains": "swarm"})),
            (
                json!({"notContains": "error"}),
                json!({"notContains": "Goondan"}),
            ),
            (json!({"regex": "^[A-Z]"}), json!({"regex": "^[a-z]"})),
            (
                json!({"equals": " Goondan is a runtime "}),
                json!({"equals": "Goondan"}),
            ),
            (
                json!({"toolCalled": {"name": "agents__request", "args": {"target": "researcher", "meta": {"a": 1}}}}),
                json!({"toolCalled": {"name": "agents__request", "args": {"target": "writer"}}}),
            ),
            (
                json!({"toolNotCalled": {"name": "bash__exec"}}),
                json!({"toolNotCalled": {"name": "agents__request"}}),
            ),
            (
                json!({"agentAsked": "researcher"}),
                json!({"agentAsked": "writer"}),
            ),
            (json!({"maxSteps": 3}), json!({"maxSteps": 2})),
            (json!({"maxTokens": 120}), json!({"maxTokens": 119})),
            (json!({"maxCostUsd": 0.01}), json!({"maxCostUsd": 0.001})),
            (json!({"maxLatencyMs": 40}), json!({"maxLatencyMs": 39})),
        ];
        for (good, bad) in cases {
            assert_eq!(check(&assertion(good.clone()), &evidence), None, "{good}");
            assert!(check(&assertion(bad.clone()), &evidence).is_some(), "{bad}");
        }
    }

    #[test]
    fn json_schema_and_no_errors() {
        let mut observed = observed();
        let schema = assertion(
            json!({"jsonSchema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}}),
        );
        let good = Evidence {
            answer: "{\"n\": 3}",
            observed: &observed,
            latency: Duration::ZERO,
        };
        assert_eq!(check(&schema, &good), None);
        let wrong = Evidence {
            answer: "{\"n\": \"x\"}",
            ..good
        };
        assert!(check(&schema, &wrong)
            .unwrap()
            .message
            .contains("breaks the schema"));
        let prose = Evidence {
            answer: "three",
            ..good
        };
        assert!(check(&schema, &prose).unwrap().message.contains("not JSON"));
        assert_eq!(check(&assertion(json!({"noErrors": true})), &good), None);
        observed
            .errors
            .push("coordinator: step.failed: boom".into());
        let failing = Evidence {
            answer: "x",
            observed: &observed,
            latency: Duration::ZERO,
        };
        assert!(check(&assertion(json!({"noErrors": true})), &failing).is_some());
        assert_eq!(
            check(&assertion(json!({"noErrors": false})), &failing),
            None
        );
    }

    #[test]
    fn an_unpriced_call_fails_a_cost_limit() {
        let observed = Observed {
            unpriced_calls: 1,
            ..observed()
        };
        let evidence = Evidence {
            answer: "",
            observed: &observed,
            latency: Duration::ZERO,
        };
        let failure = check(&assertion(json!({"maxCostUsd": 1.0})), &evidence).unwrap();
        assert!(failure.message.contains("no price"), "{failure:?}");
    }
}
