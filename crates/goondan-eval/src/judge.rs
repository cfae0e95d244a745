//! The judge: a Model of the bundle (any provider) scores a case's
//! answers against its rubric and expected behavior, 0 to 10, with a
//! deduction and a reason per criterion missed, as the original's eval
//! judge does.
//!
//! The judge is told to answer with one JSON object and nothing else
//! ([`JUDGE_INSTRUCTIONS`], printed in docs/eval.md), and its answer is
//! parsed strictly ([`parse_verdict`]): one object with exactly `score`
//! and `deductions`, each deduction exactly `criterion`,
//! `pointsDeducted` and `reason`, the score within 0 to 10. Anything else
//! (prose, a refusal, a missing field, a score of 11) is an error for
//! that case, never a pass. The only latitude is a single Markdown code
//! fence around the object, which models add on their own.

use crate::plan::CaseJob;
use crate::EvalError;
use goondan_config::Bundle;
use goondan_model::{ApiKey, EnvLookup, ModelConfig, ModelParams, ModelRequest, NoStream};
use goondan_types::{JsonObject, JsonValue, ModelMessage};
use serde::{Deserialize, Serialize};

/// The judge's system prompt.
pub const JUDGE_INSTRUCTIONS: &str = "You are the judge of an evaluation of an AI agent. \
You get the conversation the agent had, the behavior expected of it and a list of criteria. \
Score the agent's answers from 0 to 10: start from 10 and, for each criterion the answers miss \
in part or in full, deduct points and say why. \
Answer with exactly one JSON object and nothing else, in this shape: \
{\"score\": <number from 0 to 10>, \"deductions\": [{\"criterion\": \"<the criterion>\", \
\"pointsDeducted\": <number>, \"reason\": \"<why>\"}]}. \
When every criterion is met, `deductions` is an empty list.";

/// The most of a bad judge answer an error quotes.
const QUOTE_CHARS: usize = 200;

/// Points taken off for one criterion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Deduction {
    /// The criterion missed.
    pub criterion: String,
    /// How many points it cost.
    pub points_deducted: f64,
    /// Why.
    pub reason: String,
}

/// The judge's score of one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verdict {
    /// 0 to 10.
    pub score: f64,
    /// What cost points.
    pub deductions: Vec<Deduction>,
}

/// The messages the judge gets for a case: its instructions, then the
/// conversation (each user message with the agent's answer), the expected
/// behavior and the numbered criteria.
pub fn judge_messages(job: &CaseJob, exchange: &[(String, String)]) -> Vec<ModelMessage> {
    let mut user = String::from("## Conversation\n");
    for (question, answer) in exchange {
        user.push_str(&format!("\nUser: {question}\n\nAgent: {answer}\n"));
    }
    if let Some(expected) = &job.case.expected {
        user.push_str(&format!("\n## Expected behavior\n\n{expected}\n"));
    }
    user.push_str("\n## Criteria\n\n");
    for (index, criterion) in job.case.rubric.iter().enumerate() {
        user.push_str(&format!("{}. {criterion}\n", index + 1));
    }
    vec![
        ModelMessage::system(JUDGE_INSTRUCTIONS),
        ModelMessage::user(user),
    ]
}

/// Parses the judge's answer strictly (see the module docs).
pub fn parse_verdict(text: &str) -> Result<Verdict, EvalError> {
    let bad = |problem: String| EvalError::JudgeAnswer {
        problem,
        answer: quote(text),
    };
    let body = unfence(text.trim());
    if !body.starts_with('{') {
        return Err(bad("it is not a JSON object".into()));
    }
    let verdict: Verdict = serde_json::from_str(body).map_err(|error| bad(error.to_string()))?;
    if !(verdict.score.is_finite() && (0.0..=10.0).contains(&verdict.score)) {
        return Err(bad(format!(
            "score {} is not between 0 and 10",
            verdict.score
        )));
    }
    if let Some(deduction) = verdict.deductions.iter().find(|deduction| {
        !(deduction.points_deducted.is_finite() && deduction.points_deducted >= 0.0)
    }) {
        return Err(bad(format!(
            "deduction for {:?} takes {} points",
            deduction.criterion, deduction.points_deducted
        )));
    }
    Ok(verdict)
}

/// The text inside one Markdown code fence (```` ```json ````), or the
/// text itself.
fn unfence(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    let Some(inner) = rest.strip_suffix("```") else {
        return text;
    };
    let inner = inner.strip_prefix("json").unwrap_or(inner);
    inner.trim()
}

fn quote(text: &str) -> String {
    let mut excerpt: String = text.chars().take(QUOTE_CHARS).collect();
    if excerpt.len() < text.len() {
        excerpt.push('…');
    }
    format!("{excerpt:?}")
}

/// Asks the judge Model `job.judge` of `bundle` to score `exchange`,
/// recording to or replaying from the job's judge cassette.
pub async fn judge(
    bundle: &Bundle,
    job: &CaseJob,
    exchange: &[(String, String)],
) -> Result<Verdict, EvalError> {
    let name = job.judge.clone().unwrap_or_default();
    let call_error = |message: String| EvalError::JudgeCall {
        model: name.clone(),
        message,
    };
    let resource = bundle
        .model(&name)
        .ok_or_else(|| call_error("not defined in the bundle".into()))?;
    let spec = &resource.spec;
    let mut config = ModelConfig::new(&name, &spec.provider, &spec.model, bundle.root());
    config.endpoint = spec.endpoint.clone();
    config.options = spec.options.clone();
    match &job.replay {
        Some(cassettes) => {
            let mut options = JsonObject::new();
            options.insert(
                "cassette".into(),
                JsonValue::String(cassettes.judge.display().to_string()),
            );
            config.provider = "replay".into();
            config.options = options;
        }
        None => {
            if let (Some(source), true) =
                (&spec.api_key, goondan_model::needs_api_key(&spec.provider))
            {
                let key = bundle
                    .resolve(source)
                    .map_err(|error| call_error(error.to_string()))?;
                config.api_key = Some(ApiKey::new(key));
            }
        }
    }
    config.record_to = job.record.as_ref().map(|cassettes| cassettes.judge.clone());
    let model = goondan_model::build(&config, &BundleEnv(bundle))
        .map_err(|error| call_error(error.to_string()))?;
    let request = ModelRequest {
        model: spec.model.clone(),
        messages: judge_messages(job, exchange),
        tools: Vec::new(),
        params: ModelParams {
            temperature: Some(0.0),
            ..ModelParams::default()
        },
    };
    let response = model
        .generate(request, &NoStream)
        .await
        .map_err(|error| call_error(error.to_string()))?;
    parse_verdict(&response.text())
}

/// The bundle's environment, for a provider's usual key variable.
struct BundleEnv<'a>(&'a Bundle);

impl EnvLookup for BundleEnv<'_> {
    fn get(&self, name: &str) -> Option<String> {
        self.0.env().get(name).map(str::to_string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_parses_bare_or_in_one_fence() {
        let text = r#"{"score": 8, "deductions": [{"criterion": "mentions tools", "pointsDeducted": 2, "reason": "it does not"}]}"#;
        let verdict = parse_verdict(text).unwrap();
        assert_eq!(verdict.score, 8.0);
        assert_eq!(verdict.deductions[0].points_deducted, 2.0);
        let fenced = format!("```json\n{text}\n```");
        assert_eq!(parse_verdict(&fenced).unwrap(), verdict);
        assert_eq!(
            parse_verdict("{\"score\": 10, \"deductions\": []}")
                .unwrap()
                .score,
            10.0
        );
    }

    #[test]
    fn anything_else_is_an_error_never_a_pass() {
        for bad in [
            "I'm sorry, I can't help with that.",
            "Score: 9/10",
            "Here it is: {\"score\": 9, \"deductions\": []}",
            "{\"score\": 11, \"deductions\": []}",
            "{\"score\": -1, \"deductions\": []}",
            "{\"score\": \"9\", \"deductions\": []}",
            "{\"score\": 9}",
            "{\"score\": 9, \"deductions\": [], \"note\": \"extra\"}",
            "{\"score\": 9, \"deductions\": [{\"criterion\": \"a\", \"pointsDeducted\": -1, \"reason\": \"r\"}]}",
            "{\"score\": 9, \"deductions\": [{\"criterion\": \"a\", \"reason\": \"r\"}]}",
            "",
        ] {
            let error = parse_verdict(bad).unwrap_err();
            assert_eq!(error.code(), "E_EVAL_JUDGE_ANSWER", "{bad}");
        }
    }
}
