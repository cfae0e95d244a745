//! `gdn run`: starts the orchestrator of the selected Swarm in the
//! foreground (or, with `--detach`, in the background), or attaches to the
//! one already serving this bundle's workspace.
//!
//! * `--input TEXT` / `--input-file PATH`: one event for the entry agent
//!   (of the instance `--instance-key`, else the Swarm's); prints the
//!   answer and exits (0, or 1 when the Turn failed). Input is bounded by
//!   [`MAX_INPUT_BYTES`]; a file, FIFO or device is read through that bound,
//!   so `/dev/zero` costs one MiB, not all memory.
//! * no input on a terminal: an interactive chat, one event per line.
//! * no input on a pipe or a file (`cat questions.txt | gdn run`): every
//!   line is an event, in order, a JSON object line giving its name, text,
//!   instance key and properties; each answer is printed as its Turn ends
//!   (one JSON line each with `--json`); at the end of the input the Turns
//!   in flight finish, then `gdn run` exits.
//! * no input otherwise (`/dev/null`, a detached daemon, a service): stays
//!   resident until SIGINT, SIGTERM or `shutdown` on the control socket.
//!
//! One orchestrator per workspace: whoever takes the exclusive lock beside
//! the control socket starts it and holds the lock for its whole life;
//! every other `gdn run` waits (at most [`ATTACH_WAIT`]) for the socket to
//! answer `Status` with this workspace's identity, then attaches. A socket
//! file is only ever replaced by the lock's holder.

use super::cluster::{self, ClusterMode, SingletonConnections};
use super::reload;
use super::rollout::{self, BundleFollower, HostBundle};
use crate::cli::{GlobalArgs, RunArgs};
use crate::exit::Outcome;
use crate::project::{self, Project};
use crate::stdin_lines::{self, Line};
use anyhow::Context;
use goondan_cluster::crashes::{CrashEntry, CrashRecords};
use goondan_ipc::protocol::{Answer, AnswerOutcome};
use goondan_ipc::RoutingKey;
use goondan_orchestrator::control::{
    self, ControlIdentity, ControlRequest, ControlResponse, ControlServer,
};
use goondan_orchestrator::ingress::CLI_EVENT;
use goondan_orchestrator::orchestrator::{CrashLedger, CrashRecord, Liveness, ProcessPolicy};
use goondan_orchestrator::{
    Ingress, IngressRule, LocalSpawner, Orchestrator, OrchestratorConfig, OrchestratorError,
    OrchestratorHandle, SpawnRequest, SwarmInfo,
};
use goondan_store::paths::BUNDLE_SCOPE_ENV;
use goondan_store::{ActiveSwarm, InstanceMetadata, InstanceStore, WorkspacePaths};
use goondan_types::{AgentEvent, ConnectorEvent};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The largest input `gdn run` sends, in bytes (`--input` or
/// `--input-file`).
const MAX_INPUT_BYTES: usize = 1024 * 1024;
/// How many lines of piped input may wait for their answers at once.
const MAX_LINES_IN_FLIGHT: usize = 256;
/// How long a `gdn run` that lost the start lock waits for the winner's
/// socket to answer.
const ATTACH_WAIT: Duration = Duration::from_secs(5);

/// Runs `gdn run`.
pub(crate) fn run(global: &GlobalArgs, args: &RunArgs) -> anyhow::Result<Outcome> {
    if !args.no_install {
        if let Err(outcome) = super::package::install_before_run(global) {
            return Ok(outcome);
        }
    }
    let project = match project::load(global, args.swarm.as_deref(), args.env_file.clone())? {
        Ok(project) => project,
        Err(outcome) => return Ok(outcome),
    };
    let input = match read_input(args) {
        Ok(input) => input,
        Err(outcome) => return Ok(outcome),
    };
    // Every process of the swarm reads the same `OTEL_*` variables; one
    // that cannot be used is refused here, before anything starts, rather
    // than silently turning export off in each agent.
    if let Err(error) = goondan_telemetry::OtlpSettings::from_env("goondan") {
        eprintln!("error[{}]: {error}", error.code());
        eprintln!("   = help: {}", error.suggestion());
        eprintln!("nothing was started");
        return Ok(Outcome::ConfigError);
    }
    let cluster = match &args.cluster {
        None => None,
        Some(urls) => match ClusterMode::new(&project, urls, args.host_id.as_deref()) {
            Ok(mode) => Some(mode),
            Err(error) => return Ok(cluster::print_cluster_error(&error)),
        },
    };
    if let (Some(mode), Some(text)) = (&cluster, &input) {
        // One input through the cluster: no orchestrator here.
        let info = swarm_info(&project)?;
        let ingress =
            Ingress::cli_event(typed_event(text.clone(), args.instance_key.clone()), None);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        return runtime.block_on(cluster::ask(mode, &info, ingress, global.json));
    }
    let workspace = project.workspace();
    let socket = match project::control_socket(&workspace) {
        Ok(socket) => socket,
        Err(outcome) => return Ok(outcome),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        loop {
            let lock = match claim(&workspace, &socket).await? {
                Claim::Running => {
                    if args.watch {
                        eprintln!("warning: this bundle's orchestrator is already running; --watch applies only when `gdn run --watch` starts it");
                    }
                    let Some(text) = &input else {
                        return attach_chat(global, &socket, args.instance_key.clone()).await;
                    };
                    eprintln!("attached to the orchestrator at {}", socket.display());
                    let event = typed_event(text.clone(), args.instance_key.clone());
                    match ask_over_socket(&socket, None, event, false).await? {
                        Delivery::Answered(reply) => {
                            return Ok(report(reply.map(|answer| *answer), None, false))
                        }
                        // It closed between `Status` and the request: claim
                        // again, and maybe start one ourselves.
                        Delivery::NotDelivered => continue,
                    }
                }
                Claim::Refused(outcome) => return Ok(outcome),
                Claim::Won(lock) => lock,
            };
            if args.detach {
                // The background process takes the lock itself.
                drop(lock);
                return detach(global, args, &project, &socket, input).await;
            }
            return foreground(global, args, project, socket, input, lock, cluster).await;
        }
    })
}

/// The input of `--input` or `--input-file`, at most [`MAX_INPUT_BYTES`];
/// `Err` after printing a coded error.
fn read_input(args: &RunArgs) -> Result<Option<String>, Outcome> {
    let bytes = match (&args.input, &args.input_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(path)) => read_input_file(path)?,
        (None, None) => return Ok(None),
    };
    if bytes.len() > MAX_INPUT_BYTES {
        let source = match &args.input_file {
            Some(path) if args.input.is_none() => format!("--input-file {}", path.display()),
            _ => "--input".to_string(),
        };
        return Err(input_error(
            "E_INPUT_TOO_LARGE",
            &format!("{source} is larger than the {MAX_INPUT_BYTES}-byte input limit (1 MiB)"),
            "send a shorter message; put large documents where a tool can read them",
        ));
    }
    String::from_utf8(bytes).map(Some).map_err(|_| {
        input_error(
            "E_INPUT_NOT_UTF8",
            "the input is not UTF-8 text",
            "convert the file to UTF-8",
        )
    })
}

/// Reads at most one byte past the limit from any file: a regular file, a
/// FIFO (`<(cmd)`) or a character device alike, so an endless source costs
/// the limit and no more.
fn read_input_file(path: &Path) -> Result<Vec<u8>, Outcome> {
    let unreadable = |error: std::io::Error| {
        input_error(
            "E_INPUT_FILE_UNREADABLE",
            &format!("cannot read --input-file {}: {error}", path.display()),
            "pass a readable file",
        )
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    Ok(bytes)
}

fn input_error(code: &str, message: &str, help: &str) -> Outcome {
    eprintln!("error[{code}]: {message}");
    eprintln!("   = help: {help}");
    eprintln!("nothing was started");
    Outcome::BadArguments
}

/// What `gdn run` found at its workspace's control socket.
pub(crate) enum Claim {
    /// This workspace's orchestrator answers there.
    Running,
    /// No orchestrator runs; this process holds the start lock.
    Won(std::fs::File),
    /// Neither; the error was printed.
    Refused(Outcome),
}

/// Attaches to this workspace's orchestrator, or takes the lock to start
/// one. A process that loses the lock waits for the winner's socket.
pub(crate) async fn claim(workspace: &WorkspacePaths, socket: &Path) -> anyhow::Result<Claim> {
    let lock_path = workspace.control_lock();
    let deadline = tokio::time::Instant::now() + ATTACH_WAIT;
    loop {
        if let Ok(ControlResponse::Status { identity, .. }) =
            control::call(socket, &ControlRequest::Status).await
        {
            if identity.workspace_id.as_deref() == Some(workspace.workspace_id()) {
                return Ok(Claim::Running);
            }
            eprintln!(
                    "error[E_CONTROL_SOCKET_FOREIGN]: the control socket {} answers for workspace {} (bundle {}), not {}; not attaching",
                    socket.display(),
                    identity.workspace_id.as_deref().unwrap_or("(unnamed)"),
                    identity
                        .bundle_dir
                        .as_deref()
                        .map_or_else(|| "(unnamed)".into(), |dir| dir.display().to_string()),
                    workspace.workspace_id()
                );
            eprintln!(
                    "   = help: stop that orchestrator (`gdn --config <its bundle> instance list` finds it) or use another --state-root"
                );
            return Ok(Claim::Refused(Outcome::Failure));
        }
        if let Some(lock) = try_lock(&lock_path)? {
            return Ok(Claim::Won(lock));
        }
        if tokio::time::Instant::now() >= deadline {
            eprintln!(
                "error[E_ORCHESTRATOR_START]: another `gdn run` holds {} but its control socket did not answer within {} s",
                lock_path.display(),
                ATTACH_WAIT.as_secs()
            );
            eprintln!(
                "   = help: try again; if it persists, read the logs under {}",
                workspace.runtime_logs_dir().display()
            );
            return Ok(Claim::Refused(Outcome::Failure));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Takes the exclusive start lock, creating its owner-only folder; `None`
/// when another process holds it.
fn try_lock(path: &Path) -> anyhow::Result<Option<std::fs::File>> {
    if let Some(dir) = path.parent() {
        goondan_store::owner_only::create_dir_all(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = goondan_store::owner_only::open_options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(error).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// Input for an orchestrator that is already running: a chat on a
/// terminal, else every line of the pipe, one after another.
async fn attach_chat(
    global: &GlobalArgs,
    socket: &Path,
    instance_key: Option<String>,
) -> anyhow::Result<Outcome> {
    eprintln!("attached to the orchestrator at {}", socket.display());
    let terminal = std::io::stdin().is_terminal();
    let mut lines = stdin_lines::spawn(MAX_INPUT_BYTES);
    let mut outcome = Outcome::Success;
    if terminal {
        prompt();
    }
    while let Some(line) = lines.recv().await {
        let event = match line_event(line, instance_key.as_deref()) {
            Ok(Some(event)) => event,
            Ok(None) => continue,
            Err(failed) => {
                outcome = failed;
                continue;
            }
        };
        let sent_key = event.instance_key.clone();
        let answer = match ask_over_socket(socket, None, event, false).await? {
            Delivery::Answered(answer) => answer.map(|answer| *answer),
            Delivery::NotDelivered => {
                eprintln!("error[E_ORCHESTRATOR_NOT_RUNNING]: the orchestrator stopped");
                return Ok(Outcome::Failure);
            }
        };
        if report(answer, sent_key.as_deref(), global.json) == Outcome::Failure {
            outcome = Outcome::Failure;
        }
        if terminal {
            prompt();
        }
    }
    Ok(outcome)
}

/// Text typed at `gdn run` (or given with `--input`), for `instance_key`.
fn typed_event(text: String, instance_key: Option<String>) -> ConnectorEvent {
    let mut event = ConnectorEvent::text(CLI_EVENT, text);
    event.instance_key = instance_key;
    event
}

/// Whether a request reached the orchestrator.
enum Delivery {
    /// It did, and this is what came back.
    Answered(Result<Box<AgentEvent>, Refused>),
    /// The socket refused the connection: nothing was sent.
    NotDelivered,
}

/// Sends `event` over the control socket and waits for the answer; with
/// `cancel_on_disconnect`, dropping the future cancels the Turn.
async fn ask_over_socket(
    socket: &Path,
    agent: Option<String>,
    event: ConnectorEvent,
    cancel_on_disconnect: bool,
) -> anyhow::Result<Delivery> {
    let request = ControlRequest::Request {
        agent,
        event,
        cancel_on_disconnect,
    };
    let response = match control::call(socket, &request).await {
        Ok(response) => response,
        Err(OrchestratorError::Control { source, .. })
            if matches!(
                source.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(Delivery::NotDelivered)
        }
        Err(error) => return Err(error.into()),
    };
    match response {
        ControlResponse::Answer { response } => Ok(Delivery::Answered(Ok(response))),
        ControlResponse::Failed {
            code,
            message,
            suggestion,
        } => Ok(Delivery::Answered(Err(Refused {
            code,
            message,
            suggestion,
        }))),
        other => anyhow::bail!("the orchestrator answered a request with {other:?}"),
    }
}

/// One Turn of `agent` on `text` through the running orchestrator's
/// control socket, as typed at `gdn run` (in instance `instance_key`,
/// else the Swarm's): the answer's text, or why there is none. This is
/// what each `gdn mcp serve` tool call runs. Dropping the future before
/// it resolves cancels the Turn (`E_TURN_CANCELLED`).
pub(crate) async fn ask_text(
    socket: &Path,
    agent: String,
    text: String,
    instance_key: Option<String>,
) -> Result<String, Refused> {
    let event = typed_event(text, instance_key);
    match ask_over_socket(socket, Some(agent), event, true).await {
        Ok(Delivery::Answered(reply)) => answer_text(&*reply?),
        Ok(Delivery::NotDelivered) => Err(Refused {
            code: "E_ORCHESTRATOR_NOT_RUNNING".into(),
            message: "the orchestrator is not running".into(),
            suggestion: Some("start it with `gdn run --detach`".into()),
        }),
        Err(error) => Err(match error.downcast::<OrchestratorError>() {
            Ok(error) => Refused::from(error),
            Err(other) => Refused {
                code: "E_CONTROL_PROTOCOL".into(),
                message: format!("{other:#}"),
                suggestion: None,
            },
        }),
    }
}

/// Starts `gdn run` again in the background, waits until its control
/// socket answers, and optionally hands it the input.
async fn detach(
    global: &GlobalArgs,
    args: &RunArgs,
    project: &Project,
    socket: &Path,
    input: Option<String>,
) -> anyhow::Result<Outcome> {
    let workspace = project.workspace();
    let log_path = workspace.runtime_log_file("orchestrator", "stderr");
    if let Some(dir) = log_path.parent() {
        goondan_store::owner_only::create_dir_all(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
    }
    let log = goondan_store::owner_only::open_options()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let mut command = std::process::Command::new(std::env::current_exe()?);
    command
        .arg("--config")
        .arg(project.bundle.root())
        .arg("--state-root")
        .arg(project.state_root.path())
        .arg("run")
        .arg("--swarm")
        .arg(&project.swarm_name);
    if let Some(env_file) = &args.env_file {
        command
            .arg("--env-file")
            .arg(std::path::absolute(env_file)?);
    }
    if let Some(record) = &args.record {
        command.arg("--record").arg(std::path::absolute(record)?);
    }
    if args.watch {
        command.arg("--watch");
    }
    if let Some(urls) = &args.cluster {
        command.arg("--cluster").arg(urls);
    }
    if let Some(host_id) = &args.host_id {
        command.arg("--host-id").arg(host_id);
    }
    if global.verbose > 0 {
        command.arg("-v");
    }
    use std::os::unix::process::CommandExt;
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("starting the background orchestrator")?;
    // Poll finely: the daemon is usually ready within a few milliseconds.
    // The pid printed is the one that answers: another `gdn run` may have
    // won the start lock first, and then the child attached to it.
    // A cluster host joins the cluster before it answers, which may wait
    // out a leader election.
    let wait = match args.cluster {
        Some(_) => ATTACH_WAIT + cluster::JOIN_DEADLINE,
        None => ATTACH_WAIT,
    };
    let deadline = tokio::time::Instant::now() + wait;
    drop(child);
    while tokio::time::Instant::now() < deadline {
        if let Ok(ControlResponse::Status { pid, identity, .. }) =
            control::call(socket, &ControlRequest::Status).await
        {
            if identity.workspace_id.as_deref() == Some(workspace.workspace_id()) {
                println!(
                    "started orchestrator (pid {pid}) for Swarm/{} (instanceKey {}); logs: {}",
                    project.swarm_name,
                    project.instance_key,
                    log_path.display()
                );
                let Some(text) = input else {
                    return Ok(Outcome::Success);
                };
                let event = typed_event(text, args.instance_key.clone());
                return match ask_over_socket(socket, None, event, false).await? {
                    Delivery::Answered(reply) => {
                        Ok(report(reply.map(|answer| *answer), None, false))
                    }
                    Delivery::NotDelivered => Ok(not_delivered()),
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!(
        "error[E_ORCHESTRATOR_START]: the background orchestrator did not answer within {} s\n   = help: read {}",
        wait.as_secs(),
        log_path.display()
    );
    Ok(Outcome::Failure)
}

fn not_delivered() -> Outcome {
    eprintln!(
        "error[E_ORCHESTRATOR_NOT_RUNNING]: the orchestrator stopped before it took the input"
    );
    eprintln!("   = help: run the command again");
    Outcome::Failure
}

/// Runs the orchestrator in this process, holding `lock` (the workspace's
/// start lock) until it has stopped.
async fn foreground(
    global: &GlobalArgs,
    args: &RunArgs,
    project: Project,
    socket: PathBuf,
    input: Option<String>,
    lock: std::fs::File,
    cluster: Option<ClusterMode>,
) -> anyhow::Result<Outcome> {
    raise_open_file_limit();
    // Listened for before anything starts, so a stop during start-up is a
    // graceful one too.
    let mut stop = match StopSignals::new() {
        Ok(stop) => stop,
        Err(error) => {
            eprintln!("error: cannot listen for SIGINT and SIGTERM: {error}");
            return Ok(Outcome::Failure);
        }
    };
    // The System Root's own layout (workspace.md §2.3: `config.json`,
    // `packages/`, `workspaces/`, `runtime/`), as tools that read a Goondan
    // state root expect it; existing files are kept.
    if let Err(error) = project.state_root.initialize() {
        eprintln!("error[{}]: {error}", error.code());
        return Ok(Outcome::ConfigError);
    }
    // A cluster host joins before its orchestrator starts: it runs the
    // cluster's bundle, and the orchestrator must know from its first
    // event which instances other hosts serve.
    let (project, host) = match &cluster {
        None => (project, None),
        Some(mode) => match join_cluster(global, args, mode, project).await? {
            Ok((project, host)) => (project, Some(host)),
            Err(outcome) => return Ok(outcome),
        },
    };
    let mut info = swarm_info(&project)?;
    // A cluster host starts with the Connections every host runs; the
    // others follow the ownership of one shard (`cluster::Host`).
    let connections = Arc::new(SingletonConnections::default());
    if cluster.is_some() {
        info = connections.select(&project, info);
    }
    // The folder every child (`gdn agent`, `gdn connector`) loads its
    // bundle from and runs in: a cluster host's link follows rollouts.
    let bundle_dir = match &host {
        Some(host) => host.bundle.link.clone(),
        None => project.bundle.root().to_path_buf(),
    };
    let mut bundle_args: Vec<String> = vec![
        "--bundle-dir".into(),
        bundle_dir.display().to_string(),
        // Absolute: the children run in the bundle root, not here. Both
        // kinds of child read installed packages from it.
        "--state-root".into(),
        std::path::absolute(project.state_root.path())?
            .display()
            .to_string(),
    ];
    if let Some(env_file) = &args.env_file {
        bundle_args.push("--env-file".into());
        bundle_args.push(std::path::absolute(env_file)?.display().to_string());
    }
    let connector_args: Vec<String> = std::iter::once("connector".to_string())
        .chain(bundle_args.iter().cloned())
        .collect();
    let mut agent_args: Vec<String> = std::iter::once("agent".to_string())
        .chain(bundle_args)
        .collect();
    agent_args.extend(["--swarm".into(), project.swarm_name.clone()]);
    if let Some(record) = &args.record {
        agent_args.push("--record".into());
        agent_args.push(std::path::absolute(record)?.display().to_string());
    }
    let workspace = project.workspace();
    let log_workspace = workspace.clone();
    let log_file: goondan_orchestrator::LogFileFor = Arc::new(move |request: &SpawnRequest| {
        let process = match request {
            SpawnRequest::Agent { key, .. } => format!("{}-{}", key.agent_name, key.instance_key),
            SpawnRequest::Connector { connection } => format!("connection-{connection}"),
        };
        log_workspace.runtime_log_file(&process, "stderr")
    });
    // Agents open the workspace this orchestrator chose: the scope names
    // the bundle, which `gdn agent` does not hash again.
    let mut env = project
        .state_root
        .bundle_scope()
        .map(|scope| vec![(BUNDLE_SCOPE_ENV.to_string(), scope.to_string())])
        .unwrap_or_default();
    if let Some(mode) = &cluster {
        env.extend(mode.agent_env());
    }
    // Keys reach agents in the spawn handshake, never through their
    // environment (which every tool they run would inherit) or argv.
    let (secrets, withheld_env) = crate::secrets::for_children(&project.bundle);
    goondan_types::secret::mask_in_logs(&secrets);
    let spawner = LocalSpawner {
        program: std::env::current_exe().context("locating the gdn binary")?,
        args: agent_args,
        connector_args: Some(connector_args),
        env,
        secrets,
        withheld_env,
        log_file: Some(log_file),
        current_dir: Some(bundle_dir.clone()),
    };
    let store = InstanceStore::new(workspace.clone());
    let reset_instance: goondan_orchestrator::orchestrator::ResetInstance =
        Arc::new(move |key: &RoutingKey| {
            if let Err(error) = store.reset_messages(&key.agent_name, &key.instance_key) {
                tracing::warn!(key = %key, code = error.code(), "could not clear history: {error}");
            }
        });
    let (restart_requests, restart_requests_rx) =
        tokio::sync::mpsc::channel(reload::RESTART_REQUEST_CAPACITY);
    let (handle, task) = Orchestrator::start(OrchestratorConfig {
        swarm: info,
        spawner: Arc::new(spawner),
        transport: None,
        reconcile_interval: Duration::from_secs(5),
        reset_instance: Some(reset_instance),
        crash_ledger: Some(match &host {
            Some(host) => cluster_crash_ledger(&project, host.crashes.clone()),
            None => crash_ledger(&project),
        }),
        liveness: Liveness::from_env(),
        restart_requests: Some(restart_requests),
        remote: host.as_ref().map(|host| host.joined.remote()),
    });
    let identity = ControlIdentity {
        workspace_id: Some(workspace.workspace_id().to_string()),
        bundle_dir: Some(project.bundle.root().to_path_buf()),
    };
    let server = match ControlServer::bind(socket.clone(), identity) {
        Ok(server) => server,
        Err(error) => {
            eprintln!("error[{}]: {error}", error.code());
            handle.shutdown().await.ok();
            return Ok(Outcome::Failure);
        }
    };
    let (stop_control, control_stopped) = tokio::sync::oneshot::channel::<()>();
    let control_server = tokio::spawn(server.run(handle.clone(), async {
        let _ = control_stopped.await;
    }));
    let active = write_active(&project, &workspace, &socket)?;
    // Started once the swarm runs, so the first edit or restart request
    // has something to restart; stopped before the swarm drains.
    let (rollouts, rollouts_rx) = tokio::sync::mpsc::channel(1);
    // A single host reloads what `--config` named (a folder or one file);
    // a cluster host, the link to the bundle it runs.
    let config = match &host {
        Some(host) => host.bundle.link.clone(),
        None => global.config.clone().unwrap_or_else(|| PathBuf::from(".")),
    };
    let cluster_reload = host.as_ref().map(|host| {
        let reload = reload::ClusterReload {
            link: host.bundle.link.clone(),
            connections: Arc::clone(&connections),
        };
        (reload, rollouts_rx)
    });
    let reloader = reload::start(
        handle.clone(),
        &project,
        reload::Source::new(global, config, args.env_file.clone())?,
        args.watch,
        restart_requests_rx,
        cluster_reload,
    )?;

    let host = match (host, &cluster) {
        (Some(host), Some(mode)) => {
            eprintln!(
                "host {} joined the cluster at {} for Swarm/{} (workspace {}, bundle {})",
                mode.host_id,
                mode.urls,
                project.swarm_name,
                mode.workspace_id,
                goondan_cluster::bundle::short_digest(&host.bundle.digest)
            );
            let follower = BundleFollower::new(
                global,
                host.cluster,
                mode,
                host.bundle,
                host.local_root,
                rollouts,
            );
            Some(host.joined.serve(handle.clone(), connections, follower))
        }
        _ => None,
    };
    let instance_key = args.instance_key.clone();
    let (outcome, signalled) = match input {
        // A host serves its shards; its input comes through the cluster.
        _ if host.is_some() => (resident(task, &mut stop).await, true),
        Some(text) => (ask(&handle, text, instance_key, &mut stop).await, false),
        None => match console(global, args.interactive) {
            Console::Terminal => {
                eprintln!(
                    "Swarm/{} is running (instanceKey {}); type a message, Ctrl-D to quit",
                    project.swarm_name, project.instance_key
                );
                (chat(&handle, instance_key, &mut stop).await, false)
            }
            Console::Lines => (
                lines(&handle, instance_key, global.json, &mut stop).await,
                false,
            ),
            Console::Idle => (resident(task, &mut stop).await, true),
        },
    };
    // The socket goes first, so no new request arrives. When this run's own
    // work is done, the requests other `gdn run`s attached with are
    // answered before the agents stop; on a signal the drain starts at
    // once, and its grace period bounds them.
    reloader.abort();
    let _ = stop_control.send(());
    if let Some(host) = host {
        // Stop pulling and let the Turns in flight answer before the
        // agents stop; the leases go last.
        host.drain().await;
    }
    if signalled {
        handle.shutdown().await.ok();
        let _ = control_server.await;
    } else {
        let _ = control_server.await;
        handle.shutdown().await.ok();
    }
    ActiveSwarm::remove_if_owned_by(&active, std::process::id());
    drop(lock);
    Ok(outcome)
}

/// A cluster host that joined, before its orchestrator starts.
struct StartingHost {
    cluster: goondan_cluster::Cluster,
    joined: cluster::JoinedHost,
    bundle: HostBundle,
    /// The workspace's crash counters, shared by every host.
    crashes: CrashRecords,
    /// The folder it was started in (its env files).
    local_root: PathBuf,
}

/// Connects to the cluster of `mode`, settles which bundle this host runs
/// (see `rollout`) and joins; `Err` after printing why not.
async fn join_cluster(
    global: &GlobalArgs,
    args: &RunArgs,
    mode: &ClusterMode,
    project: Project,
) -> anyhow::Result<Result<(Project, StartingHost), Outcome>> {
    let connected = async {
        let cluster = mode.connect().await?;
        cluster::ensure_layout(&cluster).await?;
        Ok::<_, goondan_cluster::ClusterError>(cluster)
    };
    let cluster = match connected.await {
        Ok(cluster) => cluster,
        Err(error) => return Ok(Err(cluster::print_cluster_error(&error))),
    };
    let local_root = project.bundle.root().to_path_buf();
    let link = rollout::link_of(&project);
    let source = reload::Source::new(global, link, args.env_file.clone())?;
    let (project, bundle) = match rollout::adopt(global, &cluster, mode, project, &source).await {
        Ok(adopted) => adopted,
        Err(outcome) => return Ok(Err(outcome)),
    };
    // Read before the first instance starts: one that crashed elsewhere
    // keeps backing off here.
    let crashes = match CrashRecords::follow(&cluster, &mode.workspace_id).await {
        Ok(crashes) => crashes,
        Err(error) => return Ok(Err(cluster::print_cluster_error(&error))),
    };
    let joined = match cluster::join(mode, cluster.clone(), &bundle.digest).await {
        Ok(joined) => joined,
        Err(error) => return Ok(Err(cluster::print_cluster_error(&error))),
    };
    Ok(Ok((
        project,
        StartingHost {
            cluster,
            joined,
            bundle,
            crashes,
            local_root,
        },
    )))
}

/// What the orchestrator needs to know about the selected Swarm of
/// `project` (also rebuilt by `--watch` after every valid edit).
pub(crate) fn swarm_info(project: &Project) -> anyhow::Result<SwarmInfo> {
    let swarm = project
        .bundle
        .swarm(&project.swarm_name)
        .context("the selected swarm vanished")?;
    let agents: Vec<String> = swarm
        .agents()
        .map(|agent| agent.name().to_string())
        .collect();
    Ok(SwarmInfo {
        swarm_name: project.swarm_name.clone(),
        entry_agent: swarm.entry_agent().name().to_string(),
        agents,
        instance_key: project.instance_key.clone(),
        grace_period: swarm.shutdown_grace(),
        max_queued_events: swarm.max_queued_events(),
        processes: ProcessPolicy {
            max_live: swarm.max_live_processes(),
            idle_after: swarm.idle_passivation(),
        },
        ingress: ingress_rules(project),
        cli_connection: cli_connection(project),
        connections: connector_connections(project),
    })
}

/// The Connection that runs the base `cli` connector for the running
/// swarm: its rules route what is typed at `gdn run`.
fn cli_connection(project: &Project) -> Option<String> {
    project
        .bundle
        .connections()
        .filter(|connection| connection.swarm().name() == project.swarm_name)
        .find(|connection| connection.connector().spec.entry == "builtin:cli")
        .map(|connection| connection.name().to_string())
}

/// The Connections of the running swarm that run in a ConnectorProcess of
/// their own: every one but `builtin:cli`, which is `gdn run`'s terminal.
fn connector_connections(project: &Project) -> Vec<String> {
    project
        .bundle
        .connections()
        .filter(|connection| connection.swarm().name() == project.swarm_name)
        .filter(|connection| connection.connector().spec.entry != "builtin:cli")
        .map(|connection| connection.name().to_string())
        .collect()
}

/// The ingress rules of every Connection that delivers to the running
/// swarm.
fn ingress_rules(project: &Project) -> Vec<IngressRule> {
    let mut rules = Vec::new();
    for connection in project.bundle.connections() {
        if connection.swarm().name() != project.swarm_name {
            continue;
        }
        for (rule, agent) in connection.rules() {
            let matcher = rule.matcher.clone().unwrap_or_default();
            rules.push(IngressRule {
                connection: connection.name().to_string(),
                event: matcher.event,
                properties: matcher
                    .properties
                    .into_iter()
                    .map(|(key, value)| {
                        let value = match value {
                            serde_json::Value::String(text) => text,
                            other => other.to_string(),
                        };
                        (key, value)
                    })
                    .collect(),
                agent: Some(agent.name().to_string()),
                instance_key: rule.route.instance_key.clone(),
                instance_key_property: rule.route.instance_key_property.clone(),
                instance_key_prefix: rule.route.instance_key_prefix.clone(),
            });
        }
    }
    rules
}

/// Crash counters and backoff deadlines kept in each instance's
/// `metadata.json`, so a restarted orchestrator keeps backing off.
fn crash_ledger(project: &Project) -> CrashLedger {
    let workspace = project.workspace();
    let reader = workspace.clone();
    let store = InstanceStore::new(workspace);
    CrashLedger {
        load: Arc::new(move |key: &RoutingKey| {
            let path = reader
                .instance(&key.agent_name, &key.instance_key)
                .metadata_file();
            match InstanceMetadata::read(&path) {
                Ok(Some(metadata)) => CrashRecord {
                    consecutive_crashes: metadata.consecutive_crashes,
                    backoff_until: metadata
                        .backoff_until
                        .as_deref()
                        .and_then(|text| chrono::DateTime::parse_from_rfc3339(text).ok())
                        .map(SystemTime::from),
                },
                _ => CrashRecord::default(),
            }
        }),
        save: Arc::new(move |key: &RoutingKey, record: CrashRecord| {
            let outcome = store.update_metadata(&key.agent_name, &key.instance_key, |metadata| {
                metadata.consecutive_crashes = record.consecutive_crashes;
                metadata.backoff_until = record.backoff_until.map(|until| {
                    chrono::DateTime::<chrono::Utc>::from(until)
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                });
            });
            // An instance that never started has no folder yet; its
            // counters live in memory until it does.
            if let Err(error) = outcome {
                tracing::debug!(key = %key, code = error.code(), "crash counters not persisted: {error}");
            }
        }),
    }
}

/// A cluster host's crash counters: those of `crashes`, which every host
/// shares (an instance that moves keeps backing off), also written to the
/// instance's `metadata.json` here, for `gdn instance list` on this host.
fn cluster_crash_ledger(project: &Project, crashes: CrashRecords) -> CrashLedger {
    let local = crash_ledger(project);
    let reader = crashes.clone();
    CrashLedger {
        load: Arc::new(move |key: &RoutingKey| {
            let entry = reader.get(&key.agent_name, &key.instance_key);
            CrashRecord {
                consecutive_crashes: entry.consecutive_crashes,
                backoff_until: entry
                    .backoff_until_ms
                    .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
            }
        }),
        save: Arc::new(move |key: &RoutingKey, record: CrashRecord| {
            let backoff_until_ms = record.backoff_until.and_then(|until| {
                until
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .ok()
                    .map(|since| since.as_millis() as u64)
            });
            crashes.put(
                &key.agent_name,
                &key.instance_key,
                CrashEntry {
                    consecutive_crashes: record.consecutive_crashes,
                    backoff_until_ms,
                },
            );
            (local.save)(key, record);
        }),
    }
}

/// One input, one answer. Model text is printed as it streams (providers
/// that stream), and the final answer completes it.
async fn ask(
    handle: &OrchestratorHandle,
    text: String,
    instance_key: Option<String>,
    stop: &mut StopSignals,
) -> Outcome {
    let (deltas, mut streamed_deltas) = tokio::sync::mpsc::unbounded_channel::<String>();
    let printer = tokio::spawn(async move {
        let mut streamed = String::new();
        while let Some(delta) = streamed_deltas.recv().await {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(delta.as_bytes());
            let _ = out.flush();
            streamed.push_str(&delta);
        }
        streamed
    });
    let ingress = Ingress::cli_event(typed_event(text, instance_key), None);
    let answer = tokio::select! {
        answer = handle.ask(ingress, Some(deltas)) => answer,
        stopped = stop.recv() => return stopped,
    };
    let streamed = printer.await.unwrap_or_default();
    match answer {
        Ok(answer) => print_answer(&answer, &streamed),
        Err(error) => {
            if !streamed.is_empty() {
                println!();
            }
            Refused::from(error).print()
        }
    }
}

async fn chat(
    handle: &OrchestratorHandle,
    instance_key: Option<String>,
    stop: &mut StopSignals,
) -> Outcome {
    let mut lines = stdin_lines::spawn(MAX_INPUT_BYTES);
    prompt();
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            stopped = stop.recv() => return stopped,
        };
        match line {
            None => return Outcome::Success,
            Some(Line::Text(text)) if text.trim().is_empty() => {}
            Some(Line::Text(text)) => {
                let outcome = ask(handle, text, instance_key.clone(), stop).await;
                if matches!(outcome, Outcome::Interrupted) || stop.requested {
                    return outcome;
                }
            }
            Some(unusable) => {
                // It says why the line is skipped.
                let _ = line_event(unusable, None);
            }
        }
        prompt();
    }
}

/// Where `gdn run` without `--input` takes its input from.
enum Console {
    /// A person at a terminal: a chat.
    Terminal,
    /// A pipe or a file: one event per line, until its end.
    Lines,
    /// Nothing to read (`/dev/null`, no terminal, `--quiet` on one): the
    /// swarm serves its Connections until it is stopped.
    Idle,
}

/// How `gdn run` without input talks to the user: a chat with
/// `--interactive` or on a terminal, else by what stdin is.
fn console(global: &GlobalArgs, interactive: bool) -> Console {
    use std::os::fd::AsFd;
    if interactive {
        return Console::Terminal;
    }
    use std::os::unix::fs::FileTypeExt;
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return if global.quiet {
            Console::Idle
        } else {
            Console::Terminal
        };
    }
    let kind = stdin
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|file| file.metadata())
        .map(|metadata| metadata.file_type());
    match kind {
        Ok(kind) if kind.is_fifo() || kind.is_socket() || kind.is_file() => Console::Lines,
        _ => Console::Idle,
    }
}

/// The event a line of input is: a JSON object line names its event,
/// text, instance key and properties; any other line is text. `None` for
/// a blank line; `Err` (after printing why) for a line that cannot be
/// used.
fn line_event(line: Line, instance_key: Option<&str>) -> Result<Option<ConnectorEvent>, Outcome> {
    let text = match line {
        Line::Text(text) => text,
        Line::TooLong => {
            eprintln!(
                "error[E_INPUT_TOO_LARGE]: a line of input is larger than the {MAX_INPUT_BYTES}-byte limit (1 MiB); it was skipped"
            );
            eprintln!("   = help: put large documents where a tool can read them");
            return Err(Outcome::Failure);
        }
        Line::NotUtf8 => {
            eprintln!("error[E_INPUT_NOT_UTF8]: a line of input is not UTF-8 text; it was skipped");
            eprintln!("   = help: convert the input to UTF-8");
            return Err(Outcome::Failure);
        }
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Ok(None);
    }
    let object = trimmed
        .starts_with('{')
        .then(|| serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(trimmed).ok())
        .flatten();
    let mut event = match object {
        Some(object) => goondan_connector::payload::event_from_object(&object, CLI_EVENT, None)
            .map_err(|error| {
                eprintln!("error[E_INPUT_INVALID]: a JSON line of input is not an event: {error}; it was skipped");
                eprintln!("   = help: write {{\"text\": \"...\", \"instanceKey\": \"...\"}}, or plain text");
                Outcome::Failure
            })?,
        None => ConnectorEvent::text(CLI_EVENT, text),
    };
    if event.instance_key.is_none() {
        event.instance_key = instance_key.map(str::to_string);
    }
    Ok(Some(event))
}

/// Every line of standard input is an event, queued in order; each answer
/// is printed as its Turn ends. At the end of the input the Turns in
/// flight finish, then this returns (a failure if any line failed).
async fn lines(
    handle: &OrchestratorHandle,
    instance_key: Option<String>,
    json: bool,
    stop: &mut StopSignals,
) -> Outcome {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let mut lines = stdin_lines::spawn(MAX_INPUT_BYTES);
    let mut in_flight = FuturesUnordered::new();
    let mut outcome = Outcome::Success;
    let mut input_ended = false;
    loop {
        if input_ended && in_flight.is_empty() {
            return outcome;
        }
        tokio::select! {
            line = lines.recv(), if !input_ended && in_flight.len() < MAX_LINES_IN_FLIGHT => {
                let Some(line) = line else {
                    input_ended = true;
                    continue;
                };
                let event = match line_event(line, instance_key.as_deref()) {
                    Ok(Some(event)) => event,
                    Ok(None) => continue,
                    Err(failed) => {
                        outcome = failed;
                        continue;
                    }
                };
                let sent_key = event.instance_key.clone();
                match handle.enqueue(Ingress::cli_event(event, None), None).await {
                    Ok(pending) => in_flight.push(async move {
                        (pending.answer().await.map_err(Refused::from), sent_key)
                    }),
                    Err(error) => {
                        outcome = report(Err(error.into()), sent_key.as_deref(), json);
                    }
                }
            }
            Some((answer, sent_key)) = in_flight.next() => {
                let reported = report(answer, sent_key.as_deref(), json);
                if reported != Outcome::Success {
                    outcome = reported;
                }
            }
            stopped = stop.recv() => return stopped,
        }
    }
}

/// Why an input got no answer: the orchestrator's error (here or over
/// the control socket), or the failed Turn's.
#[derive(Debug, Clone)]
pub(crate) struct Refused {
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) suggestion: Option<String>,
}

impl Refused {
    fn print(&self) -> Outcome {
        eprintln!("error[{}]: {}", self.code, self.message);
        if let Some(suggestion) = &self.suggestion {
            eprintln!("   = help: {suggestion}");
        }
        Outcome::of_failure(&self.code)
    }
}

impl From<OrchestratorError> for Refused {
    fn from(error: OrchestratorError) -> Refused {
        Refused {
            code: error.code().to_string(),
            message: error.to_string(),
            suggestion: error.suggestion(),
        }
    }
}

/// Prints what came of one input: the answer text (or one JSON line with
/// `json`), or the error on stderr (in the JSON line with `json`).
/// `sent_key` is the instance key the input asked for, when it named one.
pub(crate) fn report(
    reply: Result<AgentEvent, Refused>,
    sent_key: Option<&str>,
    json: bool,
) -> Outcome {
    let text = reply.as_ref().map_err(Refused::clone).and_then(answer_text);
    if !json {
        return match text {
            Ok(text) => print_text(&text, ""),
            Err(refused) => refused.print(),
        };
    }
    let answer = reply.as_ref().ok();
    let mut line = serde_json::json!({
        "instanceKey": answer.and_then(|answer| answer.instance_key.as_deref()).or(sent_key),
        "traceId": answer.and_then(|answer| answer.trace_id.as_deref()),
    });
    let outcome = match text {
        Ok(text) => {
            line["text"] = text.into();
            Outcome::Success
        }
        Err(refused) => {
            line["error"] = serde_json::json!({
                "code": refused.code,
                "message": refused.message,
                "suggestion": refused.suggestion,
            });
            Outcome::of_failure(&refused.code)
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
    outcome
}

/// Serves until a signal or a control `shutdown`; the caller shuts down.
async fn resident(task: tokio::task::JoinHandle<()>, stop: &mut StopSignals) -> Outcome {
    tokio::select! {
        stopped = stop.recv() => stopped,
        _ = task => Outcome::Success,
    }
}

/// SIGINT and SIGTERM, listened for from the moment this exists, so a
/// signal that comes between two waits is not lost.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    /// Set once either came.
    requested: bool,
}

impl StopSignals {
    fn new() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            requested: false,
        })
    }

    /// Waits for a stop: `Interrupted` after Ctrl-C, `Success` after
    /// SIGTERM (a service manager stopping the swarm is no failure).
    async fn recv(&mut self) -> Outcome {
        let outcome = tokio::select! {
            _ = self.interrupt.recv() => Outcome::Interrupted,
            _ = self.terminate.recv() => Outcome::Success,
        };
        self.requested = true;
        outcome
    }
}

/// The text of an answer, or why the Turn failed.
fn answer_text(answer: &AgentEvent) -> Result<String, Refused> {
    match Answer::from_event(answer).map(|answer| answer.outcome) {
        Some(AnswerOutcome::Failed(failure)) => Err(Refused {
            code: failure.code,
            message: failure.message,
            suggestion: None,
        }),
        Some(AnswerOutcome::Ok { text, .. }) => Ok(text.unwrap_or_default()),
        None => Ok(answer.input.clone().unwrap_or_default()),
    }
}

/// Prints an answer, completing text already streamed to the terminal.
fn print_answer(answer: &AgentEvent, streamed: &str) -> Outcome {
    match answer_text(answer) {
        Ok(text) => print_text(&text, streamed),
        Err(refused) => refused.print(),
    }
}

fn print_text(text: &str, streamed: &str) -> Outcome {
    let mut out = std::io::stdout().lock();
    let _ = if streamed.is_empty() {
        writeln!(out, "{text}")
    } else if streamed.trim_end().ends_with(text.trim_end()) {
        writeln!(out)
    } else {
        // The stream showed earlier steps too; the answer is the last one.
        writeln!(out, "\n{text}")
    };
    let _ = out.flush();
    Outcome::Success
}

fn prompt() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "> ");
    let _ = err.flush();
}

/// Lifts the soft limit on open files to the hard limit. The orchestrator
/// holds two pipes per AgentProcess, so the common default soft limit of
/// 1024 would cap a swarm at a few hundred live instances.
#[cfg(unix)]
fn raise_open_file_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    // macOS reports an unlimited hard limit but refuses a soft limit above
    // OPEN_MAX (10240).
    #[cfg(target_os = "macos")]
    let wanted = hard.min(10_240);
    #[cfg(not(target_os = "macos"))]
    let wanted = hard;
    if soft < wanted && setrlimit(Resource::RLIMIT_NOFILE, wanted, hard).is_err() {
        tracing::warn!(
            "could not raise the open-file limit; large swarms may run out of file descriptors"
        );
    }
}

/// Without `setrlimit` the process keeps the limit it was started with.
#[cfg(not(unix))]
fn raise_open_file_limit() {}

/// Records this orchestrator in `runtime/active/<workspaceId>.json`;
/// returns its path.
fn write_active(
    project: &Project,
    workspace: &WorkspacePaths,
    socket: &Path,
) -> anyhow::Result<PathBuf> {
    let path = workspace.active_file();
    let record = ActiveSwarm {
        pid: std::process::id(),
        bundle_dir: project.bundle.root().to_path_buf(),
        swarm: project.swarm_name.clone(),
        instance_key: project.instance_key.clone(),
        started_at: goondan_types::now_iso(),
        control_socket: socket.to_path_buf(),
    };
    record
        .write(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
