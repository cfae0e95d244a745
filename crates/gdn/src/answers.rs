//! How `gdn run` prints what came of an input: the answer's text (or one
//! JSON line with `--json`), or why there is none ([`Refused`]), whether
//! the Turn ran in this process, behind a control socket or on a
//! cluster host.

use crate::exit::Outcome;
use goondan_ipc::protocol::{Answer, AnswerOutcome};
use goondan_types::{AgentEvent, ErrorBody};
use std::io::Write;

/// Why an input got no answer: the orchestrator's error (here, over the
/// control socket or from a cluster host), or the failed Turn's.
pub(crate) type Refused = ErrorBody;

/// Prints why an input got no answer; the outcome to exit with.
pub(crate) fn print_refusal(refused: &Refused) -> Outcome {
    crate::render::error(
        &refused.code,
        &refused.message,
        refused.suggestion.as_deref(),
    );
    Outcome::of_failure(&refused.code)
}

/// Prints what came of one input: the answer text (or one JSON line with
/// `json`), or the error on stderr (in the JSON line with `json`).
/// `sent_key` is the instance key the input asked for, when it named one.
pub(crate) fn report(
    reply: Result<AgentEvent, Refused>,
    sent_key: Option<&str>,
    json: bool,
) -> Outcome {
    let text = reply.as_ref().map_err(Refused::clone).and_then(answer_text);
    if !json {
        return match text {
            Ok(text) => print_text(&text, ""),
            Err(refused) => print_refusal(&refused),
        };
    }
    let answer = reply.as_ref().ok();
    let mut line = serde_json::json!({
        "instanceKey": answer.and_then(|answer| answer.instance_key.as_deref()).or(sent_key),
        "traceId": answer.and_then(|answer| answer.trace_id.as_deref()),
    });
    let outcome = match text {
        Ok(text) => {
            line["text"] = text.into();
            Outcome::Success
        }
        Err(refused) => {
            line["error"] = serde_json::json!({
                "code": refused.code,
                "message": refused.message,
                "suggestion": refused.suggestion,
            });
            Outcome::of_failure(&refused.code)
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    outcome
}

/// The text of an answer, or why the Turn failed.
pub(crate) fn answer_text(answer: &AgentEvent) -> Result<String, Refused> {
    match Answer::from_event(answer).map(|answer| answer.outcome) {
        Some(AnswerOutcome::Failed(failure)) => Err(Refused {
            code: failure.code,
            message: failure.message,
            suggestion: failure.suggestion,
        }),
        Some(AnswerOutcome::Ok { text, .. }) => Ok(text.unwrap_or_default()),
        None => Ok(answer.input.clone().unwrap_or_default()),
    }
}

/// Prints an answer, completing text already streamed to the terminal.
pub(crate) fn print_answer(answer: &AgentEvent, streamed: &str) -> Outcome {
    match answer_text(answer) {
        Ok(text) => print_text(&text, streamed),
        Err(refused) => print_refusal(&refused),
    }
}

fn print_text(text: &str, streamed: &str) -> Outcome {
    let mut out = std::io::stdout().lock();
    let _ = if streamed.is_empty() {
        writeln!(out, "{text}")
    } else if streamed.trim_end().ends_with(text.trim_end()) {
        writeln!(out)
    } else {
        // The stream showed earlier steps too; the answer is the last one.
        writeln!(out, "\n{text}")
    };
    let _ = out.flush();
    Outcome::Success
}

/// What a cluster host replied: its answer, or why there is none.
pub(crate) fn from_cluster_reply(
    reply: goondan_cluster::reply::ClusterReply,
) -> Result<AgentEvent, Refused> {
    {
        match (reply.answer, reply.error) {
            (Some(answer), _) => Ok(*answer),
            (None, error) => Err(error.unwrap_or_else(|| {
                ErrorBody::new(
                    "E_CLUSTER_CORRUPT",
                    "the cluster's reply holds neither an answer nor an error",
                )
            })),
        }
    }
}
