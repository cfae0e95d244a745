//! The core of the `step` chain: build the model request from the
//! conversation and the catalog as the step layers left it, call the
//! model, record the assistant message (durable before any tool runs),
//! then run each tool call in order through the `toolCall` chain and
//! record its result.
//!
//! Two kinds of call are answered without running the chain, since there
//! is nothing a handler or middleware could do with them: a call past the
//! Step's limit (`E_TOOL_CALL_LIMIT`) and a call whose arguments the
//! provider sent as something other than a JSON object
//! (`E_TOOL_INVALID_ARGS`, quoting the start of the text). Both still get
//! a result and the `tool.called` / `tool.failed` events, so the model
//! reads why and may try again, and the Turn goes on.

use super::{milliseconds, AgentCore};
use crate::error::PipelineError;
use crate::pipeline::context::ToolCallParts;
use crate::pipeline::{Core, LayerResult, StepContext, ToolCallContext};
use crate::tool::{codes, mask_tool_result, ToolFailure, DEFAULT_ERROR_MESSAGE_LIMIT};
use futures_util::future::BoxFuture;
use goondan_model::{InvalidToolArguments, ModelRequest, StreamObserver, ToolSpec};
use goondan_types::{
    ContentPart, JsonObject, JsonValue, Message, MessageEvent, MessageSource, ModelMessage,
    RuntimeEvent, StepResult, StepStatus, TokenUsage, ToolCall, ToolCallResult, ToolCallStatus,
    ToolCatalogItem, ToolName, ToolResultOutput,
};
use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the Turn loop needs to know about a Step beyond its result.
#[derive(Debug, Default)]
pub(super) struct StepOutcome {
    pub(super) usage: Option<TokenUsage>,
    /// The ledger's record of the model call, when it counted one.
    pub(super) recorded: Option<crate::ledger::RecordedCall>,
    pub(super) assistant_message: Option<Arc<Message>>,
}

pub(super) struct StepCore<'a> {
    pub(super) agent: &'a AgentCore,
    pub(super) observer: &'a dyn StreamObserver,
    pub(super) outcome: Mutex<StepOutcome>,
}

/// How a catalog item is offered to the model. A missing schema is an
/// object with no properties, which every provider accepts.
fn tool_spec(item: &ToolCatalogItem) -> ToolSpec {
    ToolSpec {
        name: item.name.clone(),
        description: item.description.clone().unwrap_or_default(),
        parameters: item.parameters.clone().unwrap_or_else(|| {
            let mut schema = JsonObject::new();
            schema.insert("type".into(), JsonValue::String("object".into()));
            schema.insert("properties".into(), JsonValue::Object(JsonObject::new()));
            schema
        }),
    }
}

/// How many characters of unparsable arguments an error result quotes.
const INVALID_ARGUMENTS_QUOTE_CHARS: usize = 200;

/// Why a call is answered without running, if it is: it is past the
/// Step's limit, or its arguments were not a JSON object.
fn refusal_before_chain(
    index: usize,
    max_calls_per_step: usize,
    call: &ToolCall,
    invalid_arguments: Option<&InvalidToolArguments>,
) -> Option<ToolFailure> {
    if index >= max_calls_per_step {
        return Some(
            ToolFailure::new(
                codes::CALL_LIMIT,
                format!(
                    "Tool call {} ({}) was not run: one model answer may make at most {max_calls_per_step} tool calls per step.",
                    index + 1,
                    call.name
                ),
            )
            .with_name("ToolCallLimitError")
            .with_suggestion(format!(
                "Make at most {max_calls_per_step} tool calls at once; ask again for the calls that did not run."
            )),
        );
    }
    let invalid = invalid_arguments?;
    let quote: String = invalid
        .preview
        .chars()
        .take(INVALID_ARGUMENTS_QUOTE_CHARS)
        .collect();
    let cut = if invalid.n_bytes as usize > quote.len() {
        "..."
    } else {
        ""
    };
    Some(
        ToolFailure::new(
            codes::INVALID_ARGS,
            format!(
                "Arguments for '{}' must be a JSON object, but {} ({} bytes): {quote}{cut}",
                call.name, invalid.problem, invalid.n_bytes
            ),
        )
        .with_name("ToolInputError")
        .with_suggestion("Call the tool again with its arguments as one valid JSON object."),
    )
}

/// The catalog name a call stands for: its own, or, when the model calls
/// an export by a spelling from before the export name rule (`tool.md`
/// §6.2; `telegram__setChatAction`) and only its conforming name
/// (`telegram__set-chat-action`) is in the Step's catalog, that name. The
/// `toolCall` chain then sees the catalog name, so a gate or a filter on
/// it cannot be passed by the old spelling.
fn catalog_name<'a>(catalog: &[ToolCatalogItem], called: &'a str) -> Cow<'a, str> {
    let listed = |name: &str| catalog.iter().any(|item| item.name == name);
    if listed(called) {
        return Cow::Borrowed(called);
    }
    let Some(name) = ToolName::parse(called) else {
        return Cow::Borrowed(called);
    };
    let conforming = ToolName::conforming_export(&name.export);
    if conforming == name.export {
        return Cow::Borrowed(called);
    }
    let renamed = ToolName {
        resource: name.resource,
        export: conforming,
    }
    .to_string();
    if listed(&renamed) {
        Cow::Owned(renamed)
    } else {
        Cow::Borrowed(called)
    }
}

/// The tool-result part the model reads back.
fn result_part(result: &ToolCallResult) -> ContentPart {
    let output = match (&result.status, &result.error) {
        (ToolCallStatus::Error, Some(error)) => {
            ToolResultOutput::ErrorJson(serde_json::to_value(error).unwrap_or(JsonValue::Null))
        }
        (ToolCallStatus::Error, None) => ToolResultOutput::ErrorText("tool call failed".into()),
        (ToolCallStatus::Ok, _) => match &result.output {
            Some(JsonValue::String(text)) => ToolResultOutput::Text(text.clone()),
            Some(value) => ToolResultOutput::Json(value.clone()),
            None => ToolResultOutput::Json(JsonValue::Null),
        },
    };
    ContentPart::tool_result(
        result.tool_call_id.clone(),
        result.tool_name.clone(),
        output,
    )
}

impl StepCore<'_> {
    async fn run_step(&self, ctx: &mut StepContext) -> LayerResult<StepContext> {
        let agent = self.agent;
        let request = ModelRequest {
            model: agent.model_name.clone(),
            messages: ctx.conversation_state().to_llm_messages(),
            tools: ctx.tool_catalog.iter().map(tool_spec).collect(),
            params: agent.model_params.clone(),
        };
        agent.admit_model_call(ctx.trace(), ctx.turn_id())?;
        self.observer.on_model_call_start();
        let response = agent.model.generate(request, self.observer).await?;
        // Counted as soon as it returns: the call is paid for even if the
        // Step fails afterwards.
        let recorded = match (&agent.ledger, &response.usage) {
            (Some(ledger), Some(usage)) => Some(ledger.record(&ctx.trace().trace_id, usage)),
            _ => None,
        };
        let tool_calls = response.tool_calls();
        let invalid_arguments: Vec<Option<InvalidToolArguments>> = tool_calls
            .iter()
            .map(|call| response.invalid_arguments(&call.id))
            .collect();
        let assistant = if response.content.is_empty() {
            // An empty answer (typical right after tool results) ends the
            // Turn normally; storing an empty assistant message would only
            // make the next request invalid for some providers.
            None
        } else {
            let message = Message::new(
                ModelMessage::assistant(response.content),
                MessageSource::Assistant {
                    step_id: ctx.step_id().to_string(),
                },
            );
            ctx.emit_message_event(MessageEvent::Append {
                message: message.clone(),
            })?;
            Some(Arc::new(message))
        };
        {
            let mut outcome = self
                .outcome
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            outcome.usage = response.usage;
            outcome.recorded = recorded;
            outcome.assistant_message = assistant.clone();
        }

        let tool_results = match assistant {
            Some(message) => {
                run_tool_calls(agent, ctx, &message, &tool_calls, &invalid_arguments).await?
            }
            None => Vec::new(),
        };
        Ok(StepResult {
            status: StepStatus::Completed,
            should_continue: !tool_calls.is_empty(),
            tool_calls,
            tool_results,
            metadata: JsonObject::new(),
        })
    }
}

/// Runs `tool_calls` (the calls `message` holds, each with its argument
/// problem if the model's JSON was broken) one after another through the
/// `toolCall` chain, appending each result to the conversation as it
/// comes. A Step runs them after its model call; a Turn resumed at a call
/// that waited for a person runs the rest of them here too.
pub(super) async fn run_tool_calls(
    agent: &AgentCore,
    ctx: &StepContext,
    message: &Arc<Message>,
    tool_calls: &[ToolCall],
    invalid_arguments: &[Option<InvalidToolArguments>],
) -> Result<Vec<ToolCallResult>, PipelineError> {
    let mut tool_results = Vec::with_capacity(tool_calls.len());
    let tool_core = agent.executor.core(&ctx.tool_catalog);
    let max_calls_per_step = agent.executor.policy().max_calls_per_step;
    if tool_calls.len() > max_calls_per_step {
        tracing::warn!(
            n_tool_calls = tool_calls.len(),
            max_calls_per_step,
            step_id = ctx.step_id(),
            "the model asked for more tool calls than a step runs; the rest are refused"
        );
    }
    for (index, call) in tool_calls.iter().enumerate() {
        let trace = ctx.trace().child();
        agent.emit(RuntimeEvent::ToolCalled {
            base: agent.event_base(&trace),
            tool_call_id: call.id.clone(),
            tool_name: call.name.clone(),
            step_id: ctx.step_id().to_string(),
            turn_id: ctx.turn_id().to_string(),
            input_summary: Some(input_summary(&call.args, agent.executor.secrets())),
        });
        let started = Instant::now();
        let refusal = refusal_before_chain(
            index,
            max_calls_per_step,
            call,
            invalid_arguments.get(index).and_then(Option::as_ref),
        );
        let result = match refusal {
            Some(tool_failure) => ToolCallResult::error(
                call,
                tool_failure.into_tool_error(DEFAULT_ERROR_MESSAGE_LIMIT),
            ),
            None => {
                let tool_name = catalog_name(&ctx.tool_catalog, &call.name);
                if tool_name != call.name {
                    tracing::info!(
                        called = call.name,
                        tool_name = %tool_name,
                        "a tool called by its old export name runs as its catalog name"
                    );
                }
                let mut call_ctx = ToolCallContext::new(ToolCallParts {
                    info: Arc::clone(ctx.turn_info_handle()),
                    step_index: ctx.step_index(),
                    step_id: ctx.step_id().to_string(),
                    tool_name: tool_name.into_owned(),
                    tool_call_id: call.id.clone(),
                    trace: trace.clone(),
                    message: Arc::clone(message),
                    args: call.args.clone(),
                });
                agent.pipeline.run(&mut call_ctx, &tool_core).await?
            }
        };
        // A `toolCall` middleware may have replaced what the
        // executor masked.
        let mut result = result;
        mask_tool_result(agent.executor.secrets(), &mut result);
        // The answer names the call as the model made it (Gemini matches a
        // function response to its call by name).
        result.tool_name.clone_from(&call.name);
        let refused = result
            .error
            .as_ref()
            .and_then(|error| error.code.as_deref())
            .filter(|code| codes::is_runtime_refusal(code));
        agent.emit(match refused {
            Some(_) => RuntimeEvent::ToolFailed {
                base: agent.event_base(&trace),
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                duration: milliseconds(started),
                step_id: ctx.step_id().to_string(),
                turn_id: ctx.turn_id().to_string(),
                error_message: result
                    .error
                    .as_ref()
                    .map(|error| error.message.clone())
                    .unwrap_or_default(),
            },
            None => RuntimeEvent::ToolCompleted {
                base: agent.event_base(&trace),
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                status: result.status,
                duration: milliseconds(started),
                step_id: ctx.step_id().to_string(),
                turn_id: ctx.turn_id().to_string(),
                error_code: result.error.as_ref().and_then(|error| error.code.clone()),
                error_message: result.error.as_ref().map(|error| error.message.clone()),
            },
        });
        ctx.emit_message_event(MessageEvent::Append {
            message: Message::new(
                ModelMessage::tool(vec![result_part(&result)]),
                MessageSource::Tool {
                    tool_call_id: result.tool_call_id.clone(),
                    tool_name: result.tool_name.clone(),
                },
            ),
        })?;
        tool_results.push(result);
    }
    Ok(tool_results)
}

impl Core<StepContext> for StepCore<'_> {
    fn run<'a>(&'a self, ctx: &'a mut StepContext) -> BoxFuture<'a, LayerResult<StepContext>> {
        Box::pin(self.run_step(ctx))
    }
}

/// The longest [`input_summary`], in characters.
const INPUT_SUMMARY_CHARS: usize = 80;

/// A tool call's arguments in one short line: the first string argument
/// (a bash command, a path, an agent's name), else the arguments as JSON;
/// whitespace folded, cut at [`INPUT_SUMMARY_CHARS`], secrets masked.
fn input_summary(args: &JsonObject, secrets: &goondan_types::Secrets) -> String {
    let first_text = args.values().find_map(|value| value.as_str());
    let text = match first_text {
        Some(text) => text.to_string(),
        None if args.is_empty() => String::new(),
        None => serde_json::Value::Object(args.clone()).to_string(),
    };
    let mut summary = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some((cut, _)) = summary.char_indices().nth(INPUT_SUMMARY_CHARS) {
        summary.truncate(cut);
        summary.push('…');
    }
    secrets.mask_string(&mut summary);
    summary
}

#[cfg(test)]
mod input_summary_tests {
    use super::*;

    fn args(value: serde_json::Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn the_first_text_argument_in_one_short_line_with_secrets_masked() {
        let secrets: goondan_types::Secrets = [("TOKEN", "tok-91c2-secret")].into_iter().collect();
        let summary = input_summary(
            &args(serde_json::json!({"command": "curl -H 'x: tok-91c2-secret'\n  example"})),
            &secrets,
        );
        assert!(!summary.contains("tok-91c2-secret"), "{summary}");
        assert!(summary.starts_with("curl -H 'x: "), "{summary}");
        assert!(!summary.contains('\n'), "{summary}");
        let long = "a ".repeat(200);
        let summary = input_summary(&args(serde_json::json!({"text": long})), &secrets);
        assert_eq!(
            summary.chars().count(),
            INPUT_SUMMARY_CHARS + 1,
            "{summary}"
        );
        assert!(summary.ends_with('…'));
        let summary = input_summary(&args(serde_json::json!({"n": 3})), &secrets);
        assert_eq!(summary, r#"{"n":3}"#);
        assert_eq!(input_summary(&JsonObject::new(), &secrets), "");
    }
}

#[cfg(test)]
mod catalog_name_tests {
    use super::*;

    #[test]
    fn must_answer_an_old_export_spelling_with_its_conforming_catalog_name() {
        let item = |name: &str| ToolCatalogItem {
            name: name.into(),
            description: None,
            parameters: None,
            source: None,
        };
        let catalog = [item("telegram__set-chat-action"), item("bash__exec")];
        assert_eq!(
            catalog_name(&catalog, "telegram__setChatAction"),
            "telegram__set-chat-action"
        );
        assert_eq!(catalog_name(&catalog, "bash__exec"), "bash__exec");
        // Not in the catalog under any spelling: refused later as it is.
        assert_eq!(
            catalog_name(&catalog, "telegram__downloadFile"),
            "telegram__downloadFile"
        );
        assert_eq!(catalog_name(&catalog, "nonsense"), "nonsense");
    }
}
