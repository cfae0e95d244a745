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

use super::chat_approvals::{self, ChatApprovals};
use crate::answers::{answer_text, print_answer, report, Refused};
use crate::cli::{GlobalArgs, RunArgs};
use crate::exit::Outcome;
use crate::project;
use crate::stdin_lines::{self, Line};
use anyhow::Context;
use goondan_client::{ClientError, ControlSocket};
use goondan_host::cluster::ClusterMode;
use goondan_host::lock::{self, Claim, ATTACH_WAIT};
use goondan_host::{HostMode, HostSettings, Project, RunningSwarm};
use goondan_orchestrator::control::{ControlRequest, ControlResponse};
use goondan_orchestrator::ingress::CLI_EVENT;
use goondan_orchestrator::{Ingress, OrchestratorHandle};
use goondan_types::{AgentEvent, ConnectorEvent, ProcessStatus};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest input `gdn run` sends, in bytes (`--input` or
/// `--input-file`).
const MAX_INPUT_BYTES: usize = 1024 * 1024;
/// How many lines of piped input may wait for their answers at once.
const MAX_LINES_IN_FLIGHT: usize = 256;
/// How often a chat looks for an approval its Turn waits on.
const APPROVAL_POLL: Duration = Duration::from_millis(250);
/// A second Ctrl-C within this long of the first quits the chat.
const AGAIN_TO_QUIT: Duration = Duration::from_secs(1);
/// What a chat says after a Ctrl-C at its prompt.
const QUIT_HINT: &str = "(Ctrl-C again within a second, or Ctrl-D, quits the chat)";
/// What a chat says after a Ctrl-C cancelled its running Turn.
const CANCELLING_HINT: &str = "cancelling the Turn (Ctrl-C again within a second quits the chat)";
/// What a chat attached to a running swarm says after a Ctrl-C dropped
/// its request, which cancels the Turn.
const CANCELLED_HINT: &str = "cancelled the Turn (Ctrl-C again within a second quits the chat)";
/// How long an interrupted `gdn run --input` waits for its cancelled Turn
/// to be over before it exits.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

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
        crate::render::error(error.code(), &error, Some(error.suggestion()));
        crate::render::after_error("nothing was started");
        return Ok(Outcome::ConfigError);
    }
    let mode = match &args.cluster {
        None => HostMode::Single,
        Some(urls) => match ClusterMode::new(&project, urls, args.host_id.as_deref()) {
            Ok(mode) => HostMode::Cluster(mode),
            Err(error) => return Ok(crate::render::cluster_error(&error)),
        },
    };
    let runtime = crate::runtime::current_thread()?;
    if let (HostMode::Cluster(mode), Some(text)) = (&mode, &input) {
        // One input through the cluster: no orchestrator here.
        let info = goondan_host::project::swarm_info(&project)?;
        let ingress =
            Ingress::cli_event(typed_event(text.clone(), args.instance_key.clone()), None);
        return Ok(runtime.block_on(super::cluster::ask(mode, &info, ingress, global)));
    }
    let workspace = project.workspace();
    // The file a detached orchestrator's stderr goes to, and `gdn logs
    // --process orchestrator` reads.
    crate::logging::log_to_file(&workspace.runtime_log_file("orchestrator", "stderr"));
    let format = project::format(global);
    let socket = match lock::control_socket(&workspace) {
        Ok(socket) => socket,
        Err(error) => return Ok(crate::render::host_error(&error, format)),
    };
    runtime.block_on(async {
        loop {
            let claim = match lock::claim(&workspace, &socket).await {
                Ok(Claim::Running) => {
                    if args.watch {
                        eprintln!("warning: this bundle's orchestrator is already running; --watch applies only when `gdn run --watch` starts it");
                    }
                    let Some(text) = &input else {
                        return attach_chat(global, &socket, args.instance_key.clone()).await;
                    };
                    if !global.quiet {
                        eprintln!("attached to the orchestrator at {}", socket.display());
                    }
                    let event = typed_event(text.clone(), args.instance_key.clone());
                    let mut stop = StopSignals::new()?;
                    // Interrupted, the request is dropped, which cancels
                    // its Turn (recorded so, never run again).
                    let delivery = tokio::select! {
                        delivery = ask_over_socket(&socket, None, event, true) => delivery?,
                        stopped = stop.recv() => {
                            end_line();
                            return Ok(stopped);
                        }
                    };
                    match delivery {
                        Delivery::Answered(reply) => {
                            return Ok(report(reply.map(|answer| *answer), None, global.json))
                        }
                        // It closed between `Status` and the request: claim
                        // again, and maybe start one ourselves.
                        Delivery::NotDelivered => continue,
                    }
                }
                Err(error) => return Ok(crate::render::host_error(&error, format)),
                Ok(won) => won,
            };
            if args.detach {
                // The background process takes the lock itself.
                drop(claim);
                return detach(global, args, &project, &socket, input).await;
            }
            return foreground(global, args, project, socket, input, claim, mode).await;
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
    crate::render::error(code, &message, Some(help));
    crate::render::after_error("nothing was started");
    Outcome::BadArguments
}

/// Input for an orchestrator that is already running: a chat on a
/// terminal, else every line of the pipe, one after another.
async fn attach_chat(
    global: &GlobalArgs,
    socket: &Path,
    instance_key: Option<String>,
) -> anyhow::Result<Outcome> {
    if !global.quiet {
        eprintln!("attached to the orchestrator at {}", socket.display());
    }
    let terminal = std::io::stdin().is_terminal();
    let mut stop = StopSignals::new()?;
    let mut lines = stdin_lines::spawn(MAX_INPUT_BYTES);
    let mut outcome = Outcome::Success;
    if terminal {
        prompt();
    }
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            stopped = stop.recv() => {
                if !stop.chat_goes_on(stopped, QUIT_HINT) {
                    end_line();
                    return Ok(stopped);
                }
                if terminal {
                    prompt();
                }
                continue;
            }
        };
        let Some(line) = line else { break };
        let event = match line_event(line, instance_key.as_deref()) {
            Ok(Some(event)) => event,
            Ok(None) => continue,
            Err(failed) => {
                outcome = failed;
                continue;
            }
        };
        let sent_key = event.instance_key.clone();
        // Ctrl-C drops the request, which cancels its Turn; the chat stays
        // (a second Ctrl-C within a second quits).
        let delivery = tokio::select! {
            delivery = ask_over_socket(socket, None, event, true) => delivery?,
            stopped = stop.recv() => {
                if !stop.chat_goes_on(stopped, CANCELLED_HINT) {
                    end_line();
                    return Ok(stopped);
                }
                if terminal {
                    prompt();
                }
                continue;
            }
        };
        let answer = match delivery {
            Delivery::Answered(answer) => answer.map(|answer| *answer),
            Delivery::NotDelivered => {
                crate::render::error(
                    "E_ORCHESTRATOR_NOT_RUNNING",
                    &"the orchestrator stopped",
                    None,
                );
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
    if terminal {
        end_line();
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
    match ControlSocket::new(socket)
        .ask(agent, event, cancel_on_disconnect)
        .await
    {
        Ok(reply) => Ok(Delivery::Answered(reply)),
        Err(error) if error.is_unreachable() => Ok(Delivery::NotDelivered),
        // It took the request and went away before answering (stopped,
        // killed): a coded answer, not a bare IO error.
        Err(ClientError::Stopped) => Ok(Delivery::Answered(Err(ClientError::Stopped
            .to_body()
            .with_suggestion(
                "the input may still be answered when the swarm starts again (it is in its instance's inbox); `gdn run --detach` starts it",
            )))),
        Err(error) => Err(error.into()),
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
        Err(error) => Err(match error.downcast::<ClientError>() {
            Ok(error) => error.to_body(),
            Err(other) => Refused {
                code: "E_CONTROL_PROTOCOL".into(),
                message: format!("{other:#}"),
                suggestion: None,
            },
        }),
    }
}

/// How long `gdn run --detach` waits for every Connection's process to
/// become ready or refuse to start before it reports.
const CONNECTIONS_SETTLE: Duration = Duration::from_secs(5);

/// Prints a warning per Connection whose ConnectorProcess refused to start,
/// so a detached swarm with a Connection down is not reported as simply
/// "started" (the exit code stays 0: the agents run). A Connection its
/// bundle refused stays down until the bundle changes or `gdn restart`;
/// any other is retried with the crash backoff, and the warning says
/// which. Waits at most [`CONNECTIONS_SETTLE`]; an orchestrator that
/// cannot say is not reported on.
async fn warn_failed_connections(socket: &Path) {
    let deadline = tokio::time::Instant::now() + CONNECTIONS_SETTLE;
    loop {
        let Ok(ControlResponse::Connections { connections }) = ControlSocket::new(socket)
            .call(&ControlRequest::Connections)
            .await
        else {
            return;
        };
        let ready = |status: ProcessStatus| {
            matches!(status, ProcessStatus::Idle | ProcessStatus::Processing)
        };
        // A refusal is settled once its process's end was seen: then it
        // is either kept down or counted as a crash to retry.
        let settled = connections.iter().all(|connection| {
            ready(connection.status)
                || (connection.last_error.is_some()
                    && (connection.refused_by_config || connection.consecutive_crashes > 0))
        });
        if settled || tokio::time::Instant::now() >= deadline {
            for connection in connections {
                let Some(error) = connection.last_error.filter(|_| !ready(connection.status))
                else {
                    continue;
                };
                let meanwhile = if connection.refused_by_config {
                    "it stays down until then"
                } else {
                    "meanwhile it is retried with a backoff"
                };
                let help = format!(
                    "{}, then `gdn restart`; {meanwhile}",
                    error
                        .suggestion
                        .as_deref()
                        .unwrap_or("fix the Connection in goondan.yaml")
                );
                crate::render::warning(
                    &error.code,
                    &format_args!(
                        "Connection/{} did not start: {}",
                        connection.connection, error.message
                    ),
                    Some(&help),
                );
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
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
    // What the child writes from here on is its own; shown if it dies.
    let log_start = std::fs::metadata(&log_path).map_or(0, |metadata| metadata.len());
    let mut child = command
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
        Some(_) => ATTACH_WAIT + goondan_host::cluster::JOIN_DEADLINE,
        None => ATTACH_WAIT,
    };
    let deadline = tokio::time::Instant::now() + wait;
    let starting = args
        .cluster
        .as_ref()
        .and_then(|_| crate::progress::Progress::start(global, "joining the cluster"));
    while tokio::time::Instant::now() < deadline {
        // A child that exited will never answer: say why at once (a
        // refused cluster layout, a bundle broken since validation)
        // rather than waiting out the deadline.
        if let Ok(Some(status)) = child.try_wait() {
            return Ok(background_exited(&log_path, log_start, status));
        }
        if let Ok(ControlResponse::Status { pid, identity, .. }) = ControlSocket::new(socket)
            .call(&ControlRequest::Status)
            .await
        {
            if identity.workspace_id.as_deref() == Some(workspace.workspace_id()) {
                drop(starting);
                if global.json {
                    let started = serde_json::json!({
                        "started": {
                            "pid": pid,
                            "swarm": project.swarm_name,
                            "instanceKey": project.instance_key,
                            "log": log_path,
                        }
                    });
                    println!("{started}");
                } else if !global.quiet {
                    println!(
                        "started orchestrator (pid {pid}) for Swarm/{} (instanceKey {}); logs: {}",
                        project.swarm_name,
                        project.instance_key,
                        log_path.display()
                    );
                }
                warn_failed_connections(socket).await;
                let Some(text) = input else {
                    return Ok(Outcome::Success);
                };
                let event = typed_event(text, args.instance_key.clone());
                return match ask_over_socket(socket, None, event, false).await? {
                    Delivery::Answered(reply) => {
                        Ok(report(reply.map(|answer| *answer), None, global.json))
                    }
                    Delivery::NotDelivered => Ok(not_delivered()),
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    crate::render::error(
        "E_ORCHESTRATOR_START",
        &format_args!(
            "the background orchestrator did not answer within {} s",
            wait.as_secs()
        ),
        Some(&format!("read {}", log_path.display())),
    );
    Ok(Outcome::Failure)
}

/// The background orchestrator exited before it answered: what it wrote
/// to its log since it started (its `error[…]` lines), and an outcome
/// from its exit code.
fn background_exited(log_path: &Path, log_start: u64, status: std::process::ExitStatus) -> Outcome {
    use std::io::Seek;
    let mut said = String::new();
    if let Ok(mut log) = std::fs::File::open(log_path) {
        if log.seek(std::io::SeekFrom::Start(log_start)).is_ok() {
            let _ = log.read_to_string(&mut said);
        }
    }
    eprint!("{said}");
    crate::render::error(
        "E_ORCHESTRATOR_START",
        &format_args!("the background orchestrator exited ({status}) before it answered"),
        Some(&format!("its log: {}", log_path.display())),
    );
    match status.code() {
        Some(3) => Outcome::ConfigError,
        Some(4) => Outcome::ValidationFailed,
        _ => Outcome::Failure,
    }
}

fn not_delivered() -> Outcome {
    crate::render::error(
        "E_ORCHESTRATOR_NOT_RUNNING",
        &"the orchestrator stopped before it took the input",
        Some("run the command again"),
    );
    Outcome::Failure
}

/// Runs the orchestrator in this process, holding the workspace's start
/// lock (`claim`) until it has stopped, and talks to it from this
/// console.
async fn foreground(
    global: &GlobalArgs,
    args: &RunArgs,
    project: Project,
    socket: PathBuf,
    input: Option<String>,
    claim: Claim,
    mode: HostMode,
) -> anyhow::Result<Outcome> {
    // Listened for before anything starts, so a stop during start-up is a
    // graceful one too.
    let mut stop = match StopSignals::new() {
        Ok(stop) => stop,
        Err(error) => {
            crate::render::uncoded_error(&format!("cannot listen for SIGINT and SIGTERM: {error}"));
            return Ok(Outcome::Failure);
        }
    };
    let format = project::format(global);
    let settings = HostSettings {
        config: global.config.clone().unwrap_or_else(|| PathBuf::from(".")),
        env_file: args
            .env_file
            .as_deref()
            .map(std::path::absolute)
            .transpose()?,
        record: args
            .record
            .as_deref()
            .map(std::path::absolute)
            .transpose()?,
        use_model: None,
        replay: None,
        watch: args.watch,
        mode,
        program: std::env::current_exe()?,
        install_packages: super::package::installer(global),
        notices: crate::render::notices(format, global.quiet),
    };
    // Joining a cluster may wait out a leader election.
    let joining = matches!(settings.mode, HostMode::Cluster(_))
        .then(|| crate::progress::Progress::start(global, "joining the cluster"))
        .flatten();
    let started = goondan_host::start(project, settings, claim, socket).await;
    drop(joining);
    let mut swarm = match started {
        Ok(swarm) => swarm,
        Err(error) => return Ok(crate::render::host_error(&error, format)),
    };
    if let Some(member) = swarm.membership() {
        eprintln!(
            "host {} joined the cluster at {} for Swarm/{} (workspace {}, bundle {})",
            member.host_id,
            member.urls,
            swarm.project().swarm_name,
            member.workspace_id,
            goondan_cluster::bundle::short_digest(&member.digest)
        );
    }
    let instance_key = args.instance_key.clone();
    let handle = swarm.handle().clone();
    let shown = Shown::new(global, swarm.project().workspace());
    let (outcome, signalled) = match (input, swarm.takes_console_input()) {
        // A cluster host serves its shards; its input comes through the
        // cluster.
        (_, false) => (resident(&mut swarm, &mut stop).await, true),
        (Some(text), true) => {
            // The entry agent starts while the input is made durable,
            // rather than after.
            swarm.warm_entry(instance_key.as_deref()).await;
            (
                ask(&handle, text, instance_key, &mut stop, None, &shown).await,
                false,
            )
        }
        (None, true) => match console(global, args.interactive) {
            Console::Terminal => {
                swarm.warm_entry(instance_key.as_deref()).await;
                let project = swarm.project();
                // Named as its bundle names it: `package/swarm`.
                let name = match project.bundle.package() {
                    Some(package) => format!("{}/{}", package.name(), project.swarm_name),
                    None => format!("Swarm/{}", project.swarm_name),
                };
                eprintln!(
                    "{name} is running (instanceKey {}); type a message, Ctrl-D to quit",
                    project.instance_key
                );
                let approvals = ChatApprovals::new(project.workspace());
                (
                    chat(&handle, instance_key, &mut stop, approvals, &shown).await,
                    false,
                )
            }
            Console::Lines => {
                swarm.warm_entry(instance_key.as_deref()).await;
                (
                    lines(&handle, instance_key, global.json, &mut stop).await,
                    false,
                )
            }
            Console::Idle => (resident(&mut swarm, &mut stop).await, true),
        },
    };
    swarm.stop(signalled).await;
    Ok(outcome)
}

/// How the console shows a Turn: one JSON object per answer (`--json`),
/// or text with its activity on a terminal.
struct Shown {
    json: bool,
    /// The workspace whose activity is shown, and whether in color;
    /// `None` when nothing is shown ([`crate::activity::wanted`]).
    activity: Option<(goondan_store::WorkspacePaths, bool)>,
}

impl Shown {
    fn new(global: &GlobalArgs, workspace: goondan_store::WorkspacePaths) -> Shown {
        Shown {
            json: global.json,
            activity: crate::activity::wanted(global)
                .then(|| (workspace, crate::progress::colored(global))),
        }
    }
}

/// One input, one answer. Model text is printed as it streams (providers
/// that stream; not with `--json`, which prints one object per answer),
/// and the final answer completes it; on a terminal the Turn's activity
/// is shown meanwhile. In a chat, an approval the Turn waits on is shown
/// and the next typed line decides it.
async fn ask(
    handle: &OrchestratorHandle,
    text: String,
    instance_key: Option<String>,
    stop: &mut StopSignals,
    mut chat: Option<(&mut ChatApprovals, &mut tokio::sync::mpsc::Receiver<Line>)>,
    shown: &Shown,
) -> Outcome {
    let activity = shown
        .activity
        .clone()
        .map(|(workspace, colored)| crate::activity::Activity::start(workspace, colored));
    let gate = activity.as_ref().map(crate::activity::Activity::gate);
    let (deltas, mut streamed_deltas) = tokio::sync::mpsc::unbounded_channel::<String>();
    let deltas = (!shown.json).then_some(deltas);
    let printer = tokio::spawn(async move {
        let mut streamed = String::new();
        while let Some(delta) = streamed_deltas.recv().await {
            if let Some(gate) = &gate {
                gate.before_text(&delta).await;
            }
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(delta.as_bytes());
            let _ = out.flush();
            streamed.push_str(&delta);
        }
        streamed
    });
    let sent_key = instance_key.clone();
    let ingress = Ingress::cli_event(typed_event(text, instance_key), None);
    let pending = match handle.enqueue(ingress, deltas).await {
        Ok(pending) => pending,
        Err(error) => {
            drop(activity);
            return report(Err(error.to_body()), sent_key.as_deref(), shown.json);
        }
    };
    let event_id = pending.event_id().to_string();
    let answer = pending.answer();
    tokio::pin!(answer);
    let mut look = tokio::time::interval(APPROVAL_POLL);
    let mut asking: Option<goondan_types::ApprovalRequest> = None;
    // Ctrl-C cancelled this Turn.
    let mut cancelled = false;
    let answer = loop {
        tokio::select! {
            answer = &mut answer => break answer,
            stopped = stop.recv() => {
                if stopped != Outcome::Interrupted {
                    drop(activity);
                    end_line();
                    return stopped;
                }
                // Ctrl-C stops this Turn, recorded as cancelled, so the
                // next start does not run it again, whether the chat goes
                // on or quits; a one-shot `--input` leaves once the Turn
                // is over.
                if !cancelled {
                    cancelled = true;
                    if let Err(error) = handle.cancel(event_id.clone()).await {
                        crate::answers::print_refusal(&error.to_body());
                    }
                }
                if chat.is_none() || !stop.chat_goes_on(stopped, CANCELLING_HINT) {
                    let _ = tokio::time::timeout(CANCEL_WAIT, &mut answer).await;
                    drop(activity);
                    end_line();
                    return Outcome::Interrupted;
                }
            }
            _ = look.tick(), if chat.is_some() && asking.is_none() => {
                if let Some((approvals, _)) = chat.as_mut() {
                    asking = approvals.next(&event_id);
                    if let Some(request) = &asking {
                        chat_approvals::show(request);
                    }
                }
            }
            line = async { chat.as_mut().expect("guarded").1.recv().await }, if asking.is_some() => {
                let Some(request) = asking.take() else { continue };
                let Some(Line::Text(typed)) = line else {
                    // Stdin ended: the request stays for `gdn approve`.
                    chat = None;
                    continue;
                };
                let key = goondan_ipc::RoutingKey::new(request.agent.clone(), request.instance_key.clone());
                let decision = chat_approvals::decision(&request, &typed);
                let verdict = decision.verdict;
                match handle.decide(key, decision).await {
                    Ok(()) => eprintln!("  {}", match verdict {
                        goondan_types::Verdict::Approve => "approved",
                        goondan_types::Verdict::Deny => "denied",
                    }),
                    Err(error) => {
                        crate::answers::print_refusal(&error.to_body());
                    }
                }
            }
        }
    };
    drop(activity);
    let streamed = printer.await.unwrap_or_default();
    if shown.json {
        return report(
            answer.map_err(|error| error.to_body()),
            sent_key.as_deref(),
            true,
        );
    }
    match answer {
        Ok(answer) => print_answer(&answer, &streamed),
        Err(error) => {
            if !streamed.is_empty() {
                println!();
            }
            crate::answers::print_refusal(&error.to_body())
        }
    }
}

async fn chat(
    handle: &OrchestratorHandle,
    instance_key: Option<String>,
    stop: &mut StopSignals,
    mut approvals: ChatApprovals,
    shown: &Shown,
) -> Outcome {
    let mut lines = stdin_lines::spawn(MAX_INPUT_BYTES);
    prompt();
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            stopped = stop.recv() => {
                if !stop.chat_goes_on(stopped, QUIT_HINT) {
                    end_line();
                    return stopped;
                }
                prompt();
                continue;
            }
        };
        match line {
            None => {
                end_line();
                return Outcome::Success;
            }
            Some(Line::Text(text)) if text.trim().is_empty() => {}
            Some(Line::Text(text)) => {
                let outcome = ask(
                    handle,
                    text,
                    instance_key.clone(),
                    stop,
                    Some((&mut approvals, &mut lines)),
                    shown,
                )
                .await;
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
            crate::render::error(
                "E_INPUT_TOO_LARGE",
                &format_args!("a line of input is larger than the {MAX_INPUT_BYTES}-byte limit (1 MiB); it was skipped"),
                Some("put large documents where a tool can read them"),
            );
            return Err(Outcome::Failure);
        }
        Line::NotUtf8 => {
            crate::render::error(
                "E_INPUT_NOT_UTF8",
                &"a line of input is not UTF-8 text; it was skipped",
                Some("convert the input to UTF-8"),
            );
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
                crate::render::error(
                    "E_INPUT_INVALID",
                    &format_args!("a JSON line of input is not an event: {error}; it was skipped"),
                    Some(r#"write {"text": "...", "instanceKey": "..."}, or plain text"#),
                );
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
                        (pending.answer().await.map_err(|error| error.to_body()), sent_key)
                    }),
                    Err(error) => {
                        outcome = report(Err(error.to_body()), sent_key.as_deref(), json);
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

/// Serves until a signal or a control `shutdown`; the caller stops the
/// swarm.
async fn resident(swarm: &mut RunningSwarm, stop: &mut StopSignals) -> Outcome {
    tokio::select! {
        stopped = stop.recv() => stopped,
        () = swarm.stopped() => Outcome::Success,
    }
}

/// SIGINT and SIGTERM, listened for from the moment this exists, so a
/// signal that comes between two waits is not lost.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    /// Set once either came (and not taken back by [`StopSignals::chat_goes_on`]).
    requested: bool,
    /// When the Ctrl-C before the last came, and the last.
    interrupts: (Option<std::time::Instant>, Option<std::time::Instant>),
}

impl StopSignals {
    fn new() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            requested: false,
            interrupts: (None, None),
        })
    }

    /// Waits for a stop: `Interrupted` after Ctrl-C, `Success` after
    /// SIGTERM (a service manager stopping the swarm is no failure).
    async fn recv(&mut self) -> Outcome {
        let outcome = tokio::select! {
            _ = self.interrupt.recv() => {
                self.interrupts = (self.interrupts.1, Some(std::time::Instant::now()));
                Outcome::Interrupted
            }
            _ = self.terminate.recv() => Outcome::Success,
        };
        self.requested = true;
        outcome
    }

    /// After `stopped`: true when a chat goes on, a lone Ctrl-C, taken
    /// back after saying `hint`; false when it ends (SIGTERM, or a second
    /// Ctrl-C within [`AGAIN_TO_QUIT`]).
    fn chat_goes_on(&mut self, stopped: Outcome, hint: &str) -> bool {
        if stopped != Outcome::Interrupted || self.twice_in_a_row() {
            return false;
        }
        // It stopped at most a Turn, not the chat.
        self.requested = false;
        eprintln!();
        eprintln!("{hint}");
        true
    }

    /// Whether the last Ctrl-C came within [`AGAIN_TO_QUIT`] of the one
    /// before: a person who means to quit.
    fn twice_in_a_row(&self) -> bool {
        match self.interrupts {
            (Some(previous), Some(last)) => last.duration_since(previous) < AGAIN_TO_QUIT,
            _ => false,
        }
    }
}

/// Ends the prompt's line (after Ctrl-C or Ctrl-D), so what follows,
/// the shell's prompt included, starts on a line of its own.
fn end_line() {
    if std::io::stderr().is_terminal() {
        eprintln!();
    }
}

fn prompt() {
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "> ");
    let _ = err.flush();
}
