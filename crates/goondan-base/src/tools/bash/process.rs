//! Running one child process in its own process group with a deadline and
//! capped output.
//!
//! The child becomes the leader of a new process group, so everything it
//! starts (pipelines, `&` jobs) can be killed with one `killpg`. The group
//! is killed with SIGKILL when the deadline passes and when the future is
//! dropped before the child finished (the agent shuts down mid-call). A
//! command the model ran has no cleanup worth waiting for, and one signal
//! keeps the timeout path and the drop path the same.
//!
//! A run that finishes on its own leaves the group alone: a job the command
//! detached on purpose (`nohup server &` with its output redirected) keeps
//! running, in the sandbox until the agent stops (see the `sandbox`
//! module). One that still holds our pipes open keeps the run going until
//! the deadline, which then kills it.
//!
//! What the child sees (its environment, its namespaces) is the `sandbox`
//! module's business; this one spawns, waits and captures.
//!
//! Output beyond the cap is read and thrown away rather than left in the
//! pipe, so a chatty child never blocks on a full pipe.

use super::sandbox::Isolation;
use crate::error::BuiltinToolError;
use crate::tools::capped_text::decode_prefix;
use goondan_sandbox::Contained;
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt};

/// How long pipes are still drained after the group was killed; only a
/// process that escaped the group (`setsid`) can hold them longer.
const DRAIN_AFTER_KILL: Duration = Duration::from_millis(200);

/// What to run and within which limits.
#[derive(Debug, Clone)]
pub(crate) struct ProcessSpec {
    /// The program (`/bin/sh`, a script shell).
    pub(crate) program: String,
    /// Its arguments.
    pub(crate) args: Vec<String>,
    /// The working directory.
    pub(crate) cwd: PathBuf,
    /// Variables the call declares, on top of `PATH`, `HOME` and `LANG`
    /// (see `goondan_runtime::tool::environment::allow_listed_environment`); nothing else is inherited.
    pub(crate) env: Vec<(String, String)>,
    /// Namespaces, or the cleared environment only.
    pub(crate) isolation: Isolation,
    /// The deadline, from spawn.
    pub(crate) timeout: Duration,
    /// Bytes kept per stream.
    pub(crate) max_output_bytes: usize,
}

/// One stream's captured bytes.
#[derive(Debug, Default)]
pub(crate) struct CapturedStream {
    /// At most the cap, cut at a byte boundary.
    pub(crate) bytes: Vec<u8>,
    /// More arrived than was kept.
    pub(crate) truncated: bool,
}

impl CapturedStream {
    /// The bytes as text (see [`decode_prefix`]).
    pub(crate) fn text(&self) -> String {
        decode_prefix(&self.bytes)
    }
}

/// How a run ended.
#[derive(Debug)]
pub(crate) struct ProcessOutcome {
    /// Standard output.
    pub(crate) stdout: CapturedStream,
    /// Standard error.
    pub(crate) stderr: CapturedStream,
    /// The exit code, when the process exited rather than being signalled.
    pub(crate) exit_code: Option<i32>,
    /// The signal name (`SIGKILL`), when a signal ended it.
    pub(crate) signal: Option<String>,
    /// The deadline passed and the group was killed.
    pub(crate) timed_out: bool,
    /// Wall time from spawn to the end of the run.
    pub(crate) duration: Duration,
}

/// Runs `spec` to completion or to its deadline.
pub(crate) async fn run(spec: &ProcessSpec) -> Result<ProcessOutcome, BuiltinToolError> {
    let started = Instant::now();
    let environment = goondan_runtime::tool::environment::allow_listed_environment(&[], &spec.env);
    let spawn_error = |source| BuiltinToolError::Spawn {
        program: spec.program.clone(),
        source,
    };
    let (mut running, mut stdout_pipe, mut stderr_pipe) =
        spawn(spec, &environment).await.map_err(spawn_error)?;
    let mut stdout = CapturedStream::default();
    let mut stderr = CapturedStream::default();

    // A run dropped before it finished (the agent shuts down mid-call)
    // takes the command's group with it.
    running.kill_on_drop(true);
    let finished = tokio::time::timeout(spec.timeout, async {
        let (_, _, status) = tokio::join!(
            drain(stdout_pipe.as_mut(), &mut stdout, spec.max_output_bytes),
            drain(stderr_pipe.as_mut(), &mut stderr, spec.max_output_bytes),
            running.status(),
        );
        status
    })
    .await;

    let (status, timed_out) = match finished {
        Ok(status) => {
            // A job the command detached keeps running (until the agent
            // stops, in the namespaces).
            running.kill_on_drop(false);
            (status, false)
        }
        Err(_elapsed) => {
            running.kill();
            let _ = tokio::time::timeout(DRAIN_AFTER_KILL, async {
                tokio::join!(
                    drain(stdout_pipe.as_mut(), &mut stdout, spec.max_output_bytes),
                    drain(stderr_pipe.as_mut(), &mut stderr, spec.max_output_bytes),
                )
            })
            .await;
            let status = tokio::time::timeout(DRAIN_AFTER_KILL, running.reap())
                .await
                .ok()
                .flatten();
            (status, true)
        }
    };

    Ok(ProcessOutcome {
        stdout,
        stderr,
        exit_code: status.and_then(|status| status.code()),
        signal: status.and_then(signal_name),
        timed_out,
        duration: started.elapsed(),
    })
}

/// One of the command's output pipes.
type Pipe = Box<dyn AsyncRead + Unpin + Send>;

/// A started command: in the agent's shared namespaces, or in a process
/// group of its own (the sandbox off or refused).
enum Running {
    #[cfg(target_os = "linux")]
    Shared(goondan_sandbox::shared::SharedChild),
    Own(Contained),
}

impl Running {
    fn kill_on_drop(&mut self, kill: bool) {
        match self {
            #[cfg(target_os = "linux")]
            Running::Shared(child) => child.kill_on_drop(kill),
            Running::Own(contained) => contained.kill_on_drop(kill),
        }
    }

    async fn status(&mut self) -> Option<ExitStatus> {
        match self {
            #[cfg(target_os = "linux")]
            Running::Shared(child) => child.status().await,
            Running::Own(contained) => contained.status().await,
        }
    }

    fn kill(&self) {
        match self {
            #[cfg(target_os = "linux")]
            Running::Shared(child) => child.kill(),
            Running::Own(contained) => contained.kill(),
        }
    }

    /// The status once the killed command is gone.
    async fn reap(&mut self) -> Option<ExitStatus> {
        match self {
            #[cfg(target_os = "linux")]
            Running::Shared(child) => child.status().await,
            Running::Own(contained) => contained.reap().await,
        }
    }
}

/// Starts the command for `spec`: in the agent's shared namespaces when
/// its isolation asks for them and the platform allows them, else in a
/// process group of its own.
async fn spawn(
    spec: &ProcessSpec,
    environment: &[(OsString, OsString)],
) -> std::io::Result<(Running, Option<Pipe>, Option<Pipe>)> {
    #[cfg(target_os = "linux")]
    if spec.isolation == Isolation::Namespaces {
        if let Some(shared) = spawn_shared(spec, environment).await? {
            return Ok(shared);
        }
    }
    let mut contained =
        Contained::spawn(|| command(spec, environment), spec.isolation.containment())?;
    let stdout = contained
        .child_mut()
        .stdout
        .take()
        .map(|pipe| Box::new(pipe) as Pipe);
    let stderr = contained
        .child_mut()
        .stderr
        .take()
        .map(|pipe| Box::new(pipe) as Pipe);
    Ok((Running::Own(contained), stdout, stderr))
}

/// The command in the agent's shared namespaces, with `/dev/null` for
/// its stdin and a pipe for each output; `None` when the platform
/// refuses the namespaces.
#[cfg(target_os = "linux")]
async fn spawn_shared(
    spec: &ProcessSpec,
    environment: &[(OsString, OsString)],
) -> std::io::Result<Option<(Running, Option<Pipe>, Option<Pipe>)>> {
    use goondan_sandbox::shared::{SharedChild, SharedCommand, SharedStdio};
    use std::os::fd::OwnedFd;
    use tokio::net::unix::pipe::Receiver;
    let command = SharedCommand {
        program: spec.program.clone().into(),
        args: spec.args.iter().map(OsString::from).collect(),
        cwd: spec.cwd.clone(),
        env: environment.to_vec(),
    };
    let (stdout_read, stdout_write) = std::io::pipe()?;
    let (stderr_read, stderr_write) = std::io::pipe()?;
    let stdio = SharedStdio {
        stdin: OwnedFd::from(std::fs::File::open("/dev/null")?),
        stdout: OwnedFd::from(stdout_write),
        stderr: OwnedFd::from(stderr_write),
    };
    let Some(child) = SharedChild::spawn(&command, stdio).await? else {
        return Ok(None);
    };
    let stdout = Receiver::from_owned_fd(OwnedFd::from(stdout_read))?;
    let stderr = Receiver::from_owned_fd(OwnedFd::from(stderr_read))?;
    Ok(Some((
        Running::Shared(child),
        Some(Box::new(stdout)),
        Some(Box::new(stderr)),
    )))
}

/// The command for `spec`: its own process group, the cleared
/// `environment`, no stdin, piped output.
fn command(spec: &ProcessSpec, environment: &[(OsString, OsString)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&spec.program);
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(environment.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn signal_name(status: ExitStatus) -> Option<String> {
    let number = status.signal()?;
    Some(match Signal::try_from(number) {
        Ok(signal) => signal.as_str().to_string(),
        Err(_) => format!("SIG{number}"),
    })
}

async fn drain<R: AsyncRead + Unpin>(pipe: Option<&mut R>, into: &mut CapturedStream, cap: usize) {
    let Some(pipe) = pipe else {
        return;
    };
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                let room = cap.saturating_sub(into.bytes.len());
                if read > room {
                    into.truncated = true;
                }
                into.bytes.extend_from_slice(&chunk[..read.min(room)]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(command: &str, timeout_ms: u64, cap: usize) -> ProcessSpec {
        ProcessSpec {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), command.into()],
            cwd: std::env::temp_dir(),
            env: vec![("GOONDAN_TEST_VAR".into(), "from-env".into())],
            isolation: Isolation::Namespaces,
            timeout: Duration::from_millis(timeout_ms),
            max_output_bytes: cap,
        }
    }

    /// The host PIDs of live processes with `marker` among their arguments.
    ///
    /// In the sandbox `$!` is a PID of the command's namespace, which means
    /// nothing to the test, so a background job is found by a unique
    /// argument instead (`sleep 30.0101`). A zombie counts as dead: it was
    /// killed, only its reaping is left, and in a container nobody may
    /// reap it.
    fn running_with(marker: &str) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|stat| {
                        stat.rsplit_once(')')
                            .map(|(_, rest)| rest.trim_start().starts_with('Z'))
                    })
                    .unwrap_or(true);
                !zombie
                    && cmdline
                        .split(|byte| *byte == 0)
                        .any(|argument| argument == marker.as_bytes())
            })
            .collect()
    }

    async fn wait_gone(marker: &str) -> bool {
        for _ in 0..100 {
            if running_with(marker).is_empty() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    #[tokio::test]
    async fn captures_output_exit_code_and_env() {
        let outcome = run(&shell(
            "echo out; echo err >&2; echo $GOONDAN_TEST_VAR; exit 3",
            5000,
            1000,
        ))
        .await
        .unwrap();
        assert_eq!(outcome.stdout.text(), "out\nfrom-env\n");
        assert_eq!(outcome.stderr.text(), "err\n");
        assert_eq!(outcome.exit_code, Some(3));
        assert_eq!(outcome.signal, None);
        assert!(!outcome.timed_out);
    }

    #[tokio::test]
    async fn a_command_killed_by_a_signal_reports_the_signal() {
        for isolation in [Isolation::Namespaces, Isolation::EnvironmentOnly] {
            let mut spec = shell("echo before; kill -TERM $$; echo after", 5000, 1000);
            spec.isolation = isolation;
            let outcome = run(&spec).await.unwrap();
            assert_eq!(outcome.stdout.text(), "before\n", "{isolation:?}");
            assert_eq!(outcome.exit_code, None, "{isolation:?}");
            assert_eq!(outcome.signal.as_deref(), Some("SIGTERM"), "{isolation:?}");
            assert!(!outcome.timed_out, "{isolation:?}");
        }
    }

    #[tokio::test]
    async fn huge_output_is_capped_and_flagged_without_blocking() {
        let outcome = run(&shell(
            "head -c 5000000 /dev/zero | tr '\\0' x",
            10_000,
            1024,
        ))
        .await
        .unwrap();
        assert_eq!(outcome.stdout.bytes.len(), 1024);
        assert!(outcome.stdout.truncated);
        assert!(!outcome.stderr.truncated);
        assert_eq!(outcome.exit_code, Some(0));
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        for (isolation, marker) in [
            (Isolation::Namespaces, "30.0101"),
            (Isolation::EnvironmentOnly, "30.0111"),
        ] {
            let command = format!("sleep {marker} & echo started; wait");
            let mut spec = shell(&command, 300, 1000);
            spec.isolation = isolation;
            let outcome = run(&spec).await.unwrap();
            assert!(outcome.timed_out, "{isolation:?}");
            assert_eq!(outcome.signal.as_deref(), Some("SIGKILL"), "{isolation:?}");
            assert_eq!(outcome.stdout.text(), "started\n", "{isolation:?}");
            assert!(
                wait_gone(marker).await,
                "background job survived the timeout ({isolation:?})"
            );
        }
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_group() {
        for (isolation, marker) in [
            (Isolation::Namespaces, "30.0102"),
            (Isolation::EnvironmentOnly, "30.0112"),
        ] {
            let command = format!("sleep {marker} & wait");
            let mut spec = shell(&command, 60_000, 1000);
            spec.isolation = isolation;
            let run_future = run(&spec);
            let _ = tokio::time::timeout(Duration::from_millis(300), run_future).await;
            assert!(
                !running_with(marker).is_empty() || wait_gone(marker).await,
                "the job never started ({isolation:?})"
            );
            assert!(
                wait_gone(marker).await,
                "background job survived the drop ({isolation:?})"
            );
        }
    }

    /// Set in a child copy of this test binary that plays the agent: run
    /// the named test's agent half rather than return.
    const AGENT_COPY_VARIABLE: &str = "GOONDAN_BASH_AGENT_COPY";

    /// Starts `test` in a child copy of this binary, as the agent (see
    /// [`AGENT_COPY_VARIABLE`]); its output is piped.
    fn agent_copy(test: &str) -> std::process::Child {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(AGENT_COPY_VARIABLE, "1")
            .env_remove(super::super::sandbox::SANDBOX_VARIABLE)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn is_agent_copy() -> bool {
        std::env::var_os(AGENT_COPY_VARIABLE).is_some()
    }

    fn assert_agent_passed(output: std::process::Output) -> String {
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the agent copy failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    }

    /// A server the model starts with `nohup … &` keeps running after the
    /// call (a later call can use it), and dies with the agent: the agent
    /// is a child copy of this binary that runs the call and exits.
    #[test]
    fn a_detached_job_outlives_its_call_but_not_the_agent() {
        let marker = "30.0103";
        let stdout = assert_agent_passed(
            agent_copy("tools::bash::process::tests::detached_job_agent")
                .wait_with_output()
                .unwrap(),
        );
        if stdout.contains("namespaces refused") {
            // Without namespaces nothing ties the job to the agent.
            println!("note: namespaces refused here; only the first half ran");
            for pid in running_with(marker) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            }
            return;
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert!(
            runtime.block_on(wait_gone(marker)),
            "the detached job outlived the agent"
        );
    }

    /// The agent half of the test above.
    #[tokio::test]
    async fn detached_job_agent() {
        if !is_agent_copy() {
            return;
        }
        let marker = "30.0103";
        let command = format!("nohup sleep {marker} >/dev/null 2>&1 &");
        let outcome = run(&shell(&command, 5000, 1000)).await.unwrap();
        assert_eq!(outcome.exit_code, Some(0));
        assert!(!outcome.timed_out);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            running_with(marker).len(),
            1,
            "the detached job did not survive its call"
        );
        if goondan_sandbox::refusal().is_some() {
            println!("namespaces refused");
        }
    }

    /// Issue 37 #2: a job that double-forked and left its session is
    /// gone once the agent is killed with SIGKILL (the helper, PID 1 of
    /// the agent's namespace, dies with it, and the kernel ends the rest).
    #[test]
    fn a_double_forked_job_is_gone_after_the_agent_is_killed_with_sigkill() {
        let marker = "30.0104";
        let agent = agent_copy("tools::bash::process::tests::double_fork_agent");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let started = runtime.block_on(async {
            for _ in 0..250 {
                if !running_with(marker).is_empty() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        });
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(agent.id() as i32),
            Signal::SIGKILL,
        );
        let output = agent.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(started, "the job never started:\n{stdout}");
        if stdout.contains("namespaces refused") {
            println!("note: namespaces refused here; nothing ties the job to the agent");
            for pid in running_with(marker) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
            }
            return;
        }
        assert!(
            runtime.block_on(wait_gone(marker)),
            "the double-forked job outlived the agent's SIGKILL"
        );
    }

    /// The agent half of the test above: starts the job, then waits to
    /// be killed.
    #[tokio::test]
    async fn double_fork_agent() {
        if !is_agent_copy() {
            return;
        }
        let marker = "30.0104";
        let command =
            format!("( setsid sh -c 'sleep {marker}' </dev/null >/dev/null 2>&1 & ) ; true");
        let outcome = run(&shell(&command, 5000, 1000)).await.unwrap();
        assert_eq!(outcome.exit_code, Some(0));
        if goondan_sandbox::refusal().is_some() {
            println!("namespaces refused");
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
    }

    /// Issue 37 #2: the agent starts one sandbox helper, whatever the
    /// number of commands: after three calls its only child process is
    /// the helper's P, and all three ran in one PID namespace.
    #[test]
    fn the_helper_is_started_once() {
        assert_agent_passed(
            agent_copy("tools::bash::process::tests::helper_count_agent")
                .wait_with_output()
                .unwrap(),
        );
    }

    /// The agent half of the test above.
    #[tokio::test]
    async fn helper_count_agent() {
        if !is_agent_copy() {
            return;
        }
        let mut namespaces = Vec::new();
        for _ in 0..3 {
            let outcome = run(&shell("readlink /proc/self/ns/pid", 5000, 1000))
                .await
                .unwrap();
            assert_eq!(outcome.exit_code, Some(0), "{}", outcome.stderr.text());
            namespaces.push(outcome.stdout.text());
        }
        if goondan_sandbox::refusal().is_some() {
            println!("note: namespaces refused here");
            return;
        }
        assert!(
            namespaces
                .iter()
                .all(|namespace| namespace == &namespaces[0]),
            "{namespaces:?}"
        );
        let me = std::process::id().to_string();
        let children: Vec<i32> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|stat| {
                        let (_, rest) = stat.rsplit_once(')')?;
                        rest.split_whitespace().nth(1).map(|ppid| ppid == me)
                    })
                    .unwrap_or(false)
            })
            .collect();
        assert_eq!(children.len(), 1, "the agent's children: {children:?}");
    }

    /// Issue 37 #2: two commands of one agent share its PID namespace
    /// (a server one starts is there for the next), but not what one of
    /// them does to its environment.
    #[tokio::test]
    async fn two_commands_share_the_namespace_but_not_their_environment() {
        let first = run(&shell(
            "export GOONDAN_SHARED=leaked; cd /; readlink /proc/self/ns/pid",
            5000,
            1000,
        ))
        .await
        .unwrap();
        let second = run(&shell(
            "echo \"[$GOONDAN_SHARED]\"; readlink /proc/self/ns/pid",
            5000,
            1000,
        ))
        .await
        .unwrap();
        let first_namespace = first.stdout.text();
        let second_text = second.stdout.text();
        let (variable, second_namespace) = second_text.split_once('\n').unwrap();
        assert_eq!(variable, "[]");
        if goondan_sandbox::refusal().is_none() {
            assert_eq!(first_namespace, second_namespace);
        }
    }

    /// Issue 37 #2: a command its deadline killed leaves no process, a
    /// pipeline and a nested shell of its group included.
    #[tokio::test]
    async fn a_command_killed_by_timeout_leaves_no_process() {
        let (marker, nested) = ("30.0105", "30.0106");
        let command =
            format!("sleep {marker} | cat & sh -c 'sleep {nested}; true' & echo started; wait");
        let outcome = run(&shell(&command, 300, 1000)).await.unwrap();
        assert!(outcome.timed_out);
        assert_eq!(outcome.stdout.text(), "started\n");
        assert!(wait_gone(marker).await, "the pipeline survived the timeout");
        assert!(
            wait_gone(nested).await,
            "the nested shell survived the timeout"
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        for isolation in [Isolation::Namespaces, Isolation::EnvironmentOnly] {
            let mut spec = shell("true", 1000, 10);
            spec.program = "/nonexistent/shell".into();
            spec.isolation = isolation;
            let error = run(&spec).await.unwrap_err();
            assert_eq!(error.code(), "E_PROCESS_SPAWN", "{isolation:?}");
            assert!(
                error.to_string().contains("No such file"),
                "{isolation:?}: {error}"
            );
        }
    }
}
