//! `gdn run`: starts the orchestrator of the selected Swarm in the
//! foreground (or, with `--detach`, in the background), or attaches to the
//! one already serving that instance key.
//!
//! * `--input TEXT` / `--input-file PATH`: one event for the entry agent;
//!   prints the answer, drains every agent and exits (0, or 1 when the
//!   Turn failed).
//! * no input on a terminal: an interactive chat, one event per line.
//! * no input and no terminal (a detached daemon): stays resident until
//!   SIGINT, SIGTERM or `shutdown` on the control socket.

use crate::cli::{GlobalArgs, RunArgs};
use crate::exit::Outcome;
use crate::project::{self, Project};
use anyhow::Context;
use goondan_ipc::protocol::{Answer, AnswerOutcome};
use goondan_ipc::RoutingKey;
use goondan_orchestrator::control::{self, ControlRequest, ControlResponse};
use goondan_orchestrator::orchestrator::{CrashLedger, CrashRecord};
use goondan_orchestrator::{
    Ingress, IngressRule, LocalSpawner, Orchestrator, OrchestratorConfig, OrchestratorHandle,
    SpawnRequest, SwarmInfo,
};
use goondan_store::{ActiveSwarm, InstanceMetadata, InstanceStore};
use goondan_types::AgentEvent;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::AsyncBufReadExt;

/// Runs `gdn run`.
pub(crate) fn run(global: &GlobalArgs, args: &RunArgs) -> anyhow::Result<Outcome> {
    let project = match project::load(global, args.swarm.as_deref(), args.env_file.clone())? {
        Ok(project) => project,
        Err(outcome) => return Ok(outcome),
    };
    let input = match (&args.input, &args.input_file) {
        (Some(text), _) => Some(text.clone()),
        (None, Some(path)) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --input-file {}", path.display()))?,
        ),
        (None, None) => None,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        let socket = project.control_socket();
        if control::call(&socket, &ControlRequest::Status)
            .await
            .is_ok()
        {
            return attach(&socket, input).await;
        }
        if args.detach {
            return detach(global, args, &project, &socket, input).await;
        }
        foreground(global, args, project, socket, input).await
    })
}

/// Sends input to an orchestrator that is already running.
async fn attach(socket: &Path, input: Option<String>) -> anyhow::Result<Outcome> {
    eprintln!("attached to the orchestrator at {}", socket.display());
    match input {
        Some(text) => ask_over_socket(socket, text).await,
        None => {
            let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
            let mut outcome = Outcome::Success;
            prompt();
            while let Some(line) = lines.next_line().await? {
                if !line.trim().is_empty() {
                    outcome = ask_over_socket(socket, line).await?;
                }
                prompt();
            }
            Ok(outcome)
        }
    }
}

async fn ask_over_socket(socket: &Path, input: String) -> anyhow::Result<Outcome> {
    let response = control::call(socket, &ControlRequest::Request { agent: None, input }).await?;
    match response {
        ControlResponse::Answer { response } => Ok(print_answer(&response, "")),
        ControlResponse::Failed {
            code,
            message,
            suggestion,
        } => {
            eprintln!("error[{code}]: {message}");
            if let Some(suggestion) = suggestion {
                eprintln!("   = help: {suggestion}");
            }
            Ok(Outcome::Failure)
        }
        other => anyhow::bail!("the orchestrator answered a request with {other:?}"),
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
    let log_path =
        project
            .state_root
            .runtime_log_file(&project.instance_key, "orchestrator", "stderr");
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let log = std::fs::OpenOptions::new()
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        if control::call(socket, &ControlRequest::Status).await.is_ok() {
            println!(
                "started orchestrator (pid {}) for Swarm/{} (instanceKey {}); logs: {}",
                child.id(),
                project.swarm_name,
                project.instance_key,
                log_path.display()
            );
            return match input {
                Some(text) => ask_over_socket(socket, text).await,
                None => Ok(Outcome::Success),
            };
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!(
        "error[E_ORCHESTRATOR_START]: the background orchestrator did not answer within 5 s\n   = help: read {}",
        log_path.display()
    );
    Ok(Outcome::Failure)
}

async fn foreground(
    global: &GlobalArgs,
    args: &RunArgs,
    project: Project,
    socket: PathBuf,
    input: Option<String>,
) -> anyhow::Result<Outcome> {
    raise_open_file_limit();
    let swarm = project
        .bundle
        .swarm(&project.swarm_name)
        .context("the selected swarm vanished")?;
    let agents: Vec<String> = swarm
        .agents()
        .map(|agent| agent.name().to_string())
        .collect();
    let info = SwarmInfo {
        swarm_name: project.swarm_name.clone(),
        entry_agent: swarm.entry_agent().name().to_string(),
        agents,
        instance_key: project.instance_key.clone(),
        grace_period: swarm.shutdown_grace(),
        max_queued_events: swarm.max_queued_events(),
        ingress: ingress_rules(&project),
        cli_connection: cli_connection(&project),
    };
    let mut agent_args: Vec<String> = vec![
        "agent".into(),
        "--bundle-dir".into(),
        project.bundle.root().display().to_string(),
        "--swarm".into(),
        project.swarm_name.clone(),
        "--state-root".into(),
        project.state_root.path().display().to_string(),
    ];
    if let Some(env_file) = &args.env_file {
        agent_args.push("--env-file".into());
        agent_args.push(std::path::absolute(env_file)?.display().to_string());
    }
    if let Some(record) = &args.record {
        agent_args.push("--record".into());
        agent_args.push(std::path::absolute(record)?.display().to_string());
    }
    let log_root = project.state_root.clone();
    let swarm_key = project.instance_key.clone();
    let log_file: goondan_orchestrator::LogFileFor = Arc::new(move |request: &SpawnRequest| {
        let process = match request {
            SpawnRequest::Agent { key } => format!("{}-{}", key.agent_name, key.instance_key),
            SpawnRequest::Connector { connection } => format!("connection-{connection}"),
        };
        log_root.runtime_log_file(&swarm_key, &process, "stderr")
    });
    let spawner = LocalSpawner {
        program: std::env::current_exe().context("locating the gdn binary")?,
        args: agent_args,
        connector_args: None,
        env: Vec::new(),
        log_file: Some(log_file),
    };
    let store = InstanceStore::new(project.state_root.workspace(&project.instance_key));
    let reset_instance: goondan_orchestrator::orchestrator::ResetInstance =
        Arc::new(move |key: &RoutingKey| {
            if let Err(error) = store.reset_messages(&key.agent_name, &key.instance_key) {
                tracing::warn!(key = %key, code = error.code(), "could not clear history: {error}");
            }
        });
    let (handle, task) = Orchestrator::start(OrchestratorConfig {
        swarm: info,
        spawner: Arc::new(spawner),
        transport: None,
        reconcile_interval: Duration::from_secs(5),
        reset_instance: Some(reset_instance),
        crash_ledger: Some(crash_ledger(&project)),
    });
    let control_server = tokio::spawn(control::serve(socket.clone(), handle.clone()));
    let active = write_active(&project, &socket)?;

    let outcome = match input {
        Some(text) => {
            let outcome = ask(&handle, text).await;
            handle.shutdown().await.ok();
            outcome
        }
        None if std::io::stdin().is_terminal() && !global.quiet => {
            eprintln!(
                "Swarm/{} is running (instanceKey {}); type a message, Ctrl-D to quit",
                project.swarm_name, project.instance_key
            );
            let outcome = chat(&handle).await;
            handle.shutdown().await.ok();
            outcome
        }
        None => resident(&handle, task).await,
    };
    control_server.abort();
    let _ = std::fs::remove_file(&socket);
    ActiveSwarm::remove_if_owned_by(&active, std::process::id());
    Ok(outcome)
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
    let workspace = project.state_root.workspace(&project.instance_key);
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

/// One input, one answer. Model text is printed as it streams (providers
/// that stream), and the final answer completes it.
async fn ask(handle: &OrchestratorHandle, text: String) -> Outcome {
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
    let answer = tokio::select! {
        answer = handle.ask(Ingress::cli(text, None), Some(deltas)) => answer,
        _ = tokio::signal::ctrl_c() => return Outcome::Interrupted,
    };
    let streamed = printer.await.unwrap_or_default();
    match answer {
        Ok(answer) => print_answer(&answer, &streamed),
        Err(error) => {
            if !streamed.is_empty() {
                println!();
            }
            eprintln!("error[{}]: {error}", error.code());
            if let Some(suggestion) = error.suggestion() {
                eprintln!("   = help: {suggestion}");
            }
            Outcome::Failure
        }
    }
}

async fn chat(handle: &OrchestratorHandle) -> Outcome {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    prompt();
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line,
            _ = tokio::signal::ctrl_c() => return Outcome::Interrupted,
        };
        match line {
            Ok(Some(line)) if line.trim().is_empty() => {}
            Ok(Some(line)) => {
                if ask(handle, line).await == Outcome::Interrupted {
                    return Outcome::Interrupted;
                }
            }
            Ok(None) | Err(_) => return Outcome::Success,
        }
        prompt();
    }
}

/// Serves until a signal or a control `shutdown`.
async fn resident(handle: &OrchestratorHandle, task: tokio::task::JoinHandle<()>) -> Outcome {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                eprintln!("error: cannot listen for SIGTERM: {error}");
                return Outcome::Failure;
            }
        };
    let mut task = task;
    let outcome = tokio::select! {
        _ = tokio::signal::ctrl_c() => Outcome::Interrupted,
        _ = terminate.recv() => Outcome::Success,
        _ = &mut task => return Outcome::Success,
    };
    handle.shutdown().await.ok();
    outcome
}

/// Prints an answer, completing text already streamed to the terminal.
fn print_answer(answer: &AgentEvent, streamed: &str) -> Outcome {
    let text = match Answer::from_event(answer).map(|answer| answer.outcome) {
        Some(AnswerOutcome::Failed(failure)) => {
            eprintln!("error[{}]: {}", failure.code, failure.message);
            return Outcome::Failure;
        }
        Some(AnswerOutcome::Ok { text, .. }) => text.unwrap_or_default(),
        None => answer.input.clone().unwrap_or_default(),
    };
    let text = text.as_str();
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

/// Records this orchestrator in `runtime/active.json`; returns its path.
fn write_active(project: &Project, socket: &Path) -> anyhow::Result<PathBuf> {
    let path = project.state_root.active_file();
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
