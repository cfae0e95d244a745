//! Child processes that cannot outlive the process that started them, and
//! an environment block other processes cannot read keys from
//! ([`environ`]).
//!
//! A [`Contained`] child leads a process group of its own, so one
//! `killpg` ends it and everything it started in that group. On Linux,
//! when the platform allows unprivileged namespaces, it also runs in its
//! own user, mount and PID namespaces, which catches what a process group
//! cannot: a job that left the group with `setsid` (or a double fork).
//! The plugin hosts run every script entry this way (issue 35).
//!
//! The bash tool's commands share one set of these namespaces per agent
//! instead ([`shared`], issue 37 #2): a helper enters them once, stays
//! as their PID 1 and forks each command, so a call costs a fork rather
//! than a namespace set-up.
//!
//! # The namespaces, process by process
//!
//! ```text
//! agent ── spawns ──▶ P (host PID, leader of the child's process group)
//!                     │ no_new_privs, pdeathsig, unshare(user, mount, PID),
//!                     │ map own uid/gid, make mounts private
//!                     └── forks ──▶ I (PID 1 of the new PID namespace)
//!                                   │ pdeathsig, fresh /proc, a nested
//!                                   │ user + mount namespace (locks /proc)
//!                                   └── forks ──▶ the command (PID 2), execs
//! ```
//!
//! * `unshare(CLONE_NEWPID)` cannot move its caller, only its next child, so
//!   P stays outside and I is the namespace's init. I stays alive as long
//!   as anything in the namespace runs and reaps what the command leaves
//!   behind; when I dies the kernel kills everything in the namespace, even
//!   a job that left the process group with `setsid`.
//! * P is the agent's direct child and the only process whose parent is the
//!   agent, so it carries the `PR_SET_PDEATHSIG` that ties the namespace to
//!   the agent: agent gone → P killed → I (its own pdeathsig) killed → the
//!   namespace ends. A job started with `nohup … &` therefore survives the
//!   command that started it but not the agent.
//! * The command's exit status cannot come from P's exit (P stays while such
//!   a job runs), so I writes the command's raw wait status to a pipe the
//!   agent reads ([`Contained::status`]).
//! * `/proc` is mounted fresh by I, so it lists the namespace's processes
//!   only: nothing inside can read another process's environment or memory
//!   through it. The nested user + mount namespace makes every mount, the
//!   new `/proc` included, "locked": even a command running as uid 0 inside
//!   (when `gdn` runs as root) cannot unmount `/proc` to uncover the host's.
//! * P and I are copies of the agent's memory (they never exec), so both end
//!   non-dumpable: the command sees I as PID 1 but cannot read its memory
//!   or `/proc/1/environ`. They are briefly dumpable while writing their own
//!   `uid_map`, which the kernel otherwise refuses to a non-dumpable process
//!   of a non-root user.
//!
//! The price of P and I never exec'ing: each is a copy-on-write image of
//! the agent, so every page the agent writes while they live is copied
//! once more. For a command that runs seconds that is noise; a plugin host
//! or a detached job that runs for hours keeps up to two stale copies of
//! the pages the agent wrote since alive. Re-exec'ing a tiny waiter would
//! drop them, at the price of shipping one; not done yet.
//!
//! # Without namespaces
//!
//! A platform that refuses them (a container's seccomp policy, disabled
//! unprivileged user namespaces, a masked `/proc`) is remembered for the
//! rest of the process and logged once; every later child gets the process
//! group and a `PR_SET_PDEATHSIG` of SIGKILL only. Then a child that calls
//! `setsid` and is orphaned escapes; the security notes say so.
//!
//! Between `fork` and `exec` only async-signal-safe calls are allowed (the
//! agent has other threads that may hold the allocator's lock), so that code
//! uses raw system calls, stack buffers and `_exit`, and never allocates.
#![warn(missing_docs, unreachable_pub)]
#![allow(unsafe_code)]

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::io;
use std::process::ExitStatus;
use std::sync::OnceLock;

pub mod environ;
pub mod error;
#[cfg(target_os = "linux")]
mod hidden;
pub mod peer;
#[cfg(target_os = "linux")]
pub use hidden::hide_from_children;

/// Hides paths from sandboxed children; there are no namespaces off
/// Linux, so nothing is hidden there.
#[cfg(not(target_os = "linux"))]
pub fn hide_from_children(_paths: impl IntoIterator<Item = std::path::PathBuf>) -> bool {
    false
}
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub mod shared;

/// Why the platform refused the namespaces, once it did; every later
/// child skips them.
static REFUSAL: OnceLock<String> = OnceLock::new();

/// Why the namespaces are not used in this process, once the platform
/// refused them; `None` while they are (or have not been tried).
pub fn refusal() -> Option<&'static str> {
    REFUSAL.get().map(String::as_str)
}

/// Remembers that the platform refused the namespaces and logs it, once
/// per process: one warning is enough to explain every later child.
fn remember_refusal(reason: String) {
    if REFUSAL.set(reason).is_ok() {
        if let Some(reason) = REFUSAL.get() {
            tracing::warn!(
                reason = %reason,
                "child processes (bash commands, plugin hosts) run in a process group only, without the namespace sandbox"
            );
        }
    }
}

/// How a [`Contained`] child is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Containment {
    /// Its own namespaces when the platform allows them (else the process
    /// group only), and its own process group.
    Namespaces,
    /// Its own process group only.
    ProcessGroup,
}

/// A child started by [`Contained::spawn`].
#[derive(Debug)]
pub struct Contained {
    child: tokio::process::Child,
    /// The command's wait status, reported by the namespace's init; `None`
    /// outside the namespaces, where the child itself is the command.
    status_pipe: Option<tokio::net::unix::pipe::Receiver>,
    group: Option<Pid>,
    kill_on_drop: bool,
}

impl Drop for Contained {
    fn drop(&mut self) {
        if self.kill_on_drop {
            self.kill();
        }
    }
}

impl Contained {
    /// Starts the command `build` makes (program, arguments, directory,
    /// environment and pipes set; called a second time for a fresh command
    /// when the platform refuses the namespaces), as the leader of a new
    /// process group that gets SIGKILL when the thread that spawned it
    /// dies. Not killed on drop unless [`Contained::kill_on_drop`] says so.
    pub fn spawn(
        build: impl Fn() -> tokio::process::Command,
        containment: Containment,
    ) -> io::Result<Contained> {
        if containment == Containment::Namespaces && refusal().is_none() {
            if let Some(contained) = spawn_in_namespaces(&mut build())? {
                return Ok(contained);
            }
        }
        let mut command = build();
        command.process_group(0);
        #[cfg(target_os = "linux")]
        {
            let parent = nix::unistd::getpid();
            // SAFETY: the closure makes two async-signal-safe system calls
            // (prctl, getppid) and touches no memory the parent shares.
            unsafe {
                command.pre_exec(move || {
                    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
                    // The parent died between fork and the line above:
                    // nobody would send the signal, so do not start at all.
                    if nix::unistd::getppid() != parent {
                        return Err(io::Error::other("the parent exited during the start"));
                    }
                    Ok(())
                });
            }
        }
        Ok(Contained::new(command.spawn()?, None))
    }

    fn new(
        child: tokio::process::Child,
        status_pipe: Option<tokio::net::unix::pipe::Receiver>,
    ) -> Contained {
        let group = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw);
        Contained {
            child,
            status_pipe,
            group,
            kill_on_drop: false,
        }
    }

    /// Whether dropping this handle kills the process group.
    pub fn kill_on_drop(&mut self, kill: bool) {
        self.kill_on_drop = kill;
    }

    /// The direct child, for its pipes and its id.
    pub fn child_mut(&mut self) -> &mut tokio::process::Child {
        &mut self.child
    }

    /// True when the child runs in its own namespaces.
    pub fn in_namespaces(&self) -> bool {
        self.status_pipe.is_some()
    }

    /// Waits for the command itself to end and gives its wait status.
    /// In the namespaces that is the status the namespace's init
    /// reported, while the direct child may stay for jobs the command
    /// left running; `None` when the status could not be learned.
    pub async fn status(&mut self) -> Option<ExitStatus> {
        if let Some(pipe) = self.status_pipe.as_mut() {
            use std::os::unix::process::ExitStatusExt;
            use tokio::io::AsyncReadExt;
            let mut raw = [0u8; 4];
            if pipe.read_exact(&mut raw).await.is_ok() {
                return Some(ExitStatus::from_raw(i32::from_ne_bytes(raw)));
            }
            // The init died before reporting (the group was killed): the
            // direct child's end is all there is to learn.
        }
        self.child.wait().await.ok()
    }

    /// Kills the whole process group with SIGKILL, and with it the
    /// namespace and everything in it. Harmless when it is gone already.
    pub fn kill(&self) {
        if let Some(group) = self.group {
            // ESRCH (the group is already gone) is the only expected error
            // and means there is nothing left to kill.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }

    /// Waits for the direct child to exit (after [`Contained::kill`], or
    /// when the namespace emptied), reaping it.
    pub async fn reap(&mut self) -> Option<ExitStatus> {
        self.child.wait().await.ok()
    }
}

/// Starts `command` inside the namespaces; `None` when the platform
/// refused them (remembered and logged).
#[cfg(target_os = "linux")]
fn spawn_in_namespaces(command: &mut tokio::process::Command) -> io::Result<Option<Contained>> {
    use std::os::fd::{AsRawFd, OwnedFd};
    let (status_reader, status_writer) = io::pipe()?;
    let status_pipe =
        tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(status_reader))?;
    let status_writer = OwnedFd::from(status_writer);
    let plan = linux::Plan::new(status_writer.as_raw_fd());
    command.process_group(0);
    // SAFETY: the hook only makes async-signal-safe system calls on data
    // prepared before the fork (see the `linux` module).
    unsafe {
        command.pre_exec(move || linux::enter(&plan));
    }
    let spawned = command.spawn();
    // Only P and I may hold the writing end: when I dies without reporting,
    // the read sees end-of-file instead of waiting forever.
    drop(status_writer);
    match spawned {
        Ok(child) => Ok(Some(Contained::new(child, Some(status_pipe)))),
        Err(error) => match linux::Failure::decode(&error) {
            Some(failure) if failure.is_refusal() => {
                remember_refusal(failure.to_string());
                Ok(None)
            }
            Some(failure) => Err(failure.into_io_error()),
            None => Err(error),
        },
    }
}

/// Namespaces are Linux's: elsewhere the first child logs why it runs in
/// a process group only.
#[cfg(not(target_os = "linux"))]
fn spawn_in_namespaces(_command: &mut tokio::process::Command) -> io::Result<Option<Contained>> {
    remember_refusal(format!(
        "namespaces are Linux-only; this is {}",
        std::env::consts::OS
    ));
    Ok(None)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    /// A shell that starts `sleep <seconds>` in a session of its own (out
    /// of the process group), then waits.
    fn escaping_job(seconds: &str) -> impl Fn() -> tokio::process::Command + '_ {
        move || {
            let mut command = tokio::process::Command::new("/bin/sh");
            command
                .arg("-c")
                .arg(format!(
                    "setsid sleep {seconds} </dev/null >/dev/null 2>&1 & exec sleep 600"
                ))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            command
        }
    }

    /// Host pids of live (not zombie) processes whose command line is
    /// `sleep <seconds>`.
    fn sleeping(seconds: &str) -> Vec<i32> {
        let wanted = format!("sleep\0{seconds}\0");
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z');
            if cmdline == wanted.as_bytes() && !zombie {
                found.push(pid);
            }
        }
        found
    }

    async fn wait_for_job(seconds: &str) -> Vec<i32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = sleeping(seconds);
            if !found.is_empty() || Instant::now() > deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Unique per test run, so another run's leftovers are never counted.
    fn unique_seconds(test: u32) -> String {
        format!("{}.{}{}", 500 + test, std::process::id(), test)
    }

    #[tokio::test]
    async fn a_job_that_left_the_group_dies_with_the_namespace() {
        let seconds = unique_seconds(1);
        let mut contained =
            Contained::spawn(escaping_job(&seconds), Containment::Namespaces).unwrap();
        if !contained.in_namespaces() {
            println!("note: namespaces refused here ({:?})", refusal());
            contained.kill();
            return;
        }
        let job = wait_for_job(&seconds).await;
        assert_eq!(job.len(), 1, "the job did not start");
        contained.kill();
        contained.reap().await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !sleeping(&seconds).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            sleeping(&seconds),
            Vec::<i32>::new(),
            "the job outlived its namespace"
        );
    }

    #[tokio::test]
    async fn a_process_group_alone_cannot_hold_a_job_that_left_it() {
        // The documented limit of the fallback: the group dies, the job
        // that called setsid does not.
        let seconds = unique_seconds(2);
        let mut contained =
            Contained::spawn(escaping_job(&seconds), Containment::ProcessGroup).unwrap();
        assert!(!contained.in_namespaces());
        let job = wait_for_job(&seconds).await;
        assert_eq!(job.len(), 1, "the job did not start");
        contained.kill();
        let status = contained.reap().await.unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        assert_eq!(sleeping(&seconds), job, "the escaped job should still run");
        for pid in job {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }

    #[tokio::test]
    async fn the_status_is_the_commands_own_in_the_namespaces() {
        let build = || {
            let mut command = tokio::process::Command::new("/bin/sh");
            command.args(["-c", "exit 7"]).stdin(Stdio::null());
            command
        };
        for containment in [Containment::Namespaces, Containment::ProcessGroup] {
            let mut contained = Contained::spawn(build, containment).unwrap();
            let status = contained.status().await.unwrap();
            assert_eq!(status.code(), Some(7), "{containment:?}");
            contained.kill();
            contained.reap().await;
        }
    }
}
