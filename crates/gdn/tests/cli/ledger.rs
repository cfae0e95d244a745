//! The token and cost ledger and budgets, end to end: the real `gdn`
//! binary runs the two-agent `pair` swarm against the mock LLM, whose
//! answers report a different `usage` per request; `gdn usage`, the
//! runtime events and `metadata.json` must add up to exactly what the mock
//! reported, and a `policy.budget` must refuse the next model call with
//! `E_BUDGET_EXCEEDED` without touching the stored conversation.

use crate::mock_llm::{ChatRequest, Reply};
use crate::swarm::{code, find_instance, read_jsonl, stderr, stdout, Swarm};
use serde_json::{json, Value};
use std::path::Path;

const ALPHA: &str = "agent ALPHA";
pub(crate) const BETA: &str = "agent BETA";
/// `Model.spec.pricing` written into the bundle: $2 and $10 per million.
const INPUT_USD_PER_TOKEN: f64 = 2.0 / 1_000_000.0;
const OUTPUT_USD_PER_TOKEN: f64 = 10.0 / 1_000_000.0;

/// Alpha relays an input starting with `relay` to beta and reports its
/// answer; any other input it answers itself.
pub(crate) fn relay_or_answer(request: &ChatRequest) -> Reply {
    if request.is_from(BETA) {
        return Reply::text(format!("pong({})", request.last_user_text()));
    }
    if let Some(result) = request.tool_result() {
        return Reply::text(format!("alpha heard: {result}"));
    }
    let input = request.last_user_text();
    if input.starts_with("relay") {
        Reply::tool("agents__request", json!({"target": "beta", "input": input}))
    } else {
        Reply::text(format!("alpha says: {input}"))
    }
}

/// Adds `pricing` to the Model and `policy_yaml` (already indented for
/// `spec.policy`) to the Swarm of the bundle.
pub(crate) fn configure(swarm: &Swarm, policy_yaml: &str) {
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let text = text.replacen(
        "    maxRetries: 0\n",
        "    maxRetries: 0\n  pricing:\n    inputUsdPerMillionTokens: 2\n    outputUsdPerMillionTokens: 10\n",
        1,
    );
    let text = text.replacen(
        "    maxStepsPerTurn: 6\n",
        &format!("    maxStepsPerTurn: 6\n{policy_yaml}"),
        1,
    );
    std::fs::write(&path, text).unwrap();
}

/// `(input, output)` tokens the mock reported to requests of `agent`.
fn reported(swarm: &Swarm, marker: &str) -> (u64, u64) {
    swarm
        .mock
        .requests()
        .iter()
        .filter(|request| request.is_from(marker))
        .filter_map(|request| request.reported_usage)
        .fold((0, 0), |(input, output), (i, o)| (input + i, output + o))
}

fn cost(input: u64, output: u64) -> f64 {
    input as f64 * INPUT_USD_PER_TOKEN + output as f64 * OUTPUT_USD_PER_TOKEN
}

fn usage_json(swarm: &Swarm, by: &str) -> Vec<Value> {
    let output = swarm.run(&["usage", "--json", "--by", by]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    serde_json::from_str::<Value>(&stdout(&output))
        .unwrap()
        .as_array()
        .cloned()
        .unwrap()
}

fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

#[test]
fn ledger_sums_equal_the_usage_the_mock_model_reported() {
    let swarm = Swarm::pair(2, relay_or_answer);
    configure(&swarm, "");
    for input in ["relay one", "hello", "relay two"] {
        let output = swarm.run(&["run", "--input", input]);
        assert_eq!(code(&output), 0, "{input}: {}", stderr(&output));
    }
    let alpha = reported(&swarm, ALPHA);
    let beta = reported(&swarm, BETA);
    assert!(
        alpha.0 > 0 && beta.0 > 0 && alpha != beta,
        "{alpha:?} {beta:?}"
    );

    let rows = usage_json(&swarm, "instance");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for (agent, (input, output)) in [("alpha", alpha), ("beta", beta)] {
        let row = rows.iter().find(|row| row["agentName"] == agent).unwrap();
        assert_eq!(row["instanceKey"], "default");
        assert_eq!(row["inputTokens"], input, "{agent}");
        assert_eq!(row["outputTokens"], output, "{agent}");
        let cost_usd = row["costUsd"].as_f64().unwrap();
        assert!(
            (cost_usd - cost(input, output)).abs() < 1e-12,
            "{agent}: {cost_usd}"
        );

        // The instance's lifetime totals in metadata.json agree.
        let dir = find_instance(swarm.state.path(), agent, "default").unwrap();
        let metadata: Value =
            serde_json::from_slice(&std::fs::read(dir.join("metadata.json")).unwrap()).unwrap();
        assert_eq!(metadata["usage"]["inputTokens"], input, "{metadata}");
        assert_eq!(metadata["usage"]["outputTokens"], output);

        // Each turn.completed carries the cost of its own calls.
        let events = read_jsonl(&dir.join("messages/runtime-events.jsonl"));
        let turn_cost: f64 = events
            .iter()
            .filter(|event| event["type"] == "turn.completed")
            .filter_map(|event| event["costUsd"].as_f64())
            .sum();
        assert!(
            (turn_cost - cost(input, output)).abs() < 1e-12,
            "{agent}: {turn_cost}"
        );
        assert!(events
            .iter()
            .filter(|event| event["type"] == "step.completed")
            .all(|event| event["model"] == "mock-gpt"));
    }
    let total = (alpha.0 + beta.0, alpha.1 + beta.1);
    for by in ["swarm", "day", "agent"] {
        let rows = usage_json(&swarm, by);
        let input: u64 = rows
            .iter()
            .map(|row| row["inputTokens"].as_u64().unwrap())
            .sum();
        let output: u64 = rows
            .iter()
            .map(|row| row["outputTokens"].as_u64().unwrap())
            .sum();
        assert_eq!((input, output), total, "--by {by}: {rows:#?}");
    }
    // The table names both instances and the total.
    let table = stdout(&swarm.run(&["usage"]));
    assert!(
        table.contains("alpha:default") && table.contains("TOTAL"),
        "{table}"
    );
}

#[test]
fn a_turn_budget_counts_the_whole_inter_agent_chain_and_refuses_the_next_call() {
    let swarm = Swarm::pair(2, relay_or_answer);
    // Alpha's first call and beta's call each report about 25 tokens, so
    // the chain reaches 40 only with beta's.
    configure(&swarm, "    budget:\n      maxTokensPerTurn: 40\n");
    let output = swarm.run(&["run", "--input", "relay one"]);
    assert_ne!(code(&output), 0, "{}", stdout(&output));
    let error = stderr(&output);
    assert!(error.contains("E_BUDGET_EXCEEDED"), "{error}");
    assert!(error.contains("maxTokensPerTurn"), "{error}");
    // Alpha asked once and beta once; alpha's second call was refused.
    let requests = swarm.mock.requests();
    assert_eq!(requests.iter().filter(|r| r.is_from(ALPHA)).count(), 1);
    assert_eq!(requests.iter().filter(|r| r.is_from(BETA)).count(), 1);
    let dir = find_instance(swarm.state.path(), "alpha", "default").unwrap();
    let events = read_jsonl(&dir.join("messages/runtime-events.jsonl"));
    let refusal = events
        .iter()
        .find(|event| event["type"] == "budget.exceeded")
        .expect("a budget.exceeded event");
    assert_eq!(refusal["limit"], "maxTokensPerTurn");
    assert_eq!(refusal["limitValue"], 40.0);

    // A new root Turn is a new count: a direct answer goes through.
    let output = swarm.run(&["run", "--input", "hello"]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert_eq!(stdout(&output), "alpha says: hello\n");
}

#[test]
fn an_instance_budget_refuses_before_anything_is_stored_and_a_reset_lets_the_next_call_through() {
    let swarm = Swarm::pair(2, relay_or_answer);
    configure(&swarm, "    budget:\n      maxTokensPerInstance: 20\n");
    let first = swarm.run(&["run", "--input", "hello"]);
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let dir = find_instance(swarm.state.path(), "alpha", "default").unwrap();
    let base = dir.join("messages/base.jsonl");
    let events = dir.join("messages/events.jsonl");
    let (base_before, events_before) = (file_bytes(&base), file_bytes(&events));
    let n_requests = swarm.mock.requests().len();

    let refused = swarm.run(&["run", "--input", "hello again"]);
    assert_ne!(code(&refused), 0);
    let error = stderr(&refused);
    assert!(
        error.contains("E_BUDGET_EXCEEDED") && error.contains("maxTokensPerInstance"),
        "{error}"
    );
    assert_eq!(
        swarm.mock.requests().len(),
        n_requests,
        "nothing reached the model"
    );
    assert_eq!(
        file_bytes(&base),
        base_before,
        "the conversation is untouched"
    );
    assert_eq!(file_bytes(&events), events_before);

    // Reset by raising the limit: the next call goes through.
    configure_limit(
        &swarm,
        "maxTokensPerInstance: 20",
        "maxTokensPerInstance: 100000",
    );
    let raised = swarm.run(&["run", "--input", "hello after raising"]);
    assert_eq!(code(&raised), 0, "{}", stderr(&raised));

    // Reset by deleting the instance: its usage goes with it.
    configure_limit(
        &swarm,
        "maxTokensPerInstance: 100000",
        "maxTokensPerInstance: 20",
    );
    assert_ne!(code(&swarm.run(&["run", "--input", "over again"])), 0);
    let deleted = swarm.run(&["instance", "delete", "alpha:default", "--force"]);
    assert_eq!(code(&deleted), 0, "{}", stderr(&deleted));
    let fresh = swarm.run(&["run", "--input", "hello fresh"]);
    assert_eq!(code(&fresh), 0, "{}", stderr(&fresh));
    assert_eq!(stdout(&fresh), "alpha says: hello fresh\n");
}

fn configure_limit(swarm: &Swarm, from: &str, to: &str) {
    let path = swarm.bundle.path().join("goondan.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{text}");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn a_day_budget_is_shared_by_every_agent_of_the_swarm() {
    let swarm = Swarm::pair(2, relay_or_answer);
    // One relayed Turn (two alpha calls, one beta call) costs a few
    // hundred micro-dollars; the limit is reached inside it.
    configure(&swarm, "    budget:\n      maxCostUsdPerDay: 0.0001\n");
    let output = swarm.run(&["run", "--input", "relay one"]);
    assert_ne!(code(&output), 0);
    assert!(
        stderr(&output).contains("maxCostUsdPerDay"),
        "{}",
        stderr(&output)
    );
    // Beta's spending counted against alpha: after alpha's and beta's
    // first calls, alpha's second one was refused.
    let day_files: Vec<_> = crate::files_under(swarm.state.path())
        .into_iter()
        .filter(|path| path.parent().is_some_and(|dir| dir.ends_with("usage/days")))
        .collect();
    assert_eq!(day_files.len(), 1, "{day_files:?}");
    let day: Value = serde_json::from_slice(&std::fs::read(&day_files[0]).unwrap()).unwrap();
    assert_eq!(day["modelCalls"], 2, "{day}");
    // Another input the same day is refused before it reaches the model.
    let n_requests = swarm.mock.requests().len();
    assert_ne!(code(&swarm.run(&["run", "--input", "hello"])), 0);
    assert_eq!(swarm.mock.requests().len(), n_requests);
}
