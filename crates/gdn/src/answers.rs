//! How `gdn run` prints what came of an input: the answer's text (or one
//! JSON line with `--json`), or why there is none ([`Refused`]), whether
//! the Turn ran in this process, behind a control socket or on a
//! cluster host.

use crate::exit::Outcome;
use goondan_ipc::protocol::{Answer, AnswerOutcome};
use goondan_orchestrator::OrchestratorError;
use goondan_types::AgentEvent;
use std::io::Write;

/// Why an input got no answer: the orchestrator's error (here or over
/// the control socket), or the failed Turn's.
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) suggestion: Option<String>,
}

impl Refused {
    pub(crate) fn print(&self) -> Outcome {
        crate::render::error(&self.code, &self.message, self.suggestion.as_deref());
        Outcome::of_failure(&self.code)
    }
}

impl From<OrchestratorError> for Refused {
    fn from(error: OrchestratorError) -> Refused {
        Refused {
            code: error.code().to_string(),
            message: error.to_string(),
            suggestion: error.suggestion(),
        }
    }
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
            Err(refused) => refused.print(),
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
            suggestion: None,
        }),
        Some(AnswerOutcome::Ok { text, .. }) => Ok(text.unwrap_or_default()),
        None => Ok(answer.input.clone().unwrap_or_default()),
    }
}

/// Prints an answer, completing text already streamed to the terminal.
pub(crate) fn print_answer(answer: &AgentEvent, streamed: &str) -> Outcome {
    match answer_text(answer) {
        Ok(text) => print_text(&text, streamed),
        Err(refused) => refused.print(),
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
            (None, error) => {
                let error = error.unwrap_or_else(|| goondan_cluster::reply::ReplyError {
                    code: "E_CLUSTER_CORRUPT".into(),
                    message: "the cluster's reply holds neither an answer nor an error".into(),
                    suggestion: None,
                });
                Err(Refused {
                    code: error.code,
                    message: error.message,
                    suggestion: error.suggestion,
                })
            }
        }
    }
}
