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
    let mut contained =
        Contained::spawn(|| command(spec, &environment), spec.isolation.containment())
            .map_err(spawn_error)?;
    let mut stdout_pipe = contained.child_mut().stdout.take();
    let mut stderr_pipe = contained.child_mut().stderr.take();
    let mut stdout = CapturedStream::default();
    let mut stderr = CapturedStream::default();

    // A run dropped before it finished (the agent shuts down mid-call)
    // takes the command's group with it.
    contained.kill_on_drop(true);
    let finished = tokio::time::timeout(spec.timeout, async {
        let (_, _, status) = tokio::join!(
            drain(stdout_pipe.as_mut(), &mut stdout, spec.max_output_bytes),
            drain(stderr_pipe.as_mut(), &mut stderr, spec.max_output_bytes),
            contained.status(),
        );
        status
    })
    .await;

    let (status, timed_out) = match finished {
        Ok(status) => {
            // A job the command detached keeps running (until the agent
            // stops, in the namespaces).
            contained.kill_on_drop(false);
            (status, false)
        }
        Err(_elapsed) => {
            contained.kill();
            let _ = tokio::time::timeout(DRAIN_AFTER_KILL, async {
                tokio::join!(
                    drain(stdout_pipe.as_mut(), &mut stdout, spec.max_output_bytes),
                    drain(stderr_pipe.as_mut(), &mut stderr, spec.max_output_bytes),
                )
            })
            .await;
            let status = tokio::time::timeout(DRAIN_AFTER_KILL, contained.reap())
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

    /// A server the model starts with `nohup … &` keeps running after the
    /// call (a later call can use it), and dies with the agent: the thread
    /// that spawned the command ending is the agent stopping, as far as
    /// `PR_SET_PDEATHSIG` is concerned.
    #[test]
    fn a_detached_job_outlives_its_call_but_not_the_agent() {
        let marker = "30.0103";
        let (after_call, sandboxed) = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let command = format!("nohup sleep {marker} >/dev/null 2>&1 &");
                let outcome = run(&shell(&command, 5000, 1000)).await.unwrap();
                assert_eq!(outcome.exit_code, Some(0));
                assert!(!outcome.timed_out);
                tokio::time::sleep(Duration::from_millis(100)).await;
                (
                    running_with(marker).len(),
                    goondan_sandbox::refusal().is_none(),
                )
            })
        })
        .join()
        .unwrap();
        assert_eq!(after_call, 1, "the detached job did not survive its call");
        if !sandboxed {
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
