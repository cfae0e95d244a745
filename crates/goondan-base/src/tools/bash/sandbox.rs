//! What a `bash` command may see: the environment it gets and, on Linux,
//! the namespaces it runs in (issue 16 #1).
//!
//! The cleared environment itself is built by
//! `goondan_runtime::tool::environment`, shared with the plugin hosts.
//! This module owns the choice between namespaces and the environment alone ([`Isolation`]), the
//! process-wide memory of a platform that refused namespaces, and the code
//! that runs between `fork` and `exec` to build the sandbox. Deadlines,
//! pipes and the process group stay with the `process` module.
//!
//! # The sandbox, process by process
//!
//! ```text
//! agent ── spawns ──▶ P (host PID, leader of the command's process group)
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
//!   call that started it but not the agent.
//! * The command's exit status cannot come from P's exit (P stays while such
//!   a job runs), so I writes the command's raw wait status to a pipe the
//!   agent reads ([`Sandboxed::status`]).
//! * `/proc` is mounted fresh by I, so it lists the namespace's processes
//!   only. The nested user + mount namespace makes every mount, the new
//!   `/proc` included, "locked": even a command running as uid 0 inside
//!   (when `gdn` runs as root) cannot unmount `/proc` to uncover the host's.
//! * P and I are copies of the agent's memory (they never exec), so both end
//!   non-dumpable: the command sees I as PID 1 but cannot read its memory
//!   or `/proc/1/environ`. They are briefly dumpable while writing their own
//!   `uid_map`, which the kernel otherwise refuses to a non-dumpable process
//!   of a non-root user.
//!
//! The price of P and I never exec'ing: each is a copy-on-write image of
//! the agent, so every page the agent writes while they live is copied
//! once more. For a command that runs seconds that is noise; a detached job
//! that runs for hours keeps up to two stale copies of the agent's heap
//! alive. Re-exec'ing a tiny waiter would drop them, at the price of
//! shipping one; not done yet.
//!
//! Between `fork` and `exec` only async-signal-safe calls are allowed (the
//! agent has other threads that may hold the allocator's lock), so that code
//! uses raw system calls, stack buffers and `_exit`, and never allocates.
#![allow(unsafe_code)]

use std::io;
use std::sync::OnceLock;

/// The variable that turns the namespaces off (`off`); the cleared
/// environment applies either way.
pub(crate) const SANDBOX_VARIABLE: &str = "GOONDAN_BASH_SANDBOX";

/// How much of the machine a command is kept from seeing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Isolation {
    /// The cleared environment, and on Linux the namespaces when the
    /// platform allows them.
    Namespaces,
    /// The cleared environment only.
    EnvironmentOnly,
}

impl Isolation {
    /// [`Isolation::EnvironmentOnly`] when `GOONDAN_BASH_SANDBOX=off`,
    /// else [`Isolation::Namespaces`]. Read per call: it is one lookup.
    pub(crate) fn from_env() -> Self {
        match std::env::var_os(SANDBOX_VARIABLE) {
            Some(value) if value.eq_ignore_ascii_case("off") => Isolation::EnvironmentOnly,
            _ => Isolation::Namespaces,
        }
    }
}

/// Why the platform refused the namespaces, once it did; every later
/// command skips them.
static REFUSAL: OnceLock<String> = OnceLock::new();

/// Whether to try the namespaces for a command with `isolation`.
pub(crate) fn wanted(isolation: Isolation) -> bool {
    isolation == Isolation::Namespaces && REFUSAL.get().is_none()
}

/// Remembers that the platform refused the namespaces and logs it, once
/// per process: one warning is enough to explain every later command.
fn remember_refusal(reason: String) {
    if REFUSAL.set(reason).is_ok() {
        if let Some(reason) = REFUSAL.get() {
            tracing::warn!(
                reason = %reason,
                "bash commands run without the namespace sandbox, with the cleared environment only"
            );
        }
    }
}

/// What a sandboxed spawn hands the `process` module besides the child.
#[derive(Debug)]
pub(crate) struct Sandboxed {
    /// Gives the command's raw wait status when it ends (see
    /// [`Sandboxed::status`]).
    status_pipe: tokio::net::unix::pipe::Receiver,
}

impl Sandboxed {
    /// The command's wait status, as the namespace's init reported it;
    /// `None` when the init died first (the group was killed).
    pub(crate) async fn status(&mut self) -> Option<std::process::ExitStatus> {
        use std::os::unix::process::ExitStatusExt;
        use tokio::io::AsyncReadExt;
        let mut raw = [0u8; 4];
        self.status_pipe.read_exact(&mut raw).await.ok()?;
        Some(std::process::ExitStatus::from_raw(i32::from_ne_bytes(raw)))
    }
}

/// What became of an attempt to spawn inside the namespaces.
#[derive(Debug)]
pub(crate) enum SpawnAttempt {
    /// The command runs in the sandbox (boxed: a `Child` is large and this
    /// is the one variant that carries one).
    Sandboxed(Box<tokio::process::Child>, Sandboxed),
    /// The platform refused the namespaces (remembered and logged): spawn
    /// the command without them, from a fresh `Command` (this one carries
    /// the sandbox's hook).
    Refused,
    /// Spawning failed for a reason that is not the sandbox's (a missing
    /// program, no processes left).
    Failed(io::Error),
}

/// Spawns `command` (already configured with its program, arguments,
/// directory, environment, pipes and process group) inside the namespaces.
#[cfg(target_os = "linux")]
pub(crate) fn spawn(command: &mut tokio::process::Command) -> SpawnAttempt {
    use std::os::fd::{AsRawFd, OwnedFd};
    let (status_reader, status_writer) = match std::io::pipe() {
        Ok(pair) => pair,
        Err(error) => return SpawnAttempt::Failed(error),
    };
    let status_pipe =
        match tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(status_reader)) {
            Ok(status_pipe) => status_pipe,
            Err(error) => return SpawnAttempt::Failed(error),
        };
    let status_writer = OwnedFd::from(status_writer);
    let plan = linux::Plan::new(status_writer.as_raw_fd());
    // SAFETY: the hook only makes async-signal-safe system calls on data
    // prepared before the fork (see the `linux` module).
    unsafe {
        command.pre_exec(move || linux::enter(&plan));
    }
    let spawned = command.spawn();
    // Only P and I may hold the writing end: when I dies without reporting,
    // the agent's read sees end-of-file instead of waiting forever.
    drop(status_writer);
    match spawned {
        Ok(child) => SpawnAttempt::Sandboxed(Box::new(child), Sandboxed { status_pipe }),
        Err(error) => match linux::Failure::decode(&error) {
            Some(failure) if failure.is_refusal() => {
                remember_refusal(failure.to_string());
                SpawnAttempt::Refused
            }
            Some(failure) => SpawnAttempt::Failed(failure.into_io_error()),
            None => SpawnAttempt::Failed(error),
        },
    }
}

/// Namespaces are Linux's: elsewhere the first command logs why it runs
/// with the cleared environment only.
#[cfg(not(target_os = "linux"))]
pub(crate) fn spawn(_command: &mut tokio::process::Command) -> SpawnAttempt {
    remember_refusal(format!(
        "namespaces are Linux-only; this is {}",
        std::env::consts::OS
    ));
    SpawnAttempt::Refused
}

#[cfg(target_os = "linux")]
mod linux {
    //! The code between `fork` and `exec`. Every function here runs in a
    //! freshly forked copy of a multi-threaded process: raw system calls,
    //! stack buffers and `_exit` only (no allocation, no locks, no
    //! unwinding).

    use nix::libc;
    use std::fmt;
    use std::io;
    use std::os::fd::RawFd;

    /// Failures from the sandbox reach the agent through std's spawn error
    /// channel, which carries one `i32`. Encoding the step as
    /// `step * STEP_BASE + errno` keeps them apart from the program's own
    /// exec errors (plain errno values, all below 4096 on Linux).
    const STEP_BASE: i32 = 4096;

    /// Where setting up the sandbox failed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(i32)]
    enum Step {
        NoNewPrivs = 1,
        ParentDeathSignal,
        Unshare,
        Setgroups,
        UidMap,
        GidMap,
        PrivateMounts,
        ReportPipe,
        ForkInit,
        MountProc,
        NestedUnshare,
        NestedSetgroups,
        NestedUidMap,
        NestedGidMap,
        ForkCommand,
        InitVanished,
    }

    const STEPS: [Step; 16] = [
        Step::NoNewPrivs,
        Step::ParentDeathSignal,
        Step::Unshare,
        Step::Setgroups,
        Step::UidMap,
        Step::GidMap,
        Step::PrivateMounts,
        Step::ReportPipe,
        Step::ForkInit,
        Step::MountProc,
        Step::NestedUnshare,
        Step::NestedSetgroups,
        Step::NestedUidMap,
        Step::NestedGidMap,
        Step::ForkCommand,
        Step::InitVanished,
    ];

    impl Step {
        fn describe(self) -> &'static str {
            match self {
                Step::NoNewPrivs => "prctl(PR_SET_NO_NEW_PRIVS)",
                Step::ParentDeathSignal => "prctl(PR_SET_PDEATHSIG)",
                Step::Unshare => "unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)",
                Step::Setgroups => "writing /proc/self/setgroups",
                Step::UidMap => "writing /proc/self/uid_map",
                Step::GidMap => "writing /proc/self/gid_map",
                Step::PrivateMounts => "making mounts private",
                Step::ReportPipe => "pipe2",
                Step::ForkInit => "forking the namespace's init",
                Step::MountProc => "mounting a fresh /proc",
                Step::NestedUnshare => "unshare(CLONE_NEWUSER | CLONE_NEWNS), nested",
                Step::NestedSetgroups => "writing /proc/self/setgroups, nested",
                Step::NestedUidMap => "writing /proc/self/uid_map, nested",
                Step::NestedGidMap => "writing /proc/self/gid_map, nested",
                Step::ForkCommand => "forking the command",
                Step::InitVanished => "the namespace's init exited during set-up",
            }
        }
    }

    /// A sandbox set-up failure, decoded in the agent.
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Failure {
        step: Step,
        errno: i32,
    }

    impl Failure {
        /// The failure `error` (from `spawn`) encodes, if it is one.
        pub(super) fn decode(error: &io::Error) -> Option<Failure> {
            let code = error.raw_os_error()?;
            let index = usize::try_from(code / STEP_BASE).ok()?.checked_sub(1)?;
            Some(Failure {
                step: *STEPS.get(index)?,
                errno: code % STEP_BASE,
            })
        }

        /// The platform said no (a container's seccomp policy, disabled
        /// unprivileged user namespaces, a masked `/proc`): remembered, and
        /// every command runs without namespaces. Running out of processes
        /// or file descriptors is not the platform's policy, so that fails
        /// the call like any spawn would.
        pub(super) fn is_refusal(&self) -> bool {
            !matches!(
                self.step,
                Step::ReportPipe | Step::ForkInit | Step::ForkCommand
            )
        }

        /// The plain errno, for the caller's spawn error.
        pub(super) fn into_io_error(self) -> io::Error {
            io::Error::from_raw_os_error(self.errno)
        }
    }

    impl fmt::Display for Failure {
        fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                formatter,
                "{} failed: {}",
                self.step.describe(),
                nix::errno::Errno::from_raw(self.errno)
            )
        }
    }

    /// One line of an id map, formatted before the fork.
    #[derive(Clone, Copy)]
    struct MapLine {
        bytes: [u8; 40],
        len: usize,
    }

    impl MapLine {
        /// `"<id> <id> 1\n"`: the id inside maps to the same id outside, so
        /// files the command creates belong to the user running `gdn` and
        /// `id` prints what it prints outside.
        fn identity(id: u32) -> MapLine {
            let mut line = MapLine {
                bytes: [0; 40],
                len: 0,
            };
            let text = format!("{id} {id} 1\n");
            line.bytes[..text.len()].copy_from_slice(text.as_bytes());
            line.len = text.len();
            line
        }

        fn as_bytes(&self) -> &[u8] {
            &self.bytes[..self.len]
        }
    }

    /// Everything the hook needs, prepared in the agent before the fork.
    #[derive(Clone, Copy)]
    pub(super) struct Plan {
        uid_map: MapLine,
        gid_map: MapLine,
        /// The writing end of the status pipe the agent reads.
        status_fd: RawFd,
        /// The agent, P's parent while the agent lives.
        agent_pid: libc::pid_t,
    }

    impl Plan {
        pub(super) fn new(status_fd: RawFd) -> Plan {
            // SAFETY: getuid, getgid and getpid cannot fail and touch no
            // memory.
            let (uid, gid, agent_pid) = unsafe { (libc::getuid(), libc::getgid(), libc::getpid()) };
            Plan {
                uid_map: MapLine::identity(uid),
                gid_map: MapLine::identity(gid),
                status_fd,
                agent_pid,
            }
        }
    }

    /// Report records from I to P: 4 bytes of kind, 4 of value, one
    /// atomic pipe write each.
    const REPORT_READY: i32 = 1;
    const REPORT_FAILED: i32 = 2;

    fn errno() -> i32 {
        nix::errno::Errno::last_raw()
    }

    fn failure(step: Step, errno: i32) -> i32 {
        step as i32 * STEP_BASE + errno
    }

    fn check(step: Step, result: libc::c_int) -> Result<(), i32> {
        if result == -1 {
            Err(failure(step, errno()))
        } else {
            Ok(())
        }
    }

    /// Writes `bytes` to the file at `path` (one `write`, as the id map
    /// files require).
    fn write_file(step: Step, path: &std::ffi::CStr, bytes: &[u8]) -> Result<(), i32> {
        // SAFETY: plain system calls on a NUL-terminated path and a live buffer.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            check(step, fd)?;
            let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
            let write_errno = errno();
            libc::close(fd);
            if written != bytes.len() as isize {
                return Err(failure(step, write_errno));
            }
        }
        Ok(())
    }

    /// Maps the caller's own uid and gid in the user namespace it just
    /// entered. Only possible while dumpable (see the module docs).
    fn map_ids(plan: &Plan, steps: [Step; 3]) -> Result<(), i32> {
        write_file(steps[0], c"/proc/self/setgroups", b"deny")?;
        write_file(steps[1], c"/proc/self/uid_map", plan.uid_map.as_bytes())?;
        write_file(steps[2], c"/proc/self/gid_map", plan.gid_map.as_bytes())
    }

    /// `prctl(option, value)`. Every argument goes as an `unsigned long`:
    /// the call is variadic and the kernel reads all four as such.
    fn prctl(option: libc::c_int, value: libc::c_ulong) -> libc::c_int {
        let unused: libc::c_ulong = 0;
        // SAFETY: prctl with integer arguments only.
        unsafe { libc::prctl(option, value, unused, unused, unused) }
    }

    fn set_dumpable(dumpable: bool) {
        // It cannot fail for 0 or 1.
        prctl(libc::PR_SET_DUMPABLE, libc::c_ulong::from(dumpable));
    }

    /// Closes every descriptor from `first` to `last`, both included.
    fn close_range(first: RawFd, last: RawFd) {
        if first > last {
            return;
        }
        // SAFETY: close_range and close only release descriptors.
        unsafe {
            if libc::syscall(
                libc::SYS_close_range,
                first as libc::c_uint,
                last as libc::c_uint,
                0,
            ) == 0
            {
                return;
            }
            // Kernels before 5.9: close one by one, up to a bound far above
            // what an agent opens.
            for fd in first..=last.min(65_535) {
                libc::close(fd);
            }
        }
    }

    fn write_record(fd: RawFd, kind: i32, value: i32) {
        let mut record = [0u8; 8];
        record[..4].copy_from_slice(&kind.to_ne_bytes());
        record[4..].copy_from_slice(&value.to_ne_bytes());
        // SAFETY: a write of a stack buffer. A failed write means the
        // reader is gone and there is nobody left to tell.
        unsafe {
            libc::write(fd, record.as_ptr().cast(), record.len());
        }
    }

    /// Waits for `pid`, retrying on EINTR; its raw wait status, or `None`
    /// once there is nothing to wait for.
    fn wait_for(pid: libc::pid_t) -> Option<(libc::pid_t, libc::c_int)> {
        loop {
            let mut status = 0;
            // SAFETY: waitpid with a live out-pointer.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            if waited >= 0 {
                return Some((waited, status));
            }
            if errno() != libc::EINTR {
                return None;
            }
        }
    }

    /// `_exit` with the same outcome as a child's wait `status`: its exit
    /// code, or 128 + the signal that ended it.
    fn exit_like(status: libc::c_int) -> ! {
        let code = if libc::WIFEXITED(status) {
            libc::WEXITSTATUS(status)
        } else if libc::WIFSIGNALED(status) {
            128 + libc::WTERMSIG(status)
        } else {
            1
        };
        // SAFETY: _exit ends the process without running anything of ours.
        unsafe { libc::_exit(code) }
    }

    /// The `pre_exec` hook, run in P. Returns only in the command's own
    /// process (then std execs the program) or with a set-up failure
    /// (then std reports it to the agent); P and I end in `_exit`.
    pub(super) fn enter(plan: &Plan) -> io::Result<()> {
        enter_or_code(plan).map_err(io::Error::from_raw_os_error)
    }

    fn enter_or_code(plan: &Plan) -> Result<(), i32> {
        // SAFETY (whole function): async-signal-safe system calls only, on
        // stack data and on `plan`, which was built before the fork.
        unsafe {
            // A set-uid program the command runs cannot raise privileges.
            // Inherited by everything below, across exec.
            check(Step::NoNewPrivs, prctl(libc::PR_SET_NO_NEW_PRIVS, 1))?;
            // The agent gone (killed, crashed) takes P, and with it the
            // namespace, along. The signal follows the *thread* that
            // forked P: the agent spawns from its runtime's thread, which
            // lives as long as the agent does.
            check(
                Step::ParentDeathSignal,
                prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong),
            )?;
            // The agent died between the fork and the line above: nobody
            // would send the signal, so go now.
            if libc::getppid() != plan.agent_pid {
                libc::_exit(1);
            }
            check(
                Step::Unshare,
                libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID),
            )?;
            set_dumpable(true);
            if let Err(code) = map_ids(plan, [Step::Setgroups, Step::UidMap, Step::GidMap]) {
                set_dumpable(false);
                return Err(code);
            }
            // Our /proc mount must not propagate back to the host's tree.
            check(
                Step::PrivateMounts,
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ),
            )?;
            let mut report = [0 as RawFd; 2];
            check(
                Step::ReportPipe,
                libc::pipe2(report.as_mut_ptr(), libc::O_CLOEXEC),
            )?;
            let [report_read, report_write] = report;
            let init = libc::fork();
            if init == -1 {
                let fork_errno = errno();
                set_dumpable(false);
                return Err(failure(Step::ForkInit, fork_errno));
            }
            if init == 0 {
                libc::close(report_read);
                return run_init(plan, report_write);
            }
            libc::close(report_write);
            // P holds a copy of the agent's memory for as long as it lives.
            set_dumpable(false);
            let mut record = [0u8; 8];
            let read = loop {
                let read = libc::read(report_read, record.as_mut_ptr().cast(), record.len());
                if read == -1 && errno() == libc::EINTR {
                    continue;
                }
                break read;
            };
            let kind = i32::from_ne_bytes([record[0], record[1], record[2], record[3]]);
            let value = i32::from_ne_bytes([record[4], record[5], record[6], record[7]]);
            if read != 8 || kind != REPORT_READY {
                libc::close(report_read);
                wait_for(init);
                return Err(if read == 8 && kind == REPORT_FAILED {
                    value
                } else {
                    failure(Step::InitVanished, libc::ECHILD)
                });
            }
            // Set up: P keeps nothing open (not the command's pipes, not
            // std's error channel, so the agent's spawn returns once the
            // command has exec'd) and waits for I, whose end ends it.
            close_range(0, RawFd::MAX);
            match wait_for(init) {
                Some((_, status)) => exit_like(status),
                None => libc::_exit(1),
            }
        }
    }

    /// I, PID 1 of the new namespace. Returns only in the command's
    /// process; on a failure it reports to P and exits.
    fn run_init(plan: &Plan, report_write: RawFd) -> Result<(), i32> {
        match prepare_init(plan) {
            Ok(()) => {}
            Err(code) => {
                write_record(report_write, REPORT_FAILED, code);
                // SAFETY: ends this copy of the process.
                unsafe { libc::_exit(1) }
            }
        }
        // SAFETY (rest of the function): fork, waitpid, write, close, _exit.
        unsafe {
            let command = libc::fork();
            if command == -1 {
                write_record(
                    report_write,
                    REPORT_FAILED,
                    failure(Step::ForkCommand, errno()),
                );
                libc::_exit(1);
            }
            if command == 0 {
                // The command: back to std, which execs the program. The
                // report pipe is close-on-exec.
                return Ok(());
            }
            write_record(report_write, REPORT_READY, 0);
            let status_fd = plan.status_fd;
            close_range(0, status_fd - 1);
            close_range(status_fd + 1, RawFd::MAX);
            // Reap everything in the namespace; report the command's own
            // status the moment it ends, and stay while anything it left
            // behind runs (see the module docs).
            let mut reported = false;
            while let Some((pid, status)) = wait_for(-1) {
                if pid == command && !reported {
                    let raw = status.to_ne_bytes();
                    libc::write(status_fd, raw.as_ptr().cast(), raw.len());
                    libc::close(status_fd);
                    reported = true;
                }
            }
            libc::_exit(0)
        }
    }

    fn prepare_init(plan: &Plan) -> Result<(), i32> {
        // SAFETY: prctl, signal, mount and unshare with constant arguments.
        unsafe {
            // P gone (killed with the group) takes the whole namespace along.
            check(
                Step::ParentDeathSignal,
                prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong),
            )?;
            // The agent's handlers (the runtime's SIGCHLD one) must not run
            // in the init; SIGCHLD's default is what waitpid needs.
            libc::signal(libc::SIGCHLD, libc::SIG_DFL);
            check(
                Step::MountProc,
                libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ),
            )?;
            check(
                Step::NestedUnshare,
                libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS),
            )?;
            map_ids(
                plan,
                [
                    Step::NestedSetgroups,
                    Step::NestedUidMap,
                    Step::NestedGidMap,
                ],
            )?;
            set_dumpable(false);
        }
        Ok(())
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn failures_round_trip_and_exec_errors_are_not_failures() {
            let code = failure(Step::MountProc, libc::EPERM);
            let decoded = Failure::decode(&io::Error::from_raw_os_error(code)).unwrap();
            assert_eq!(decoded.step, Step::MountProc);
            assert_eq!(decoded.errno, libc::EPERM);
            assert!(decoded.is_refusal());
            assert_eq!(
                decoded.to_string(),
                "mounting a fresh /proc failed: EPERM: Operation not permitted"
            );
            let fork = failure(Step::ForkCommand, libc::EAGAIN);
            assert!(!Failure::decode(&io::Error::from_raw_os_error(fork))
                .unwrap()
                .is_refusal());
            assert!(Failure::decode(&io::Error::from_raw_os_error(libc::ENOENT)).is_none());
            for (index, step) in STEPS.iter().enumerate() {
                assert_eq!(*step as usize, index + 1);
            }
        }

        #[test]
        fn map_lines_are_identity_maps() {
            assert_eq!(MapLine::identity(1000).as_bytes(), b"1000 1000 1\n");
            assert_eq!(
                MapLine::identity(u32::MAX).as_bytes(),
                b"4294967295 4294967295 1\n"
            );
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    //! Issue 16 #1 with real processes. The agent's side of the test runs
    //! in a child copy of this test binary, so the secret sits in that
    //! process's environment without `set_var` racing other tests.

    use super::super::process::{run, ProcessSpec};
    use super::*;
    use std::collections::BTreeSet;
    use std::time::Duration;

    /// Set in the child copy: the secret the agent's environment holds.
    const SECRET_VARIABLE: &str = "MY_SECRET_KEY";
    const SECRET: &str = "sk-probe-SECRET-5e1d9c0b7a";
    /// Set in the child copy: run the probe rather than return.
    const PROBE_VARIABLE: &str = "GOONDAN_BASH_SANDBOX_PROBE";
    const PROBE_TEST: &str = "tools::bash::sandbox::tests::secrets_probe";

    fn spec(command: &str, isolation: Isolation) -> ProcessSpec {
        ProcessSpec {
            program: "/bin/sh".into(),
            args: vec!["-lc".into(), command.into()],
            cwd: std::env::temp_dir(),
            env: vec![("DECLARED".into(), "yes".into())],
            isolation,
            timeout: Duration::from_secs(20),
            max_output_bytes: 1_000_000,
        }
    }

    /// Runs the probe in a child copy of this binary with `SECRET` in its
    /// environment, as `uid` when given (through `setpriv`).
    fn run_probe(as_nobody: bool) -> std::process::Output {
        let exe = std::env::current_exe().unwrap();
        let mut command = if as_nobody {
            let mut command = std::process::Command::new("setpriv");
            command
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(exe);
            command
        } else {
            std::process::Command::new(exe)
        };
        command
            .args([PROBE_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(SECRET_VARIABLE, SECRET)
            .env(PROBE_VARIABLE, "1")
            .env_remove(SANDBOX_VARIABLE)
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap()
    }

    fn assert_probe_passed(output: &std::process::Output, who: &str) {
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the probe failed as {who}:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        print!("{stdout}");
    }

    #[test]
    fn the_model_cannot_read_the_agents_secrets_through_bash() {
        assert_probe_passed(&run_probe(false), "this user");
        // As root the id maps are written with privileges a normal user
        // lacks; run the probe as `nobody` too, where `setpriv` can.
        // SAFETY: geteuid cannot fail and touches no memory.
        let root = unsafe { nix::libc::geteuid() } == 0;
        let setpriv = std::path::Path::new("/usr/bin/setpriv").exists();
        let exe = std::env::current_exe().unwrap();
        if root && setpriv && others_can_run(&exe) {
            assert_probe_passed(&run_probe(true), "nobody");
        } else {
            println!(
                "note: not root, no setpriv, or {} is out of nobody's reach; the probe ran as this user only",
                exe.display()
            );
        }
    }

    /// True when a user who is neither the owner nor in the group can
    /// execute `exe`: every folder above it searchable, the file readable
    /// and executable by others (a checkout under `/root` is not).
    fn others_can_run(exe: &std::path::Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        let mode = |path: &std::path::Path| {
            std::fs::metadata(path).map_or(0, |metadata| metadata.permissions().mode())
        };
        mode(exe) & 0o005 == 0o005
            && exe
                .ancestors()
                .skip(1)
                .all(|folder| mode(folder) & 0o001 != 0)
    }

    /// The variable names `env` printed.
    fn names(env_output: &str) -> BTreeSet<String> {
        env_output
            .lines()
            .filter_map(|line| line.split_once('=').map(|(name, _)| name.to_string()))
            .collect()
    }

    /// The child half of the test above; returns at once unless that test
    /// started it.
    #[tokio::test]
    async fn secrets_probe() {
        if std::env::var_os(PROBE_VARIABLE).is_none() {
            return;
        }
        assert_eq!(std::env::var(SECRET_VARIABLE).unwrap(), SECRET);
        // Like `gdn agent`: the agent holds secrets, so it is non-dumpable
        // (which is also what the id maps must work around).
        // SAFETY: prctl with integer arguments.
        unsafe {
            nix::libc::prctl(nix::libc::PR_SET_DUMPABLE, 0 as nix::libc::c_ulong, 0, 0, 0);
        }
        let leaks = |text: &str| text.contains(SECRET);
        // Only what the shell itself exports may join the allowed list.
        let allowed: BTreeSet<String> = [
            "PATH", "HOME", "LANG", "DECLARED", "PWD", "SHLVL", "_", "OLDPWD",
        ]
        .into_iter()
        .map(String::from)
        .collect();

        for isolation in [Isolation::Namespaces, Isolation::EnvironmentOnly] {
            let outcome = run(&spec("env", isolation)).await.unwrap();
            let stdout = outcome.stdout.text();
            assert_eq!(outcome.exit_code, Some(0), "{isolation:?}: {stdout}");
            assert!(!leaks(&stdout), "{isolation:?}: {stdout}");
            let seen = names(&stdout);
            assert!(seen.is_subset(&allowed), "{isolation:?}: {seen:?}");
            for required in ["PATH", "LANG", "DECLARED"] {
                assert!(seen.contains(required), "{isolation:?}: {seen:?}");
            }
        }

        // Without namespaces another process's environment is only as safe
        // as its owner keeps it (the agent: non-dumpable), so the /proc
        // checks below are the sandbox's alone.
        if !wanted(Isolation::Namespaces) {
            println!(
                "note: namespaces refused here ({}); the /proc checks need them",
                REFUSAL.get().map(String::as_str).unwrap_or("?")
            );
            return;
        }
        // Every environment and command line the command can find.
        let snoop = "cat /proc/$PPID/environ; cat /proc/1/environ; cat /proc/self/environ; \
                     for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat $f; done; true";
        let outcome = run(&spec(snoop, Isolation::Namespaces)).await.unwrap();
        let (stdout, stderr) = (outcome.stdout.text(), outcome.stderr.text());
        assert!(!leaks(&stdout) && !leaks(&stderr), "{stdout}\n{stderr}");

        // The command is PID 2 under the namespace's init, and /proc lists
        // only the sandbox: the init, the shell, `ls` and `grep`. Unmounting
        // /proc (possible for uid 0 inside, were it not locked) changes
        // nothing.
        let listing = "echo $$; ls /proc | grep -c '^[0-9]*$'; ps -e -o pid= | wc -l; \
                       umount /proc 2>/dev/null; umount -l /proc 2>/dev/null; \
                       ls /proc | grep -c '^[0-9]*$'";
        let outcome = run(&spec(listing, Isolation::Namespaces)).await.unwrap();
        let stdout = outcome.stdout.text();
        let numbers: Vec<u32> = stdout
            .split_whitespace()
            .map(|word| word.parse().unwrap())
            .collect();
        println!("sandbox listing ($$, /proc, ps, /proc after umount): {stdout:?}");
        assert_eq!(numbers.len(), 4, "{stdout}");
        assert_eq!(numbers[0], 2, "the command is not PID 2: {stdout}");
        for count in &numbers[1..] {
            assert!(*count <= 5, "the sandbox sees too many processes: {stdout}");
        }
    }
}
