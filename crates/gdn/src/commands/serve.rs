//! `gdn serve`: the running swarm of this bundle over A2A and an
//! OpenAI-compatible API (`goondan_serve`), on one port.
//!
//! Like `gdn mcp serve`, it starts the bundle's orchestrator in the
//! background when none runs (`--no-start` refuses instead) and reaches
//! it only through its control socket: each input is a
//! `DeliverStreaming` request to exactly the instance the protocol
//! mapped it to, answered line by line (accepted once durable, the
//! model's text as it streams, the answer). Closing that connection
//! cancels the Turn, which is how a Task's cancel reaches it.
//!
//! The port is loopback by default (`127.0.0.1:4180`); any other address
//! needs a bearer token (`--token-env NAME`), which every request must
//! carry, through the accept loop every port shares (`goondan_http`).

use super::port;
use crate::cli::{GlobalArgs, ServeArgs};
use crate::exit::Outcome;
use crate::project;
use anyhow::Context;
use futures_util::future::BoxFuture;
use goondan_client::{ClientError, ControlSocket};
use goondan_host::lock;
use goondan_http::access::HttpAccess;
use goondan_ipc::protocol::{Answer, AnswerOutcome};
use goondan_orchestrator::control::{ControlRequest, ControlResponse};
use goondan_serve::{
    AgentInfo, PriorMessage, PriorRole, RunningTurn, Swarm, ToolInfo, TurnAnswer, TurnFailure,
    TurnRequest, TurnUpdate,
};
use goondan_types::{ConnectorEvent, ContentPart, ModelMessage};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The bounds of the port before a request reaches the router: each
/// connection may hold a streamed Turn, so thousands, a quarter of them
/// per client; a head must arrive within 10 s.
const HTTP_LIMITS: goondan_http::AcceptLimits =
    goondan_http::AcceptLimits::new(4096, std::time::Duration::from_secs(10));

/// How many inputs are handed to the orchestrator at once; well under
/// its control socket's listen queue and its bound on connections
/// waiting for their line
/// (`goondan_orchestrator::control::MAX_WAITING_CONNECTIONS`).
const HANDING_OVER_AT_ONCE: usize = 16;

/// How many reports of one Turn wait for the server to take them.
const BUFFERED_UPDATES: usize = 64;

/// The swarm behind the control socket.
struct SocketSwarm {
    name: String,
    socket: PathBuf,
    /// Inputs being handed over (connected, not yet `Accepted`): a burst
    /// of requests is handed over a few at a time, since connections past
    /// the control socket's listen queue (128) are refused, and past its
    /// bound on connections waiting for their line are evicted.
    handing_over: Arc<tokio::sync::Semaphore>,
    agents: Vec<AgentInfo>,
    workspace: goondan_store::WorkspacePaths,
}

impl Swarm for SocketSwarm {
    fn name(&self) -> &str {
        &self.name
    }

    fn agents(&self) -> &[AgentInfo] {
        &self.agents
    }

    fn start(&self, request: TurnRequest) -> BoxFuture<'static, Result<RunningTurn, TurnFailure>> {
        let socket = self.socket.clone();
        let handing_over = self.handing_over.clone();
        Box::pin(async move {
            let _permit = handing_over.acquire_owned().await;
            start_turn(&socket, request).await
        })
    }

    fn waiting_for(&self, agent: &str, instance_key: &str) -> Option<String> {
        let paths = self.workspace.instance(agent, instance_key);
        if !paths.approvals_file().exists() {
            return None;
        }
        let request = goondan_store::undecided_approvals(&paths)
            .ok()?
            .into_iter()
            .next()?;
        Some(format!(
            "waiting for a person to decide {} ({}): `gdn approve {}` or `gdn deny {}`",
            request.id,
            request.tool.as_deref().unwrap_or("a question"),
            request.id,
            request.id
        ))
    }
}

/// Sends `request` as a `DeliverStreaming` control request; resolves at
/// its `Accepted` line, then reads the rest in a task of its own.
async fn start_turn(socket: &Path, request: TurnRequest) -> Result<RunningTurn, TurnFailure> {
    let prior_messages = request.history.iter().map(model_message).collect();
    let control = ControlRequest::DeliverStreaming {
        key: goondan_types::RoutingKey::new(&request.agent, &request.instance_key).to_string(),
        event: ConnectorEvent::text("user_message", request.text),
        source: request.source,
        prior_messages,
    };
    let failure = |error: ClientError| match error {
        ClientError::NotRunning { .. } | ClientError::Stopped => not_running(),
        error => error.to_body(),
    };
    let mut responses = ControlSocket::new(socket)
        .open(&control)
        .await
        .map_err(failure)?;
    let event_id = match responses.next().await.map_err(failure)? {
        Some(ControlResponse::Accepted { event_id }) => event_id,
        Some(ControlResponse::Failed(refused)) => return Err(refused),
        Some(other) => return Err(protocol_broken(&other)),
        None => return Err(not_running()),
    };
    let (updates, received) = mpsc::channel(BUFFERED_UPDATES);
    tokio::spawn(async move {
        // `responses` holds the connection until the answer: closing it
        // cancels the Turn.
        loop {
            let response = tokio::select! {
                response = responses.next() => response,
                // Nobody reads the reports any more: cancel.
                () = updates.closed() => return,
            };
            let update = match response {
                Ok(Some(ControlResponse::Delta { text })) => TurnUpdate::Text(text),
                Ok(Some(ControlResponse::Answer { response })) => TurnUpdate::Finished(answer_of(&response)),
                Ok(Some(ControlResponse::Failed(refused))) => TurnUpdate::Finished(Err(refused)),
                Ok(Some(other)) => TurnUpdate::Finished(Err(protocol_broken(&other))),
                Err(ClientError::Protocol { detail }) => TurnUpdate::Finished(Err(TurnFailure::new("E_CONTROL_PROTOCOL", detail))),
                Ok(None) | Err(_) => TurnUpdate::Finished(Err(TurnFailure::new(
                    "E_ORCHESTRATOR_STOPPED",
                    "the orchestrator stopped before the Turn answered",
                )
                .with_suggestion("the input is in its instance's inbox and is answered when the swarm starts again"))),
            };
            let finished = matches!(update, TurnUpdate::Finished(_));
            if updates.send(update).await.is_err() || finished {
                return;
            }
        }
    });
    Ok(RunningTurn {
        event_id,
        updates: received,
    })
}

/// The failure of a Turn handed to an orchestrator that is not running.
fn not_running() -> TurnFailure {
    TurnFailure::new(
        "E_ORCHESTRATOR_NOT_RUNNING",
        "the orchestrator is not running",
    )
    .with_suggestion(
        "start it with `gdn run --detach`; `gdn serve` started it if it did not run then",
    )
}

fn protocol_broken(response: &ControlResponse) -> TurnFailure {
    TurnFailure::new(
        "E_CONTROL_PROTOCOL",
        format!("the orchestrator answered a streaming delivery with {response:?}"),
    )
}

/// The Turn's answer, or its failure.
fn answer_of(event: &goondan_types::AgentEvent) -> Result<TurnAnswer, TurnFailure> {
    match Answer::from_event(event).map(|answer| answer.outcome) {
        Some(AnswerOutcome::Failed(failure)) => {
            Err(TurnFailure::new(failure.code, failure.message))
        }
        Some(AnswerOutcome::Ok {
            text,
            turn_id,
            usage,
            ..
        }) => Ok(TurnAnswer {
            text: text.unwrap_or_default(),
            turn_id,
            usage,
        }),
        None => Ok(TurnAnswer {
            text: event.input.clone().unwrap_or_default(),
            ..TurnAnswer::default()
        }),
    }
}

/// A replayed message as the model message the agent writes.
fn model_message(prior: &PriorMessage) -> serde_json::Value {
    let message = match prior.role {
        PriorRole::System => ModelMessage::system(prior.text.clone()),
        PriorRole::User => ModelMessage::user(prior.text.clone()),
        PriorRole::Assistant => {
            ModelMessage::assistant(vec![ContentPart::text(prior.text.clone())])
        }
    };
    serde_json::to_value(message).unwrap_or_default()
}

/// The agents of the selected Swarm, entry agent first.
fn agents_of(project: &goondan_host::Project) -> anyhow::Result<Vec<AgentInfo>> {
    let swarm = project
        .bundle
        .swarm(&project.swarm_name)
        .context("the selected swarm vanished")?;
    let entry = swarm.entry_agent().name().to_string();
    let mut agents: Vec<AgentInfo> = swarm
        .agents()
        .map(|agent| {
            let resource = agent.resource();
            AgentInfo {
                name: agent.name().to_string(),
                description: resource.metadata.annotations.get("description").cloned(),
                entry: agent.name() == entry,
                tools: agent
                    .tools()
                    .flat_map(|tool| {
                        tool.spec.exports.iter().map(move |export| ToolInfo {
                            name: format!("{}__{}", tool.name(), export.name),
                            description: Some(export.description.clone()),
                        })
                    })
                    .collect(),
            }
        })
        .collect();
    agents.sort_by_key(|agent| !agent.entry);
    Ok(agents)
}

/// Runs `gdn serve` until SIGINT or SIGTERM.
pub(crate) fn serve(global: &GlobalArgs, args: &ServeArgs) -> anyhow::Result<Outcome> {
    let project = match project::load(global, args.swarm.as_deref(), args.env_file.clone())? {
        Ok(project) => project,
        Err(outcome) => return Ok(outcome),
    };
    let workspace = project.workspace();
    let socket = match lock::control_socket(&workspace) {
        Ok(socket) => socket,
        Err(error) => return Ok(crate::render::host_error(&error, project::format(global))),
    };
    let bearer_token = match port::bearer_token(args.token_env.as_deref(), &project, "SERVE") {
        Ok(token) => token,
        Err(outcome) => return Ok(outcome),
    };
    if !args.addr.ip().is_loopback() && bearer_token.is_none() {
        crate::render::error(
            "E_SERVE_REMOTE_REFUSED",
            &format_args!(
                "--addr {} is not a loopback address; anyone who reaches it could run Turns",
                args.addr
            ),
            Some("use 127.0.0.1, or pass --token-env NAME (a bearer token every client must send)"),
        );
        return Ok(Outcome::BadArguments);
    }
    if let Some(url) = &args.public_url {
        let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
        if !scheme_ok || url.chars().any(char::is_whitespace) {
            crate::render::error(
                "E_SERVE_PUBLIC_URL",
                &format_args!("--public-url `{url}` is not an http(s) URL"),
                Some("give the base URL clients reach the server by, for example https://agents.example.com"),
            );
            return Ok(Outcome::BadArguments);
        }
    }
    let access = HttpAccess {
        allow_remote_origins: bearer_token.is_some(),
        bearer_token,
        allowed_hosts: args.allowed_host.clone(),
    };
    let agents = agents_of(&project)?;
    crate::runtime::current_thread()?.block_on(async {
        if let Err(outcome) = port::ensure_running(
            global,
            &project,
            &socket,
            args.env_file.as_deref(),
            args.no_start,
        )
        .await
        {
            return Ok(outcome);
        }
        let listener = tokio::net::TcpListener::bind(args.addr)
            .await
            .with_context(|| format!("binding {}", args.addr))?;
        let bound = listener.local_addr()?;
        let public_url = args
            .public_url
            .clone()
            .unwrap_or_else(|| format!("http://{bound}"));
        let swarm = Arc::new(SocketSwarm {
            name: project.swarm_name.clone(),
            socket,
            handing_over: Arc::new(tokio::sync::Semaphore::new(HANDING_OVER_AT_ONCE)),
            agents,
            workspace,
        });
        if global.json {
            println!(
                "{}",
                serde_json::json!({"event": "serving", "address": bound.to_string(), "url": public_url, "swarm": project.swarm_name})
            );
        } else {
            eprintln!(
                "serving Swarm/{} at {public_url}: A2A at /a2a/<agent>, OpenAI-compatible at /v1",
                project.swarm_name
            );
        }
        let router = goondan_serve::router(swarm, access, public_url, goondan_serve::Limits::default());
        goondan_http::serve(listener, router, HTTP_LIMITS, port::stop_signal())
            .await
            .context("serving A2A and the OpenAI-compatible API")?;
        Ok(Outcome::Success)
    })
}
