//! The `@goondan/base` package: the built-in tools and extensions compiled
//! into the binary, reached through `builtin:<name>` entries.
//!
//! [`builtins`] is the catalog the runtime resolves those entries in:
//!
//! * tools: `bash`, `file-system`, `http-fetch`, `json-query`,
//!   `text-transform`, `wait` (see [`tools`]);
//! * extensions: `context-message`, `inter-agent-response-format`,
//!   `logging`, `message-compaction`, `message-window`,
//!   `required-tools-guard`, `tool-search` (see [`extensions`]).
//!
//! The resource manifests of the package (names, exports, parameter
//! schemas, default configs) live with the config loader; this crate is
//! their implementation. The `agents` tool is the runtime's, not ours.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod args;
pub mod error;
pub mod extensions;
pub mod tools;

pub use error::BuiltinToolError;
pub use extensions::Summarizer;

use goondan_runtime::MapBuiltinCatalog;

/// Every builtin tool and extension, with `message-compaction` writing
/// plain notes instead of model summaries.
pub fn builtins() -> MapBuiltinCatalog {
    catalog(None)
}

/// Every builtin tool and extension, with `message-compaction` summarizing
/// through `summarizer` (the agent's own model). An agent process builds
/// its catalog this way, since it runs exactly one agent.
pub fn builtins_with_model(summarizer: Summarizer) -> MapBuiltinCatalog {
    catalog(Some(summarizer))
}

fn catalog(summarizer: Option<Summarizer>) -> MapBuiltinCatalog {
    let mut catalog = MapBuiltinCatalog::new();
    for name in tools::TOOL_NAMES {
        if let Some(handlers) = tools::handlers(name) {
            catalog = catalog.with_tool(name, handlers);
        }
    }
    for name in extensions::EXTENSION_NAMES {
        if let Some(extension) = extensions::extension(name, summarizer.clone()) {
            catalog = catalog.with_extension(name, extension);
        }
    }
    catalog
}
