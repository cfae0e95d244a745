//! The core of the `toolCall` chain: the catalog check, argument
//! validation, running the handler, and turning every failure (including a
//! panic) into a `ToolCallResult` with `status: "error"`.
//!
//! The check runs inside the chain, after the `toolCall` layers, so the
//! arguments validated are exactly the ones the handler would receive and
//! middleware still observes refused calls.
//!
//! Every result leaves the core with the agent's secrets masked
//! ([`mask_tool_result`]): a tool's output is the one way outside text
//! (a process environment, a file, an HTTP body) reaches the model, the
//! conversation log and the cassette.

use super::{codes, ToolContext, ToolFailure, ToolRegistry};
use crate::agents::AgentsApi;
use crate::pipeline::{Core, LayerResult, ToolCallContext};
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use goondan_types::{
    JsonObject, JsonValue, Secrets, ToolCallResult, ToolCallStatus, ToolCatalogItem,
};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// `errorMessageLimit` when a Tool does not set one.
pub const DEFAULT_ERROR_MESSAGE_LIMIT: usize = 1000;

const TRUNCATION_SUFFIX: &str = "... (truncated)";

/// What is wrong with `args` against a compiled parameters schema, one
/// line per problem (with its JSON path); empty when they match.
fn schema_problems(validator: &jsonschema::Validator, args: &JsonObject) -> Vec<String> {
    let args = JsonValue::Object(args.clone());
    validator
        .iter_errors(&args)
        .map(|error| {
            let path = error.instance_path().to_string();
            if path.is_empty() {
                error.to_string()
            } else {
                format!("{path}: {error}")
            }
        })
        .collect()
}

/// What is wrong with `args` against the parameters `schema` of a tool,
/// as the executor would find it before the call runs: for checking
/// arguments before a call is made (a person's edit of a gated call's
/// arguments). `Err` when the schema itself does not compile.
pub fn argument_problems(schema: &JsonObject, args: &JsonObject) -> Result<Vec<String>, String> {
    let validator = jsonschema::validator_for(&JsonValue::Object(schema.clone()))
        .map_err(|error| error.to_string())?;
    Ok(schema_problems(&validator, args))
}

/// What is wrong with `arguments` a person gave a gated call of `tool`
/// (`resource__export`) by agent `agent`, against the parameters the
/// bundle at `bundle` declares for that export: what `gdn approve --args`
/// and the Studio's decide action check before an approval runs the call
/// with them. `None` when nothing is wrong or nothing can be said here: the
/// bundle does not load, the agent or the tool is not in it (a tool an
/// extension or an MCP server adds is checked only when the call runs), or
/// the schema does not compile.
pub fn gated_argument_problems(
    bundle: &std::path::Path,
    agent: &str,
    tool: &str,
    arguments: &JsonObject,
) -> Option<Vec<String>> {
    let (resource, export) = tool.split_once(goondan_types::tool::TOOL_NAME_SEPARATOR)?;
    let loaded = goondan_config::load_bundle(bundle, &Default::default())
        .ok()?
        .bundle?;
    let agent = loaded.agent(agent)?;
    let tool = agent.tools().find(|tool| tool.metadata.name == resource)?;
    let export = tool.spec.exports.iter().find(|item| item.name == export)?;
    let problems = argument_problems(&export.parameters, arguments).ok()?;
    (!problems.is_empty()).then_some(problems)
}

/// Cuts an error message to `limit` characters (Unicode scalar values).
///
/// A message of at most `limit` characters is returned unchanged. A longer
/// one keeps its first `limit - 15` characters and ends in
/// `... (truncated)`, so the whole result is exactly `limit` characters
/// (seed 002 §10.4). A limit shorter than the suffix leaves the suffix
/// alone, which still tells the model that a message existed.
pub fn truncate_error_message(message: &str, limit: usize) -> String {
    if message.chars().nth(limit).is_none() {
        return message.to_string();
    }
    let kept = limit.saturating_sub(TRUNCATION_SUFFIX.chars().count());
    let cut = message
        .char_indices()
        .nth(kept)
        .map_or(message.len(), |(index, _)| index);
    let mut text = String::with_capacity(cut + TRUNCATION_SUFFIX.len());
    text.push_str(&message[..cut]);
    text.push_str(TRUNCATION_SUFFIX);
    text
}

/// How many tool calls of one model answer run when the policy does not
/// say otherwise. Calls run one after another, so an answer asking for
/// hundreds would hold the Turn for as long as all of them take; the ones
/// past the limit are answered with an `E_TOOL_CALL_LIMIT` result instead.
pub const DEFAULT_MAX_TOOL_CALLS_PER_STEP: usize = 32;

/// Which calls may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolCallPolicy {
    /// Lets the model call any registered tool, even one step middleware
    /// removed from the catalog. Off by default; turn it on only as an
    /// explicit security decision (seed 002 §2.3).
    pub allow_registry_direct: bool,
    /// The most tool calls of one Step that run; every call past it still
    /// gets a result (providers require one per call), an
    /// `E_TOOL_CALL_LIMIT` error naming the limit.
    pub max_calls_per_step: usize,
}

impl Default for ToolCallPolicy {
    fn default() -> Self {
        ToolCallPolicy {
            allow_registry_direct: false,
            max_calls_per_step: DEFAULT_MAX_TOOL_CALLS_PER_STEP,
        }
    }
}

struct CachedValidator {
    schema: JsonObject,
    validator: Arc<jsonschema::Validator>,
}

/// Runs tool calls for one agent.
pub struct ToolExecutor {
    registry: ToolRegistry,
    policy: ToolCallPolicy,
    workdir: PathBuf,
    agents: Arc<dyn AgentsApi>,
    validators: Mutex<HashMap<String, CachedValidator>>,
    secrets: Secrets,
}

impl std::fmt::Debug for ToolExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolExecutor")
            .field("registry", &self.registry)
            .field("policy", &self.policy)
            .field("workdir", &self.workdir)
            .finish_non_exhaustive()
    }
}

impl ToolExecutor {
    /// An executor over `registry`.
    pub fn new(
        registry: ToolRegistry,
        policy: ToolCallPolicy,
        workdir: PathBuf,
        agents: Arc<dyn AgentsApi>,
    ) -> Self {
        ToolExecutor {
            registry,
            policy,
            workdir,
            agents,
            validators: Mutex::new(HashMap::new()),
            secrets: Secrets::new(),
        }
    }

    /// Masks these secrets in every result before it leaves the executor
    /// (see [`mask_tool_result`]).
    pub fn with_secrets(mut self, secrets: Secrets) -> Self {
        self.secrets = secrets;
        self
    }

    /// The secrets masked in results.
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// The registry it runs from.
    pub fn registry(&self) -> &ToolRegistry {
        &self.registry
    }

    /// Which calls may run.
    pub fn policy(&self) -> ToolCallPolicy {
        self.policy
    }

    /// The core of the `toolCall` chain for a Step whose model saw
    /// `catalog`.
    pub fn core<'a>(&'a self, catalog: &'a [ToolCatalogItem]) -> ToolCallCore<'a> {
        ToolCallCore {
            executor: self,
            catalog,
        }
    }

    /// A validator for `item`, compiled once and reused while the item's
    /// schema stays the same.
    fn validator(
        &self,
        name: &str,
        schema: &JsonObject,
    ) -> Result<Arc<jsonschema::Validator>, String> {
        let mut cache = self
            .validators
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(cached) = cache.get(name) {
            if &cached.schema == schema {
                return Ok(Arc::clone(&cached.validator));
            }
        }
        let validator = jsonschema::validator_for(&JsonValue::Object(schema.clone()))
            .map_err(|error| error.to_string())?;
        let validator = Arc::new(validator);
        cache.insert(
            name.to_string(),
            CachedValidator {
                schema: schema.clone(),
                validator: Arc::clone(&validator),
            },
        );
        Ok(validator)
    }

    async fn execute(&self, catalog: &[ToolCatalogItem], ctx: &ToolCallContext) -> ToolCallResult {
        let mut result = self.execute_unmasked(catalog, ctx).await;
        mask_tool_result(&self.secrets, &mut result);
        result
    }

    async fn execute_unmasked(
        &self,
        catalog: &[ToolCatalogItem],
        ctx: &ToolCallContext,
    ) -> ToolCallResult {
        let name = ctx.tool_name();
        let in_catalog = catalog.iter().find(|item| item.name == name);
        if in_catalog.is_none() && !self.policy.allow_registry_direct {
            return refusal(
                ctx,
                ToolFailure::new(
                    codes::NOT_IN_CATALOG,
                    format!("Tool '{name}' is not available in the current Tool Catalog."),
                )
                .with_name("ToolNotInCatalogError")
                .with_suggestion(
                    "Add the tool to the agent's spec.tools or register it from a step middleware.",
                ),
            );
        }
        let Some(registered) = self.registry.get(name) else {
            return refusal(
                ctx,
                ToolFailure::new(
                    codes::HANDLER_MISSING,
                    format!(
                        "Tool '{name}' is in the catalog, but no handler is registered for it."
                    ),
                )
                .with_name("ToolHandlerMissingError")
                .with_suggestion(
                    "Register a handler with api.tools.register for every catalog item you add.",
                ),
            );
        };
        let limit = registered.error_message_limit;
        let schema = in_catalog
            .and_then(|item| item.parameters.as_ref())
            .or(registered.item.parameters.as_ref());
        if let Some(schema) = schema {
            let validator = match self.validator(name, schema) {
                Ok(validator) => validator,
                Err(message) => {
                    return failure(
                        ctx,
                        ToolFailure::new(
                            codes::INVALID_SCHEMA,
                            format!("The parameters schema of '{name}' is not a valid JSON Schema: {message}"),
                        )
                        .with_name("ToolSchemaError"),
                        limit,
                    )
                }
            };
            let problems = schema_problems(&validator, &ctx.args);
            if !problems.is_empty() {
                return failure(
                    ctx,
                    ToolFailure::new(
                        codes::INVALID_ARGS,
                        format!(
                            "Arguments for '{name}' do not match its schema: {}",
                            problems.join("; ")
                        ),
                    )
                    .with_name("ToolInputError")
                    .with_suggestion(
                        "Call the tool again with arguments that match its parameters schema.",
                    ),
                    limit,
                );
            }
        }
        let tool_ctx = ToolContext {
            agent_name: ctx.agent_name().to_string(),
            instance_key: ctx.instance_key().to_string(),
            turn_id: ctx.turn_id().to_string(),
            trace: ctx.trace().clone(),
            tool_call_id: ctx.tool_call_id().to_string(),
            message: Arc::clone(ctx.message()),
            workdir: self.workdir.clone(),
            logger: tracing::info_span!(
                "tool",
                agent = ctx.agent_name(),
                instance_key = ctx.instance_key(),
                turn_id = ctx.turn_id(),
                tool_name = name,
                tool_call_id = ctx.tool_call_id(),
            ),
            runtime: Arc::clone(&self.agents),
            asks: crate::AskScope::new(
                Arc::clone(&ctx.turn().operators),
                ctx.turn_id(),
                &ctx.turn().input_event.id,
                ctx.tool_call_id(),
            ),
            progress: crate::tool::ToolProgress::for_call(
                ctx.turn_handle(),
                ctx.trace(),
                ctx.tool_call_id(),
                name,
                ctx.step_id(),
            ),
        };
        let handler = Arc::clone(&registered.handler);
        let outcome = AssertUnwindSafe(async { handler.call(&tool_ctx, ctx.args.clone()).await })
            .catch_unwind()
            .await;
        if let Err(error) = tool_ctx.asks.settle_asked() {
            // The result is recorded next either way; an unsettled question
            // only means a crash before that runs the call once more.
            tracing::warn!(tool = name, code = error.code(), %error, "the call's questions stay open");
        }
        match outcome {
            Ok(Ok(output)) => ToolCallResult {
                tool_call_id: ctx.tool_call_id().to_string(),
                tool_name: name.to_string(),
                output: Some(output),
                status: ToolCallStatus::Ok,
                error: None,
            },
            Ok(Err(mut tool_failure)) => {
                // Before the message is cut, so no cut-off piece of a
                // secret survives.
                self.secrets.mask_string(&mut tool_failure.message);
                failure(ctx, tool_failure, limit)
            }
            Err(panic) => {
                let detail = panic
                    .downcast_ref::<&str>()
                    .map(|text| (*text).to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a non-text panic payload".to_string());
                // Masked before the log line and before the cut.
                let detail = self.secrets.mask(&detail).into_owned();
                tracing::error!(
                    tool_name = name,
                    tool_call_id = ctx.tool_call_id(),
                    detail,
                    "tool handler panicked"
                );
                failure(
                    ctx,
                    ToolFailure::new(codes::PANICKED, format!("Tool '{name}' panicked: {detail}"))
                        .with_name("ToolPanic"),
                    limit,
                )
            }
        }
    }
}

/// Replaces every secret value in `result` (its output, text or JSON, and
/// its error's message, suggestion and URL) with `[REDACTED:NAME]`
/// ([`Secrets::mask`]). The executor applies it to what a handler
/// returned, and the Step again to what the `toolCall` chain returned, so
/// neither a tool nor a middleware can put a secret into the conversation.
pub fn mask_tool_result(secrets: &Secrets, result: &mut ToolCallResult) {
    if secrets.is_empty() {
        return;
    }
    if let Some(output) = &mut result.output {
        secrets.mask_json(output);
    }
    if let Some(error) = &mut result.error {
        secrets.mask_string(&mut error.message);
        for text in [&mut error.suggestion, &mut error.help_url, &mut error.name]
            .into_iter()
            .flatten()
        {
            secrets.mask_string(text);
        }
    }
}

fn refusal(ctx: &ToolCallContext, tool_failure: ToolFailure) -> ToolCallResult {
    failure(ctx, tool_failure, DEFAULT_ERROR_MESSAGE_LIMIT)
}

fn failure(ctx: &ToolCallContext, tool_failure: ToolFailure, limit: usize) -> ToolCallResult {
    ToolCallResult {
        tool_call_id: ctx.tool_call_id().to_string(),
        tool_name: ctx.tool_name().to_string(),
        output: None,
        status: ToolCallStatus::Error,
        error: Some(tool_failure.into_tool_error(limit)),
    }
}

/// The innermost layer of one Step's `toolCall` chains.
pub struct ToolCallCore<'a> {
    executor: &'a ToolExecutor,
    catalog: &'a [ToolCatalogItem],
}

impl Core<ToolCallContext> for ToolCallCore<'_> {
    fn run<'a>(
        &'a self,
        ctx: &'a mut ToolCallContext,
    ) -> BoxFuture<'a, LayerResult<ToolCallContext>> {
        Box::pin(async move { Ok(self.executor.execute(self.catalog, ctx).await) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_messages_up_to_the_limit_and_cuts_one_past() {
        let at_limit = "x".repeat(1000);
        assert_eq!(truncate_error_message(&at_limit, 1000), at_limit);
        let one_past = "x".repeat(1001);
        let cut = truncate_error_message(&one_past, 1000);
        assert_eq!(cut, format!("{}... (truncated)", "x".repeat(985)));
        assert_eq!(cut.chars().count(), 1000);
        assert_eq!(truncate_error_message("", 0), "");
        assert_eq!(truncate_error_message("a", 0), "... (truncated)");
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        let korean = "가".repeat(20);
        assert_eq!(truncate_error_message(&korean, 20), korean);
        assert_eq!(
            truncate_error_message(&korean, 19),
            format!("{}... (truncated)", "가".repeat(4))
        );
    }
}
