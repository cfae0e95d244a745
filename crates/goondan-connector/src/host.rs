//! The ConnectorProcess: one Connection's connector, run as a child of the
//! orchestrator (`gdn connector`, hidden), speaking the IPC protocol on
//! stdin and stdout.
//!
//! It reads the spawn handshake (the secrets the Connection's ValueSources
//! need), loads the bundle, resolves the Connection's `config` and
//! `secrets` and builds the connector its `entry` names, which is one of
//! two kinds ([`Connector`]): an HTTP [`Platform`] behind the shared front,
//! whose port is bound now, or a [`Source`] task (cron, Telegram long
//! polling, a script connector run by a plugin host). Only then does it
//! say `runtime.ready`, so a port already
//! taken or a missing secret is a `runtime.start_error` with a code. Its
//! exit status says whether trying again can help: a refusal by the
//! bundle (a missing secret, a bad config value, an entry this build
//! cannot run) exits with `EXIT_REFUSED_BY_CONFIG` and stays down until
//! the bundle changes; a port still taken exits with `EXIT_START_FAILED`
//! and the orchestrator's crash backoff applies. Each event is sent as a
//! `runtime.query` [`Query::Ingest`] and its answer decides what the
//! sender is told (or, for a source, whether to wait and try again). A
//! Connection with `approvals` also gets its approval desk
//! ([`crate::approvals`]), built before `runtime.ready` too (a missing bot
//! token refuses the start), told of every approval the orchestrator
//! passes on, and handed the presses the platform reads. A
//! `shutdown` stops the listener or the source, lets work in progress
//! finish and is acknowledged; the end of stdin (the orchestrator gone)
//! stops it too. A source that ends on its own is a crash: exit code 1.

use crate::approvals::{ApprovalDesk, ChatApprovals, ChatClient, DeskHandle, Press};
use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::http::{self, HttpFront, Platform};
use crate::link::{LinkError, OrchestratorLink};
use crate::source::{Shutdown, Source};
use crate::telegram::TelegramConnector;
use crate::{
    cron, discord, github, script, slack, telegram, webhook, Accepted, EmitError, Emitter,
};
use futures_util::future::BoxFuture;
use goondan_config::spec::ApprovalPlatform;
use goondan_config::{Bundle, ConnectionView, LoadOptions};
use goondan_ipc::handshake::child_channel;
use goondan_ipc::protocol::{self, Query, QueryAnswer, Ready, StartError, PROTOCOL_VERSION};
use goondan_ipc::{Inbound, IpcChannel, RoutingKey, RuntimeMessage, WireCode, ORCHESTRATOR};
use goondan_store::{ApprovalMessages, StateRoot, SyncPolicy};
use goondan_types::{ConnectorEvent, Entry, IpcMessage, Secrets};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long an event may wait for the orchestrator to queue it.
const INGEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What `gdn connector` was started with.
#[derive(Debug, Clone)]
pub struct ConnectorProcessArgs {
    /// The bundle folder.
    pub bundle_dir: PathBuf,
    /// The Connection to run.
    pub connection: String,
    /// An extra env file (`--env-file`).
    pub env_file: Option<PathBuf>,
    /// How a TypeScript connector is stripped on a Node without type
    /// stripping (`goondan_plugin::launch::LaunchOptions::strip_types_command`).
    pub strip_types_command: Option<Vec<String>>,
    /// The System Root: where installed packages are unpacked (for a
    /// Connection whose connector comes from a package) and where a chat
    /// connector remembers the approval requests it posted. `None` when
    /// it cannot be resolved: such a Connection then refuses to start.
    pub state_root: Option<StateRoot>,
}

/// Why the connector did not start, and whether starting it again could
/// help before the bundle changes.
struct Refusal {
    /// What is sent as `runtime.start_error`.
    error: StartError,
    /// True when the bundle as it stands refuses it (its Connection's
    /// config or secrets, its entry, the bundle itself): the process exits
    /// with [`protocol::EXIT_REFUSED_BY_CONFIG`] and the orchestrator keeps
    /// it down until a reload or a restart. False for what may pass by
    /// itself (a port still taken, a handshake that failed).
    lasting: bool,
}

impl From<StartError> for Refusal {
    /// Most refusals come from the bundle, so that is the default.
    fn from(error: StartError) -> Refusal {
        Refusal {
            error,
            lasting: true,
        }
    }
}

impl Refusal {
    /// A refusal that may pass by itself, retried with the crash backoff.
    fn passing(error: StartError) -> Refusal {
        Refusal {
            error,
            lasting: false,
        }
    }
}

/// Why the connector cannot start (sent as `runtime.start_error`), with
/// its fix.
fn refusal(code: &str, message: impl Into<String>, suggestion: impl Into<String>) -> StartError {
    StartError::new(code, message).with_suggestion(suggestion)
}

/// What a built-in entry builds: the one seam between the host and the
/// connectors.
pub enum Connector {
    /// A platform that answers posts behind the shared HTTP front.
    Http(Arc<dyn Platform>, HttpFront),
    /// A task that emits events by itself until shutdown.
    Source(Box<dyn Source>),
}

impl Connector {
    fn http<P: Platform>((platform, front): (P, HttpFront)) -> Connector {
        Connector::Http(Arc::new(platform), front)
    }

    fn source<S: Source>(source: S) -> Connector {
        Connector::Source(Box::new(source))
    }

    /// The connector's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Connector::Http(platform, _) => platform.name(),
            Connector::Source(source) => source.name(),
        }
    }
}

/// A connector ready to run, with its approval desk when its Connection
/// has `approvals`.
struct Started {
    run: Run,
    desk: Option<(ApprovalDesk, DeskHandle)>,
}

/// How a started connector runs: an HTTP platform with its bound
/// listener, or a source.
enum Run {
    Http {
        platform: Arc<dyn Platform>,
        front: HttpFront,
        listener: tokio::net::TcpListener,
    },
    Source(Box<dyn Source>),
}

/// Runs the ConnectorProcess to its exit code: 0 after a shutdown or the
/// orchestrator's end, 1 when a source ended by itself,
/// [`protocol::EXIT_START_FAILED`] when it could not start for a reason
/// that may pass, [`protocol::EXIT_REFUSED_BY_CONFIG`] when the bundle
/// refused it.
pub async fn run_connector_process(args: ConnectorProcessArgs) -> i32 {
    let me = RoutingKey::connection(args.connection.clone());
    let (
        handshake,
        IpcChannel {
            sender,
            receiver,
            writer,
        },
    ) = child_channel(&me).await;
    let link = OrchestratorLink::new(me.to_string(), sender.clone());
    let started = match handshake {
        Ok(handshake) => start(&args, handshake.secrets, &link).await,
        Err(error) => Err(Refusal::passing(refusal(
            error.code(),
            error.to_string(),
            error.suggestion(),
        ))),
    };
    let code = match started {
        Err(Refusal { error, lasting }) => {
            // Logged at debug: the orchestrator reports the refusal it is
            // sent, once, with its fix; this process's line would say it
            // twice in the same log.
            tracing::debug!(code = %error.code, connection = %args.connection, lasting, "connector failed to start: {}", error.message);
            let message = RuntimeMessage::StartError(error);
            let _ = sender
                .send(message.to_message(&me.to_string(), ORCHESTRATOR))
                .await;
            // The writer finishes only once every sender is gone (the
            // link holds one too): holding one would keep a refused
            // connector alive forever, never restarted and never stopped
            // by a graceful shutdown.
            drop(link);
            drop(sender);
            if lasting {
                protocol::EXIT_REFUSED_BY_CONFIG
            } else {
                protocol::EXIT_START_FAILED
            }
        }
        Ok(started) => serve(&me, started, link, sender, receiver).await,
    };
    if let Some(writer) = writer {
        let _ = writer.await;
    }
    code
}

/// Loads the Connection and builds its connector, bound and ready, and
/// its approval desk.
async fn start(
    args: &ConnectorProcessArgs,
    secrets: Secrets,
    link: &OrchestratorLink,
) -> Result<Started, Refusal> {
    let options = LoadOptions {
        env_file: args.env_file.clone(),
        process_env_overlay: secrets,
        packages_root: args.state_root.as_ref().map(StateRoot::packages_dir),
        // The orchestrator checked the scripts' syntax before spawning
        // this process; the parser stays out of it.
        check_script_syntax: false,
        ..LoadOptions::default()
    };
    let outcome = goondan_config::load_bundle(&args.bundle_dir, &options).map_err(|error| {
        refusal(
            error.code().as_str(),
            error.to_string(),
            "run `gdn validate` on the bundle",
        )
    })?;
    let Some(bundle) = outcome.bundle else {
        let first = outcome.diagnostics.iter().find(|d| d.is_error());
        return Err(refusal(
            first.map_or("E_CONFIG", |d| d.code.as_str()),
            first.map_or_else(
                || "the bundle did not load".to_string(),
                ToString::to_string,
            ),
            "run `gdn validate` on the bundle",
        )
        .into());
    };
    let connection = bundle
        .connections()
        .find(|connection| connection.name() == args.connection)
        .ok_or_else(|| {
            refusal(
                "E_CONFIG_REF_NOT_FOUND",
                format!("Connection/{} is not in the bundle", args.connection),
                "the bundle changed since the swarm started; restart it",
            )
        })?;
    let (entry, config) = connection_config(&bundle, connection)?;
    let desk = approval_desk(args, connection, &config, link)?;
    let run = run_for(args, &bundle, entry, config).await?;
    Ok(Started { run, desk })
}

/// The approval desk of a Connection with `approvals`: its chat client,
/// and what it posted before (under the System Root).
fn approval_desk(
    args: &ConnectorProcessArgs,
    connection: ConnectionView<'_>,
    config: &ConnectorConfig,
    link: &OrchestratorLink,
) -> Result<Option<(ApprovalDesk, DeskHandle)>, Refusal> {
    let Some(approvals) = &connection.resource().spec.approvals else {
        return Ok(None);
    };
    let name = &args.connection;
    let entry = &connection.connector().spec.entry;
    let platform = ApprovalPlatform::of_entry(entry).ok_or_else(|| {
        let code = goondan_config::Code::ApprovalsUnsupported;
        refusal(
            code.as_str(),
            format!("Connection/{name}: `{entry}` cannot post approval requests to a chat"),
            code.default_suggestion(),
        )
    })?;
    let chat = approvals.target().unwrap_or_default();
    let client = ChatClient::from_config(platform, config).map_err(|error| {
        refusal(
            error.code(),
            format!("Connection/{name}: {error}"),
            "fix the Connection's config or secrets in goondan.yaml",
        )
    })?;
    let state_root = args.state_root.as_ref().ok_or_else(|| {
        let error = goondan_store::StoreError::NoStateRoot;
        refusal(
            error.code(),
            format!("Connection/{name}: {error}, where the approval requests it posts are kept"),
            error.suggestion().unwrap_or_default(),
        )
    })?;
    let dir = state_root
        .workspace(connection.swarm().instance_key())
        .connection_dir(name);
    // A folder that cannot be opened now may be openable later.
    let messages = ApprovalMessages::open(&dir, SyncPolicy::default()).map_err(|error| {
        Refusal::passing(refusal(
            error.code(),
            error.to_string(),
            error.suggestion().unwrap_or_default(),
        ))
    })?;
    let settings = ChatApprovals {
        platform,
        chat,
        deciders: approvals.decider_ids(),
    };
    tracing::info!(connection = %name, platform = platform.name(), chat = %settings.chat, deciders = settings.deciders.len(), "approval requests are posted to the chat");
    Ok(Some(ApprovalDesk::new(
        settings,
        client,
        messages,
        link.clone(),
    )))
}

/// The connector the Connection's entry names, bound and ready.
async fn run_for(
    args: &ConnectorProcessArgs,
    bundle: &Bundle,
    entry: Entry,
    config: ConnectorConfig,
) -> Result<Run, Refusal> {
    let entry = match entry {
        Entry::Native { name } => name,
        Entry::Script { path, runtime } => {
            let source = script::ScriptSource::plan(
                bundle.root(),
                &path,
                runtime,
                config,
                args.strip_types_command.clone(),
            )
            .map_err(|error| {
                refusal(
                    error.code(),
                    format!("Connection/{}: {error}", args.connection),
                    error.suggestion().unwrap_or_default(),
                )
            })?;
            tracing::info!(connection = %args.connection, entry = %path, "script connector started");
            return Ok(Run::Source(Box::new(source)));
        }
    };
    let (platform, front) = match connector_for(&entry, &config) {
        Ok(Some(Connector::Http(platform, front))) => (platform, front),
        Ok(Some(Connector::Source(source))) => {
            tracing::info!(connection = %args.connection, connector = source.name(), "connector started");
            return Ok(Run::Source(source));
        }
        Ok(None) => return Err(unsupported(&args.connection, &entry).into()),
        Err(error) => {
            return Err(refusal(
                error.code(),
                format!(
                    "Connection/{}: {}: {}",
                    args.connection, error.key, error.problem
                ),
                error.help,
            )
            .into())
        }
    };
    // The port may be free on the next try.
    let listener = front.bind().await.map_err(|error| {
        Refusal::passing(refusal(
            "E_CONNECTOR_BIND",
            format!(
                "Connection/{}: cannot listen on {}: {error}",
                args.connection, front.addr
            ),
            "choose a free PORT in the Connection's config, or stop what holds this one",
        ))
    })?;
    tracing::info!(connection = %args.connection, connector = platform.name(), addr = %listener.local_addr().map_or(front.addr, |a| a), path = %front.path, "connector listening");
    Ok(Run::Http {
        platform,
        front,
        listener,
    })
}

/// The connector's entry and its resolved config and secrets.
fn connection_config(
    bundle: &Bundle,
    connection: ConnectionView<'_>,
) -> Result<(Entry, ConnectorConfig), StartError> {
    let name = connection.name();
    let connector = connection.connector();
    let entry = match Entry::parse(&connector.spec.entry) {
        Ok(entry) => entry,
        Err(_) => {
            return Err(refusal(
                "E_CONFIG_ENTRY_UNSUPPORTED",
                format!(
                    "Connector/{} has entry `{}`, which this build cannot run",
                    connector.metadata.name, connector.spec.entry
                ),
                supported_help(),
            ))
        }
    };
    let spec = &connection.resource().spec;
    let mut config = ConnectorConfig::default();
    for (key, source) in &spec.config {
        let value = bundle.resolve(source).map_err(|error| {
            refusal(
                "E_CONNECTOR_CONFIG",
                format!("Connection/{name}: config.{key}: {error}"),
                "set the variable in the environment or in .env",
            )
        })?;
        config.config.insert(key.clone(), value);
    }
    for (key, source) in &spec.secrets {
        let value = bundle.resolve(source).map_err(|error| {
            refusal(
                "E_CONNECTOR_CONFIG",
                format!("Connection/{name}: secrets.{key}: {error}"),
                "set the variable in the environment or in .env",
            )
        })?;
        config.secrets.insert(key.clone(), value);
    }
    Ok((entry, config))
}

/// The built-in connectors a ConnectorProcess runs, by the name after
/// `builtin:`. This one table answers what runs ([`connector_for`]), what
/// to suggest for an entry this build cannot run, and how a connector's
/// events arrive ([`crate::delivery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Builtin {
    /// `builtin:webhook`: a web server anyone posts JSON to.
    Webhook,
    /// `builtin:github`: GitHub's webhook deliveries.
    Github,
    /// `builtin:slack`: the Slack Events API.
    Slack,
    /// `builtin:discord`: Discord interactions.
    Discord,
    /// `builtin:telegram`: long polling, or a webhook when the
    /// Connection's `TELEGRAM_MODE` is `webhook`.
    Telegram,
    /// `builtin:telegram-polling`: long polling only.
    TelegramPolling,
    /// `builtin:cron`: a clock.
    Cron,
}

impl Builtin {
    /// Every built-in connector, in the order help lists them.
    pub const ALL: [Builtin; 7] = [
        Builtin::Webhook,
        Builtin::Github,
        Builtin::Slack,
        Builtin::Discord,
        Builtin::Telegram,
        Builtin::TelegramPolling,
        Builtin::Cron,
    ];

    /// The name after `builtin:`.
    pub const fn name(self) -> &'static str {
        match self {
            Builtin::Webhook => "webhook",
            Builtin::Github => "github",
            Builtin::Slack => "slack",
            Builtin::Discord => "discord",
            Builtin::Telegram => "telegram",
            Builtin::TelegramPolling => "telegram-polling",
            Builtin::Cron => "cron",
        }
    }

    /// The built-in connector `name` (the part after `builtin:`) names;
    /// `None` for one this build does not run as a process.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Builtin::ALL
            .into_iter()
            .find(|builtin| builtin.name() == name)
    }

    /// Whether platforms post this connector's events to it (it is a web
    /// server), given the Connection's resolved `config`; otherwise it
    /// polls or fires on its own.
    pub fn is_pushed_to(self, config: &ConnectorConfig) -> bool {
        match self {
            Builtin::Webhook | Builtin::Github | Builtin::Slack | Builtin::Discord => true,
            Builtin::Telegram => telegram::is_webhook_mode(config),
            Builtin::TelegramPolling | Builtin::Cron => false,
        }
    }
}

/// What to suggest for an entry this build cannot run: every entry of the
/// table.
fn supported_help() -> String {
    let names: Vec<String> = Builtin::ALL
        .iter()
        .map(|builtin| format!("builtin:{}", builtin.name()))
        .collect();
    match names.split_last() {
        Some((last, rest)) => format!("use a built-in connector: {} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The connector a built-in entry names, from the Connection's config;
/// `None` for a name this build does not run as a process.
pub fn connector_for(
    entry: &str,
    config: &ConnectorConfig,
) -> Result<Option<Connector>, ConnectorConfigError> {
    let Some(builtin) = Builtin::from_name(entry) else {
        return Ok(None);
    };
    Ok(Some(match builtin {
        Builtin::Webhook => webhook::Webhook::from_config(config).map(Connector::http)?,
        Builtin::Github => github::Github::from_config(config).map(Connector::http)?,
        Builtin::Slack => slack::Slack::from_config(config).map(Connector::http)?,
        Builtin::Discord => discord::Discord::from_config(config).map(Connector::http)?,
        Builtin::Telegram | Builtin::TelegramPolling => {
            let force_polling = builtin == Builtin::TelegramPolling;
            match TelegramConnector::from_config(config, force_polling)? {
                TelegramConnector::Polling(polling) => Connector::source(polling),
                TelegramConnector::Webhook(platform, front) => Connector::http((platform, front)),
            }
        }
        Builtin::Cron => Connector::source(cron::Cron::from_config(config)?),
    }))
}

/// The refusal for an entry [`connector_for`] does not know.
fn unsupported(connection: &str, entry: &str) -> StartError {
    if entry == "cli" {
        return refusal(
            "E_CONNECTOR_UNSUPPORTED",
            format!("Connection/{connection}: the cli connector reads `gdn run`'s own terminal and runs in no process of its own"),
            "talk to the swarm with `gdn run`",
        );
    }
    refusal(
        "E_CONNECTOR_UNSUPPORTED",
        format!("Connection/{connection}: builtin:{entry} is not a connector this build can run"),
        supported_help(),
    )
}

/// The window of [`IpcEmitter::deliveries`]: a delivery id is kept twice
/// this long, 120 s, as long as a cluster's inbox drops a duplicate.
const DELIVERY_WINDOW: Duration = Duration::from_secs(60);

/// Sends events to the orchestrator as ingest queries, and presses to the
/// approval desk.
struct IpcEmitter {
    link: OrchestratorLink,
    /// Platform delivery ids accepted recently.
    deliveries: crate::verify::ReplayGuard,
    /// The Connection's approval desk, when it has `approvals`.
    desk: Option<DeskHandle>,
}

impl Emitter for IpcEmitter {
    fn emit(&self, event: ConnectorEvent) -> BoxFuture<'_, Result<Accepted, EmitError>> {
        Box::pin(async move {
            // A platform's retry of a delivery this process already handed
            // over is dropped here; the delivery counts as accepted.
            let delivery_id = event.delivery_id.clone();
            if let Some(id) = &delivery_id {
                let now = crate::verify::unix_seconds(std::time::SystemTime::now());
                if !self.deliveries.first(id, now, DELIVERY_WINDOW) {
                    tracing::info!(delivery_id = %id, event = %event.name, "a retry of a delivery already accepted; dropped");
                    return Ok(Accepted { target: None });
                }
            }
            let ingested = self.ingest(event).await;
            if let (Err(_), Some(id)) = (&ingested, &delivery_id) {
                // Not accepted: the platform's next try must go through.
                self.deliveries.forget(id);
            }
            ingested
        })
    }

    fn press(&self, press: Press) -> BoxFuture<'_, Result<(), EmitError>> {
        Box::pin(async move {
            match &self.desk {
                Some(desk) => desk.press(press),
                None => {
                    // A button of a message posted while the Connection had
                    // `approvals`: nothing here can decide it.
                    tracing::warn!(approval = %press.approval_id, "a press of an approval button, but this Connection has no `approvals`; ignored");
                    Ok(())
                }
            }
        })
    }
}

impl IpcEmitter {
    /// Asks the orchestrator to route and queue `event`.
    async fn ingest(&self, event: ConnectorEvent) -> Result<Accepted, EmitError> {
        match self.link.ask(Query::Ingest { event }, INGEST_TIMEOUT).await {
            Ok(QueryAnswer::Ingested { target, .. }) => Ok(Accepted { target }),
            Ok(QueryAnswer::Failed(failure)) if failure.is(WireCode::QueueFull) => {
                Err(EmitError::QueueFull(failure.message))
            }
            // Nothing holds the event: the platform's retry, or the
            // source's next try, must come.
            Ok(QueryAnswer::Failed(failure)) if failure.is(WireCode::ForwardFailed) => Err(
                EmitError::Closed(format!("{}: {}", failure.code, failure.message)),
            ),
            Ok(QueryAnswer::Failed(failure)) => Err(EmitError::Refused(format!(
                "{}: {}",
                failure.code, failure.message
            ))),
            Ok(other) => Err(EmitError::Refused(format!("unexpected answer {other:?}"))),
            Err(LinkError::Gone) => Err(EmitError::Closed("the orchestrator is gone".into())),
            Err(LinkError::TimedOut(timeout)) => Err(EmitError::Closed(format!(
                "the orchestrator did not queue the event within {} s",
                timeout.as_secs()
            ))),
        }
    }
}

/// Says ready, serves until a shutdown or the orchestrator's end, then
/// acknowledges; returns the exit code.
async fn serve(
    me: &RoutingKey,
    started: Started,
    link: OrchestratorLink,
    sender: mpsc::Sender<IpcMessage>,
    mut receiver: mpsc::Receiver<IpcMessage>,
) -> i32 {
    let ready = RuntimeMessage::Ready(Ready {
        protocol_version: PROTOCOL_VERSION,
    });
    if sender
        .send(ready.to_message(&me.to_string(), ORCHESTRATOR))
        .await
        .is_err()
    {
        return 0;
    }
    let Started { run, desk } = started;
    let (desk, desk_handle) = desk.unzip();
    let (stop_tx, stop_rx) = oneshot::channel::<bool>();
    let answers = link.clone();
    let notices = desk_handle.clone();
    let pongs = sender.clone();
    let name = me.to_string();
    // Reads what the orchestrator says; ends at a shutdown (true: to be
    // acknowledged) or at the end of the stream (false).
    tokio::spawn(async move {
        let acknowledge = loop {
            let Some(message) = receiver.recv().await else {
                break false;
            };
            match protocol::decode(&message) {
                Ok(Inbound::Runtime(RuntimeMessage::QueryAnswer(answer))) => {
                    answers.answered(&answer.in_reply_to, answer.answer);
                }
                Ok(Inbound::Runtime(RuntimeMessage::Ping(ping))) => {
                    let _ = pongs
                        .send(ping.pong().to_message(&name, ORCHESTRATOR))
                        .await;
                }
                Ok(Inbound::Runtime(RuntimeMessage::ApprovalAsked(asked))) => match &notices {
                    Some(desk) => desk.asked(*asked.request),
                    None => {
                        tracing::warn!(connector = %name, "told of an approval, but this Connection has no `approvals`; ignored")
                    }
                },
                Ok(Inbound::Runtime(RuntimeMessage::ApprovalDecided(decided))) => {
                    if let Some(desk) = &notices {
                        desk.decided(decided.decision);
                    }
                }
                Ok(Inbound::Shutdown(payload)) => {
                    tracing::info!(connector = %name, reason = ?payload.reason, "shutting down");
                    break true;
                }
                Ok(Inbound::Runtime(RuntimeMessage::Rejected(rejected))) => {
                    tracing::warn!(connector = %name, code = %rejected.code, "the orchestrator refused a message: {}", rejected.message);
                }
                Ok(other) => {
                    tracing::warn!(connector = %name, "unexpected message {other:?}; ignored")
                }
                Err(error) => tracing::warn!(connector = %name, code = error.code(), "{error}"),
            }
        };
        let _ = stop_tx.send(acknowledge);
    });
    let emitter = Arc::new(IpcEmitter {
        link,
        deliveries: crate::verify::ReplayGuard::default(),
        desk: desk_handle,
    });
    let (acknowledge_tx, acknowledge_rx) = oneshot::channel();
    let (trigger, shutdown) = Shutdown::new();
    tokio::spawn(async move {
        let acknowledge = stop_rx.await.unwrap_or(false);
        let _ = acknowledge_tx.send(acknowledge);
        trigger.fire();
    });
    if let Some(desk) = desk {
        tokio::spawn(desk.run(shutdown.clone()));
    }
    match run {
        Run::Http {
            platform,
            front,
            listener,
        } => {
            if let Err(error) =
                http::serve(listener, front, platform, emitter, shutdown.stopped()).await
            {
                tracing::error!(connector = %me, "the listener failed: {error}");
            }
        }
        Run::Source(source) => {
            let name = source.name();
            source.run(emitter, shutdown.clone()).await;
            if !shutdown.is_requested() {
                tracing::error!(connector = %me, source = name, "the connector stopped by itself");
                return 1;
            }
        }
    }
    if acknowledge_rx.await.unwrap_or(false) {
        let _ = sender
            .send(protocol::shutdown_ack_message(me, ORCHESTRATOR))
            .await;
    }
    0
}
