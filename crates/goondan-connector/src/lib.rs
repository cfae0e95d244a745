//! Goondan's built-in connectors: how the world's requests become
//! [`ConnectorEvent`]s.
//!
//! A connector never talks to an agent. It checks what arrives, turns it
//! into a `ConnectorEvent` and hands it to an [`Emitter`]; the process
//! that runs the connector implements `Emitter` by sending the event to
//! the orchestrator, whose ingress routes it by the Connection's rules. So
//! this crate knows nothing of processes, queues or agents, and every
//! platform here is tested against a real HTTP listener with an emitter
//! that records.
//!
//! A connector is one of two kinds ([`host::Connector`]). Every platform
//! that receives HTTP shares one front ([`http`]): it binds loopback
//! unless told otherwise, bounds bodies, body time and concurrent
//! requests, and asks the platform to check the request's signature before
//! the body is parsed. The platforms ([`webhook`], [`github`], [`slack`],
//! [`discord`], and [`telegram`] in webhook mode) each own their signature
//! scheme (all in [`verify`]) and the mapping of their payloads to events,
//! with the original base package's event names and properties. The other
//! kind is a [`source::Source`]: a task that makes events by itself until
//! shutdown, the [`cron`] clock and [`telegram`] long polling. Which kind a
//! Connection's connector is, as a placement question (pushed to, or
//! making its own events), is [`delivery::is_pushed_to`].
//!
//! A Connection of the Telegram or Slack connector with `spec.approvals`
//! also posts the swarm's approval requests to a chat as messages with
//! buttons ([`approvals`]). A button press ([`press::Press`]) is read by
//! the platform's own verified path and handed to [`Emitter::press`],
//! never emitted as an event for an agent.
//!
//! The Telegram Bot API and Slack Web API clients ([`chat_api`]) are the
//! workspace's only ones: the long poll and the approval desk call
//! through them here, and so do `@goondan/base`'s `telegram` and `slack`
//! tools.
//!
//! Modules name each other only downwards (a tidy test checks it): the
//! platforms and the desk name [`press`], [`chat_api`], [`source`] and
//! [`http`], never the other way round.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod approvals;
pub mod chat_api;
pub mod config;
pub mod cron;
pub mod delivery;
pub mod discord;
pub mod github;
pub mod host;
pub mod http;
pub mod link;
pub mod payload;
pub mod press;
pub mod script;
pub mod slack;
pub mod source;
pub mod telegram;
pub mod verify;
pub mod webhook;

pub use config::{ConnectorConfig, ConnectorConfigError};
pub use http::{HttpFront, Platform, PlatformOutcome, PlatformReply, PlatformRequest};
pub use source::{Shutdown, Source};
pub use verify::SignatureError;

use futures_util::future::BoxFuture;
use goondan_types::ConnectorEvent;

/// Where a connector's events, and the presses of approval buttons in
/// its chat, go.
///
/// The future resolves once the event is accepted (queued for its
/// instance), so an HTTP platform can answer its sender truthfully: 200
/// when accepted, 429 when the instance's queue is full.
pub trait Emitter: Send + Sync + 'static {
    /// Hands one event to the swarm.
    fn emit(&self, event: ConnectorEvent) -> BoxFuture<'_, Result<Accepted, EmitError>>;

    /// Hands a press of an approval button to the Connection's approval
    /// desk, which decides and answers it on its own time; resolves once
    /// the desk took it.
    fn press(&self, press: press::Press) -> BoxFuture<'_, Result<(), EmitError>>;
}

/// An event the swarm took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Accepted {
    /// Where the Connection's rules sent it (`agent:instanceKey`); `None`
    /// when no rule matched, so it was counted and dropped.
    pub target: Option<String>,
}

/// Why an event was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmitError {
    /// The target's queue is full; the sender should retry later.
    #[error("E_QUEUE_FULL: {0}")]
    QueueFull(String),
    /// The swarm is shutting down or gone, or could not store the event
    /// for now (a cluster inbox that did not confirm it); the sender
    /// should retry.
    #[error("the swarm is not accepting events: {0}")]
    Closed(String),
    /// The swarm refused this event (no such agent, for example).
    #[error("the swarm refused the event: {0}")]
    Refused(String),
}
