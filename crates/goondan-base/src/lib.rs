//! The `@goondan/base` package: the built-in tools and extensions compiled
//! into the binary, reached through `builtin:<name>` entries.
//!
//! [`builtins`] is the catalog the runtime resolves those entries in
//! (through `goondan_runtime::EntryResolvers::new`, whose builtin
//! resolver reads it):
//!
//! * tools: `agents`, `bash`, `file-system`, `http-fetch`, `json-query`,
//!   `self-restart`, `slack`, `telegram`, `text-transform`, `wait` (see
//!   [`tools`]);
//! * extensions: `a2a` (over `goondan-a2a`'s client),
//!   `context-message`, `inter-agent-response-format`,
//!   `logging`, `mcp` (implemented in `goondan-mcp`),
//!   `message-compaction`, `message-window`, `required-tools-guard`,
//!   `tool-approval`, `tool-search` (see [`extensions`]), and the
//!   Swarm's `policy.approvals` gate (`swarm-approvals`, which no bundle
//!   can list: the agent process adds it).
//!
//! The resource manifests of the package (names, exports, parameter
//! schemas, default configs) live with the config loader; this crate is
//! their implementation. The `agents` tool is a thin client of the
//! runtime's agents API; the routing behind it is the orchestrator's.
#![warn(missing_docs, unreachable_pub)]
// `deny`, not `forbid`: the bash tool's sandbox (tools/bash/sandbox.rs)
// must run code between fork and exec, which only `unsafe` can express.
// Nothing else in the crate may.
#![deny(unsafe_code)]

mod args;
pub mod error;
pub mod extensions;
pub mod tools;

pub use error::BuiltinToolError;
pub use extensions::Summarizer;
pub use tools::ToolOptions;

use goondan_runtime::MapBuiltinCatalog;
use goondan_types::Secrets;

/// How [`builtins_with`] configures the builtins.
#[derive(Debug, Clone, Default)]
pub struct BuiltinOptions {
    /// The model `message-compaction` summarizes with; without one it
    /// writes plain notes.
    pub summarizer: Option<Summarizer>,
    /// Options of `bash`, `file-system`, `http-fetch`, `telegram` and
    /// `slack`.
    pub tools: ToolOptions,
}

/// Every builtin tool and extension with default options.
pub fn builtins() -> MapBuiltinCatalog {
    builtins_with(BuiltinOptions::default())
}

/// Every builtin tool and extension, with `message-compaction` summarizing
/// through `summarizer` (the agent's own model) and the tools that need
/// the operator's tokens finding them in `secrets`. An agent process
/// builds its catalog this way, since it runs exactly one agent.
pub fn builtins_for_agent(summarizer: Summarizer, secrets: Secrets) -> MapBuiltinCatalog {
    builtins_with(BuiltinOptions {
        summarizer: Some(summarizer),
        tools: ToolOptions {
            secrets,
            ..ToolOptions::default()
        },
    })
}

/// Every builtin tool and extension, configured by `options`.
pub fn builtins_with(options: BuiltinOptions) -> MapBuiltinCatalog {
    let mut catalog = MapBuiltinCatalog::new();
    for name in tools::TOOL_NAMES {
        if let Some(handlers) = tools::handlers(name, &options.tools) {
            catalog = catalog.with_tool(name, handlers);
        }
    }
    for name in extensions::EXTENSION_NAMES {
        if let Some(extension) =
            extensions::extension(name, options.summarizer.clone(), &options.tools.secrets)
        {
            catalog = catalog.with_extension(name, extension);
        }
    }
    // The Swarm's `policy.approvals` gate: resolvable, but no resource of
    // the package, so only the agent process can list it.
    let swarm_gate = goondan_config::approvals::SWARM_GATE_ENTRY;
    if let Some(extension) = extensions::extension(
        swarm_gate,
        options.summarizer.clone(),
        &options.tools.secrets,
    ) {
        catalog = catalog.with_extension(swarm_gate, extension);
    }
    catalog
}
