//! Plugin hosts and their protocol: users' own Tools and Extensions
//! written in TypeScript, JavaScript, Python or as any executable, run out
//! of process and crash-isolated, behind the runtime's
//! [`goondan_runtime::EntryResolver`] seam.
//!
//! Where to start:
//!
//! * [`protocol`]: JSON-RPC 2.0 over the plugin's stdin/stdout, both
//!   directions; `docs/plugin-protocol.md` documents every method.
//! * [`launch`]: which program runs a file (node, bun, python3, the file
//!   itself), its allow-listed environment, and the embedded shims.
//! * [`host`]: one [`PluginHost`] per entry file: the process, the reader
//!   task, per-call timeouts, and restart with backoff after a crash.
//! * [`tool`] and [`extension`]: what the runtime gets back: tool handlers
//!   that send `tool.invoke`, and an extension whose middlewares cross
//!   into the plugin and back for `next`.
//! * [`resolver`]: [`PluginResolver`], the [`goondan_runtime::EntryResolver`]
//!   for `Entry::Script`.
//! * [`connector`]: a script Connector's run, for the ConnectorProcess.
//!
//! Invariant: a plugin's failure (exit, hang, garbage on stdout) is a
//! coded error result of the call that was running (`E_PLUGIN_CRASHED`,
//! `E_PLUGIN_TIMEOUT`, `E_PLUGIN_PROTOCOL`); it never panics and never
//! stops the agent, and the next call starts a fresh process.
//!
//! Invariant: a plugin process inherits nothing from the agent but an
//! allow-list of variables, so provider keys never reach user code, and
//! it dies with its agent.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod agents;
mod ask;
pub mod connector;
pub mod error;
pub mod extension;
pub mod host;
pub mod launch;
pub mod protocol;
pub mod resolver;
pub mod tool;

pub use error::PluginError;
pub use host::{HostOptions, PluginHost};
pub use launch::{Launch, LaunchOptions};
pub use resolver::{PluginConfig, PluginResolver};
