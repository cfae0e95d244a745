//! The Agent2Agent protocol, version [`PROTOCOL_VERSION`], as Goondan
//! speaks it in both directions: `gdn serve` offers every agent of a
//! Swarm as an A2A agent (`goondan-serve`), and the `a2a` extension of
//! `@goondan/base` calls remote A2A agents as tools.
//!
//! This crate holds what both sides share: the JSON form of the
//! protocol's messages in its JSON-RPC binding ([`types`]: the ProtoJSON
//! mapping of the specification's `a2a.proto`, camelCase fields and
//! `TASK_STATE_*` / `ROLE_*` enum names) and the JSON-RPC envelope with
//! the protocol's error codes ([`jsonrpc`]), and the client the `a2a`
//! extension calls remote agents with ([`client`], failing with
//! [`A2aError`]).
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod client;
pub mod error;
pub mod jsonrpc;
pub mod types;

pub use client::{Answer, EndpointGuard, RemoteAgent, RemoteConfig, SendArgs, Url};
pub use error::A2aError;

/// The A2A specification version spoken, sent and checked as the
/// `A2A-Version` header and named in every Agent Card's interfaces.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The header a client names the protocol version it speaks in.
pub const VERSION_HEADER: &str = "A2A-Version";

/// Where an agent publishes its Agent Card, below its base URL.
pub const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";

/// The transport binding name of JSON-RPC over HTTP in an Agent Card.
pub const JSONRPC_BINDING: &str = "JSONRPC";
