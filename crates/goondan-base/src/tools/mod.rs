//! The built-in tools of `@goondan/base`, one module per Tool resource,
//! and their handlers in the shape the runtime's builtin catalog expects.
//!
//! Each tool's logic takes the workdir and the raw arguments and returns a
//! [`BuiltinToolError`] on failure; this module adapts that to
//! [`ToolHandler`], turning every error into a coded [`ToolFailure`].

pub mod agents;
pub mod bash;
pub mod bot_api;
mod capped_text;
pub mod file_system;
pub mod http_fetch;
pub mod json_query;
pub mod self_restart;
pub mod slack;
pub mod telegram;
pub mod text_transform;
pub mod wait;
mod workdir;

use crate::error::BuiltinToolError;
use futures_util::future::BoxFuture;
use goondan_runtime::extension::ToolHandlers;
use goondan_runtime::tool::ToolOutcome;
use goondan_runtime::{ToolContext, ToolFailure, ToolHandler};
use goondan_types::{JsonObject, JsonValue};
use std::sync::Arc;

/// The builtin names of the tools this crate provides (`builtin:<name>`).
pub const TOOL_NAMES: [&str; 10] = [
    "agents",
    "bash",
    "file-system",
    "http-fetch",
    "json-query",
    "self-restart",
    "slack",
    "telegram",
    "text-transform",
    "wait",
];

type ExportFn<T> = for<'a> fn(
    &'a T,
    &'a ToolContext,
    JsonObject,
) -> BoxFuture<'a, Result<JsonValue, BuiltinToolError>>;

/// One export of a tool whose state (config, connection pool) is shared by
/// all its exports.
struct Export<T> {
    tool: Arc<T>,
    run: ExportFn<T>,
}

impl<T: Send + Sync> ToolHandler for Export<T> {
    fn call<'a>(&'a self, ctx: &'a ToolContext, args: JsonObject) -> BoxFuture<'a, ToolOutcome> {
        let running = (self.run)(&self.tool, ctx, args);
        Box::pin(async move { running.await.map_err(ToolFailure::from) })
    }
}

fn handlers_of<T: Send + Sync + 'static>(tool: T, exports: &[(&str, ExportFn<T>)]) -> ToolHandlers {
    let tool = Arc::new(tool);
    exports
        .iter()
        .map(|(name, run)| {
            let handler: Arc<dyn ToolHandler> = Arc::new(Export {
                tool: Arc::clone(&tool),
                run: *run,
            });
            (name.to_string(), handler)
        })
        .collect()
}

/// Runs a synchronous export that needs neither state nor context.
macro_rules! stateless {
    ($function:path) => {{
        fn run<'a>(
            _tool: &'a (),
            _ctx: &'a ToolContext,
            args: JsonObject,
        ) -> BoxFuture<'a, Result<JsonValue, BuiltinToolError>> {
            Box::pin(async move { $function(&args) })
        }
        run as ExportFn<()>
    }};
}

/// Runs an async export of a stateful tool in the call's workdir.
macro_rules! in_workdir {
    ($tool:ty, $method:ident) => {{
        fn run<'a>(
            tool: &'a $tool,
            ctx: &'a ToolContext,
            args: JsonObject,
        ) -> BoxFuture<'a, Result<JsonValue, BuiltinToolError>> {
            Box::pin(async move { tool.$method(&ctx.workdir, &args).await })
        }
        run as ExportFn<$tool>
    }};
}

/// Runs an async export of a stateful tool that needs only its arguments.
macro_rules! args_only {
    ($tool:ty, $method:ident) => {{
        fn run<'a>(
            tool: &'a $tool,
            _ctx: &'a ToolContext,
            args: JsonObject,
        ) -> BoxFuture<'a, Result<JsonValue, BuiltinToolError>> {
            Box::pin(async move { tool.$method(&args).await })
        }
        run as ExportFn<$tool>
    }};
}

/// Options of the configurable tools. The runtime hands Tools no config
/// of their own, so whoever builds the catalog decides these.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolOptions {
    /// `bash`.
    pub bash: bash::BashConfig,
    /// `file-system`.
    pub file_system: file_system::FileSystemConfig,
    /// `http-fetch`.
    pub http_fetch: http_fetch::HttpFetchConfig,
    /// `telegram`: the operator's API address and token (unset fields
    /// come from `secrets`, else the environment).
    pub telegram: bot_api::BotApiConfig,
    /// `slack`: likewise.
    pub slack: bot_api::BotApiConfig,
    /// The operator's secrets (an agent's come in its spawn handshake,
    /// never in its environment): where `telegram` and `slack` find their
    /// tokens.
    pub secrets: goondan_types::Secrets,
}

/// The handlers of builtin tool `name`, by export name.
pub fn handlers(name: &str, options: &ToolOptions) -> Option<ToolHandlers> {
    use bash::BashTool;
    use file_system::FileSystemTool;
    use http_fetch::HttpFetchTool;
    Some(match name {
        "bash" => handlers_of(
            BashTool::new(options.bash.clone()),
            &[
                ("exec", in_workdir!(BashTool, exec)),
                ("script", in_workdir!(BashTool, script)),
            ],
        ),
        "file-system" => handlers_of(
            FileSystemTool::new(options.file_system.clone()),
            &[
                ("read", in_workdir!(FileSystemTool, read)),
                ("write", in_workdir!(FileSystemTool, write)),
                ("list", in_workdir!(FileSystemTool, list)),
                ("mkdir", in_workdir!(FileSystemTool, mkdir)),
            ],
        ),
        "http-fetch" => {
            fn get<'a>(
                tool: &'a HttpFetchTool,
                _ctx: &'a ToolContext,
                args: JsonObject,
            ) -> BoxFuture<'a, Result<JsonValue, BuiltinToolError>> {
                Box::pin(async move { tool.get(&args).await })
            }
            fn post<'a>(
                tool: &'a HttpFetchTool,
                _ctx: &'a ToolContext,
                args: JsonObject,
            ) -> BoxFuture<'a, Result<JsonValue, BuiltinToolError>> {
                Box::pin(async move { tool.post(&args).await })
            }
            handlers_of(
                HttpFetchTool::new(options.http_fetch.clone()),
                &[("get", get as ExportFn<HttpFetchTool>), ("post", post)],
            )
        }
        "json-query" => handlers_of(
            (),
            &[
                ("query", stateless!(json_query::query)),
                ("pick", stateless!(json_query::pick)),
                ("count", stateless!(json_query::count)),
                ("flatten", stateless!(json_query::flatten)),
            ],
        ),
        "text-transform" => handlers_of(
            (),
            &[
                ("replace", stateless!(text_transform::replace)),
                ("slice", stateless!(text_transform::slice)),
                ("split", stateless!(text_transform::split)),
                ("join", stateless!(text_transform::join)),
                ("trim", stateless!(text_transform::trim)),
                ("case", stateless!(text_transform::case)),
            ],
        ),
        "wait" => {
            fn seconds<'a>(
                _tool: &'a (),
                _ctx: &'a ToolContext,
                args: JsonObject,
            ) -> BoxFuture<'a, Result<JsonValue, BuiltinToolError>> {
                Box::pin(async move { wait::seconds(&args).await })
            }
            handlers_of((), &[("seconds", seconds as ExportFn<()>)])
        }
        "telegram" => {
            use telegram::TelegramTool;
            handlers_of(
                TelegramTool::new(options.telegram.clone(), &options.secrets),
                &[
                    ("send", args_only!(TelegramTool, send)),
                    ("edit", args_only!(TelegramTool, edit)),
                    ("delete", args_only!(TelegramTool, remove)),
                    ("react", args_only!(TelegramTool, react)),
                    ("set-chat-action", args_only!(TelegramTool, set_chat_action)),
                    ("download-file", in_workdir!(TelegramTool, download_file)),
                ],
            )
        }
        "slack" => {
            use slack::SlackTool;
            handlers_of(
                SlackTool::new(options.slack.clone(), &options.secrets),
                &[
                    ("send", args_only!(SlackTool, send)),
                    ("read", args_only!(SlackTool, read)),
                    ("edit", args_only!(SlackTool, edit)),
                    ("delete", args_only!(SlackTool, remove)),
                    ("react", args_only!(SlackTool, react)),
                    ("download-file", in_workdir!(SlackTool, download_file)),
                ],
            )
        }
        "agents" => agents::handlers(),
        "self-restart" => self_restart::handlers(),
        _ => return None,
    })
}
