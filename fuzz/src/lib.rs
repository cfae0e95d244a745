//! Fuzz targets over every parser that reads input Goondan does not
//! control: bundle YAML, IPC lines, plugin and MCP JSON-RPC, control
//! socket requests, connector requests and their signatures, package
//! tarballs and scripted rules files.
//!
//! Each target is a plain `fn(&[u8])` that calls the real entry point and
//! panics only when that code misbehaves (a panic, a broken round trip).
//! Two things drive them: the libFuzzer engine in `libfuzzer/` (nightly,
//! for searching) and `tests/replay.rs` (stable, run by `cargo test`),
//! which feeds every file of `corpus/<target>/` to its target so a fixed
//! crash stays fixed. What this crate does not own: the parsers
//! themselves; a target never copies their code.

#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

mod config;
mod connector;
mod control;
mod ipc;
mod mcp;
mod package;
mod plugin;
mod scripted;

pub use config::config_bundle;
pub use connector::connector_request;
pub use control::control_request;
pub use ipc::ipc_line;
pub use mcp::mcp_jsonrpc;
pub use package::package_tarball;
pub use plugin::plugin_rpc;
pub use scripted::scripted_rules;

/// One fuzz target: its name (the folder of its corpus and the libFuzzer
/// binary) and the function that takes one input.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// The target's name, as in `corpus/<name>/`.
    pub name: &'static str,
    /// Runs one input through the code under test.
    pub run: fn(&[u8]),
}

/// Every target, in the order the README lists them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "config_bundle",
        run: config_bundle,
    },
    Target {
        name: "ipc_line",
        run: ipc_line,
    },
    Target {
        name: "plugin_rpc",
        run: plugin_rpc,
    },
    Target {
        name: "control_request",
        run: control_request,
    },
    Target {
        name: "connector_request",
        run: connector_request,
    },
    Target {
        name: "mcp_jsonrpc",
        run: mcp_jsonrpc,
    },
    Target {
        name: "package_tarball",
        run: package_tarball,
    },
    Target {
        name: "scripted_rules",
        run: scripted_rules,
    },
];

/// Runs `future` to its end on a current-thread runtime: the async entry
/// points under test do no IO of their own, so one small runtime per
/// call is enough and keeps each input independent of the last.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a current-thread runtime without IO or timers always builds")
        .block_on(future)
}
