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
//! running. One that still holds our pipes open keeps the run going until
//! the deadline, which then kills it.
//!
//! Output beyond the cap is read and thrown away rather than left in the
//! pipe, so a chatty child never blocks on a full pipe.

use crate::error::BuiltinToolError;
use crate::tools::capped_text::decode_prefix;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
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
    /// Variables set on top of the inherited environment.
    pub(crate) env: Vec<(String, String)>,
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

/// Kills the process group when dropped while armed.
struct ProcessGroupGuard {
    pgid: Option<Pid>,
}

impl ProcessGroupGuard {
    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            // ESRCH (the group is already gone) is the only expected error
            // and means there is nothing left to kill.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }

    fn disarm(&mut self) {
        self.pgid = None;
    }
}

impl Drop for ProcessGroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The model providers' key variables, removed from every command's
/// inherited environment.
pub(crate) const PROVIDER_KEY_VARIABLES: [&str; 3] = [
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GOOGLE_GENERATIVE_AI_API_KEY",
];

/// Runs `spec` to completion or to its deadline.
pub(crate) async fn run(spec: &ProcessSpec) -> Result<ProcessOutcome, BuiltinToolError> {
    let started = Instant::now();
    let mut command = tokio::process::Command::new(&spec.program);
    // The agent's own model keys are not the command's business: a
    // command the model wrote could print them back into the conversation.
    // A call that needs one passes it explicitly in `env`.
    for key in PROVIDER_KEY_VARIABLES {
        command.env_remove(key);
    }
    command
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .envs(
            spec.env
                .iter()
                .map(|(key, value)| (key.as_str(), value.as_str())),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = command.spawn().map_err(|source| BuiltinToolError::Spawn {
        program: spec.program.clone(),
        source,
    })?;
    let mut guard = ProcessGroupGuard {
        pgid: child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw),
    };
    let mut stdout_pipe = child.stdout.take();
    let mut stderr_pipe = child.stderr.take();
    let mut stdout = CapturedStream::default();
    let mut stderr = CapturedStream::default();

    let finished = tokio::time::timeout(spec.timeout, async {
        let (_, _, status) = tokio::join!(
            drain(stdout_pipe.as_mut(), &mut stdout, spec.max_output_bytes),
            drain(stderr_pipe.as_mut(), &mut stderr, spec.max_output_bytes),
            child.wait(),
        );
        status
    })
    .await;

    let (status, timed_out) = match finished {
        Ok(status) => {
            guard.disarm();
            (status.ok(), false)
        }
        Err(_elapsed) => {
            guard.kill();
            let _ = tokio::time::timeout(DRAIN_AFTER_KILL, async {
                tokio::join!(
                    drain(stdout_pipe.as_mut(), &mut stdout, spec.max_output_bytes),
                    drain(stderr_pipe.as_mut(), &mut stderr, spec.max_output_bytes),
                )
            })
            .await;
            let status = tokio::time::timeout(DRAIN_AFTER_KILL, child.wait())
                .await
                .ok()
                .and_then(Result::ok);
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
            timeout: Duration::from_millis(timeout_ms),
            max_output_bytes: cap,
        }
    }

    /// A zombie counts as dead: it was killed, only its reaping is left,
    /// and in a container nobody may reap it.
    fn alive(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    async fn wait_dead(pid: i32) -> bool {
        for _ in 0..100 {
            if !alive(pid) {
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
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let command = format!(
            "sleep 30 & echo $! > {}; echo started; wait",
            pid_file.display()
        );
        let outcome = run(&shell(&command, 300, 1000)).await.unwrap();
        assert!(outcome.timed_out);
        assert_eq!(outcome.signal.as_deref(), Some("SIGKILL"));
        assert_eq!(outcome.stdout.text(), "started\n");
        let grandchild: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            wait_dead(grandchild).await,
            "background job survived the timeout"
        );
    }

    #[tokio::test]
    async fn dropping_the_future_kills_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let command = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let spec = shell(&command, 60_000, 1000);
        let run_future = run(&spec);
        let _ = tokio::time::timeout(Duration::from_millis(300), run_future).await;
        let grandchild: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            wait_dead(grandchild).await,
            "background job survived the drop"
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        let mut spec = shell("true", 1000, 10);
        spec.program = "/nonexistent/shell".into();
        let error = run(&spec).await.unwrap_err();
        assert_eq!(error.code(), "E_PROCESS_SPAWN");
    }
}
