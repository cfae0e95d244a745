//! `gdn mcp serve`: the running swarm as an MCP server on stdin/stdout
//! (`goondan_mcp::server`), one tool per agent of the Swarm. Each call is
//! a real Turn in the running orchestrator, reached through its control
//! socket exactly as `gdn run --input` reaches it when attaching
//! (`run::ask_text`).
//!
//! An MCP client starts its servers itself, from a settings file, so the
//! first call must work with nothing started beforehand: when no
//! orchestrator runs for this bundle, `gdn mcp serve` starts one in the
//! background by running `gdn run --detach` (the same bundle, System Root,
//! Swarm and env file), says so on stderr, and serves it. The swarm
//! outlives the client, as a detached one does (`gdn stop` ends it). With
//! `--no-start` it exits with `E_ORCHESTRATOR_NOT_RUNNING` instead. When
//! the orchestrator stops later, each call answers that error as a tool
//! error.
//!
//! With `--http ADDR` it serves streamable HTTP at `http://ADDR/mcp`
//! instead, until SIGINT or SIGTERM, through the accept loop every port
//! shares (`goondan_http`: a connection cap overall and per client, and a
//! header timeout). A non-loopback address is refused
//! (`E_MCP_REMOTE_REFUSED`) unless both `--allow-remote` and a bearer token
//! (`--token-env NAME`, read from the environment or the bundle's `.env`)
//! are given: the endpoint runs Turns, which spend the operator's model
//! budget and use the agents' tools. So a token is refused
//! (`E_MCP_TOKEN_WEAK`) when it is shorter than every port's minimum
//! (`goondan_http::token`).
//!
//! stdout carries only protocol lines; every message for a person goes to
//! stderr.

use super::{port, run};
use crate::cli::{GlobalArgs, McpServeArgs};
use crate::exit::Outcome;
use crate::project;
use anyhow::Context;
use futures_util::future::BoxFuture;
use goondan_host::lock;
use goondan_mcp::server::http::HttpAccess;
use goondan_mcp::server::{AgentTool, SwarmTurns, TurnFailure};
use std::path::PathBuf;
use std::sync::Arc;

/// The bounds of the `--http` port before a request reaches the MCP
/// router (which bounds bodies): each connection may hold a long call or
/// its event stream, so a few hundred, a quarter of them per client; a
/// head must arrive within 10 s.
const HTTP_LIMITS: goondan_http::AcceptLimits =
    goondan_http::AcceptLimits::new(256, std::time::Duration::from_secs(10));

/// The swarm behind the control socket.
struct SocketTurns {
    socket: PathBuf,
    agents: Vec<AgentTool>,
    /// Where the instances' approvals are, to tell a waiting client.
    workspace: goondan_store::WorkspacePaths,
}

impl SwarmTurns for SocketTurns {
    fn agents(&self) -> Vec<AgentTool> {
        self.agents.clone()
    }

    fn ask(
        &self,
        agent: String,
        text: String,
        instance_key: Option<String>,
    ) -> BoxFuture<'static, Result<String, TurnFailure>> {
        let socket = self.socket.clone();
        Box::pin(async move {
            run::ask_text(&socket, agent, text, instance_key)
                .await
                .map_err(|refused| TurnFailure {
                    code: refused.code,
                    message: refused.message,
                    suggestion: refused.suggestion,
                })
        })
    }

    fn waiting_for(&self, agent: &str) -> Option<String> {
        let request = super::approvals::undecided(&self.workspace)
            .ok()?
            .into_iter()
            .find(|request| request.agent == agent)?;
        Some(format!(
            "agent `{agent}` waits for a person to decide {} ({}): `gdn approve {}` or `gdn deny {}`",
            request.id,
            request.tool.as_deref().unwrap_or("a question"),
            request.id,
            request.id
        ))
    }
}

/// Runs `gdn mcp serve` until the client closes stdin.
pub(crate) fn serve(global: &GlobalArgs, args: &McpServeArgs) -> anyhow::Result<Outcome> {
    let project = match project::load(global, args.swarm.as_deref(), args.env_file.clone())? {
        Ok(project) => project,
        Err(outcome) => return Ok(outcome),
    };
    let workspace = project.workspace();
    let socket = match lock::control_socket(&workspace) {
        Ok(socket) => socket,
        Err(error) => return Ok(crate::render::host_error(&error, project::format(global))),
    };
    let swarm = project
        .bundle
        .swarm(&project.swarm_name)
        .context("the selected swarm vanished")?;
    let entry_agent = swarm.entry_agent().name().to_string();
    let agents = swarm
        .agents()
        .map(|agent| {
            let name = agent.name().to_string();
            let role = if name == entry_agent {
                "the entry agent"
            } else {
                "an agent"
            };
            AgentTool {
                description: Some(format!(
                    "Ask {role} `{name}` of Swarm `{}` (a running goondan swarm) and get its answer. Pass `instanceKey` to keep a separate conversation.",
                    project.swarm_name
                )),
                name,
            }
        })
        .collect();
    let access = match http_access(args, &project) {
        Ok(access) => access,
        Err(outcome) => return Ok(outcome),
    };
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
        let turns = Arc::new(SocketTurns {
            socket,
            agents,
            workspace: workspace.clone(),
        });
        let Some(address) = args.http else {
            goondan_mcp::server::stdio::serve(turns, tokio::io::stdin(), tokio::io::stdout())
                .await
                .context("serving MCP on stdio")?;
            return Ok(Outcome::Success);
        };
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("binding {address}"))?;
        eprintln!(
            "serving MCP for Swarm/{} at http://{}{}",
            project.swarm_name,
            listener.local_addr()?,
            goondan_mcp::server::http::ENDPOINT
        );
        let router = goondan_mcp::server::http::router(turns, access);
        goondan_http::serve(listener, router, HTTP_LIMITS, port::stop_signal())
            .await
            .context("serving MCP over HTTP")?;
        Ok(Outcome::Success)
    })
}

/// Who may call `--http`, or the refusal already printed.
fn http_access(
    args: &McpServeArgs,
    project: &goondan_host::Project,
) -> Result<HttpAccess, Outcome> {
    let bearer_token = port::bearer_token(args.token_env.as_deref(), project, "MCP")?;
    if let Some(address) = args.http {
        let remote_allowed = args.allow_remote && bearer_token.is_some();
        if !(address.ip().is_loopback() || remote_allowed) {
            crate::render::error(
                "E_MCP_REMOTE_REFUSED",
                &format_args!("--http {address} is not a loopback address; anyone who reaches it could run Turns"),
                Some("use 127.0.0.1, or pass --allow-remote with --token-env NAME (a bearer token clients must send)"),
            );
            return Err(Outcome::BadArguments);
        }
    }
    Ok(HttpAccess {
        bearer_token,
        allow_remote_origins: args.allow_remote,
        allowed_hosts: args.allowed_host.clone(),
    })
}
