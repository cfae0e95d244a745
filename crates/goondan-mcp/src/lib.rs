//! MCP (Model Context Protocol) both ways, spoken as JSON-RPC 2.0 by hand.
//!
//! * [`McpExtension`] is the `mcp` Extension of `@goondan/base`
//!   (`builtin:mcp`): it connects to the MCP servers an agent's config
//!   names (a stdio command or a streamable HTTP URL), registers each of
//!   their tools as `<server>__<tool>` with `source.type: mcp`, and
//!   forwards calls (see [`extension`]).
//! * [`server`] serves a running swarm as an MCP server, one tool per
//!   agent, over a byte stream (`gdn mcp serve` hands it stdio) or
//!   streamable HTTP (`--http`). It reaches the swarm through the
//!   [`server::SwarmTurns`] trait, which the binary implements over the
//!   orchestrator's control socket, so this crate never depends on the
//!   orchestrator.
//!
//! Why no MCP SDK: the maintained Rust SDK (`rmcp` 3.x) carries the whole
//! protocol (tasks, sampling, elicitation, OAuth, its macro crate and
//! `schemars`) while we use four methods and one notification; the subset
//! here is a few hundred lines over what the workspace already builds
//! (tokio, reqwest, serde_json), adds no dependency, and keeps the wire
//! under our tests.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod client;
pub mod error;
pub mod extension;
pub mod jsonrpc;
pub mod server;

pub use error::McpError;
pub use extension::McpExtension;

/// The MCP protocol revision this crate asks for and answers with first.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// The revisions this crate speaks; the tool subset it uses is the same in
/// each.
pub const SUPPORTED_PROTOCOL_VERSIONS: [&str; 3] = ["2025-06-18", "2025-03-26", "2024-11-05"];
