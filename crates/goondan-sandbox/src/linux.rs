//! The code between `fork` and `exec`. Every function here runs in a
//! freshly forked copy of a multi-threaded process: raw system calls,
//! stack buffers and `_exit` only (no allocation, no locks, no
//! unwinding).

pub(crate) mod helper;

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
    HidePath,
}

const STEPS: [Step; 17] = [
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
    Step::HidePath,
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
            Step::HidePath => "mounting over a hidden path of the System Root",
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
    /// The writing end of the status pipe the agent reads (a
    /// [`Contained`](crate::Contained) child), or -1.
    status_fd: RawFd,
    /// Where P tells the agent the namespaces are ready (the bash
    /// helper, see [`start_helper`]), or -1.
    ready_fd: RawFd,
    /// The agent, P's parent while the agent lives.
    agent_pid: libc::pid_t,
    /// What P covers before the namespace's init locks the mounts.
    hidden: &'static [crate::hidden::HiddenPath],
}

impl Plan {
    /// The plan for one [`Contained`](crate::Contained) child, whose
    /// command's wait status goes to `status_fd`.
    pub(super) fn new(status_fd: RawFd) -> Plan {
        Plan::with_fds(status_fd, -1)
    }

    fn with_fds(status_fd: RawFd, ready_fd: RawFd) -> Plan {
        // SAFETY: getuid, getgid and getpid cannot fail and touch no
        // memory.
        let (uid, gid, agent_pid) = unsafe { (libc::getuid(), libc::getgid(), libc::getpid()) };
        Plan {
            uid_map: MapLine::identity(uid),
            gid_map: MapLine::identity(gid),
            status_fd,
            ready_fd,
            agent_pid,
            hidden: crate::hidden::hidden(),
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
    let report_write = enter_namespaces(plan)?;
    run_init(plan, report_write)
}

/// P's part: enters the namespaces and forks I. Returns only in I, set
/// up (see [`prepare_init`]), with the pipe to report to P; or in P with
/// a set-up failure. Once I reports ready, P closes everything and ends
/// with I.
fn enter_namespaces(plan: &Plan) -> Result<RawFd, i32> {
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
        hide_paths(plan)?;
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
            if let Err(code) = prepare_init(plan) {
                write_record(report_write, REPORT_FAILED, code);
                libc::_exit(1);
            }
            return Ok(report_write);
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
        if plan.ready_fd >= 0 {
            write_record(plan.ready_fd, REPORT_READY, 0);
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

/// Starts the agent's bash helper (see the `shared` module): P enters
/// the namespaces, and I, their PID 1, serves commands on `socket` until
/// the agent's end of it closes. Returns P's pid once I is ready, or the
/// failure encoded as [`enter`] encodes it (see [`Failure::decode`]).
///
/// P's `PR_SET_PDEATHSIG` follows the calling thread, so it must live as
/// long as the helper may.
pub(super) fn start_helper(socket: RawFd) -> io::Result<libc::pid_t> {
    let mut ready = [0 as RawFd; 2];
    // SAFETY: pipe2 with a live out-array.
    if unsafe { libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(io::Error::last_os_error());
    }
    let [ready_read, ready_write] = ready;
    let plan = Plan::with_fds(-1, ready_write);
    // SAFETY: the child runs only this module's async-signal-safe code
    // and ends in `_exit` (P, or I when the agent's end closes).
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        let fork_error = io::Error::last_os_error();
        // SAFETY: closes the pipe made above.
        unsafe {
            libc::close(ready_read);
            libc::close(ready_write);
        }
        return Err(fork_error);
    }
    if pid == 0 {
        // SAFETY: P's and I's end; see `enter_namespaces`.
        unsafe {
            libc::close(ready_read);
            match enter_namespaces(&plan) {
                Err(code) => {
                    write_record(ready_write, REPORT_FAILED, code);
                    libc::_exit(1);
                }
                Ok(report_write) => {
                    write_record(report_write, REPORT_READY, 0);
                    helper::serve(socket)
                }
            }
        }
    }
    let mut record = [0u8; 8];
    // SAFETY: close, read and waitpid on this function's own descriptors
    // and child.
    let read = unsafe {
        libc::close(ready_write);
        let read = loop {
            let read = libc::read(ready_read, record.as_mut_ptr().cast(), record.len());
            if read == -1 && errno() == libc::EINTR {
                continue;
            }
            break read;
        };
        libc::close(ready_read);
        read
    };
    let kind = i32::from_ne_bytes([record[0], record[1], record[2], record[3]]);
    let value = i32::from_ne_bytes([record[4], record[5], record[6], record[7]]);
    if read == 8 && kind == REPORT_READY {
        return Ok(pid);
    }
    wait_for(pid);
    Err(io::Error::from_raw_os_error(
        if read == 8 && kind == REPORT_FAILED {
            value
        } else {
            failure(Step::InitVanished, libc::ECHILD)
        },
    ))
}

/// Reaps P once the helper is gone.
pub(super) fn reap(pid: libc::pid_t) {
    wait_for(pid);
}

/// I, PID 1 of the new namespace, set up, for one command. Returns only
/// in the command's process; on a failure it reports to P and exits.
fn run_init(plan: &Plan, report_write: RawFd) -> Result<(), i32> {
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

/// Covers every hidden path (see `crate::hidden`): an empty read-only
/// tmpfs over a folder, `/dev/null` over a file. A path gone since the
/// plan was made has nothing left to hide.
fn hide_paths(plan: &Plan) -> Result<(), i32> {
    for hidden in plan.hidden {
        // SAFETY: mount with NUL-terminated strings prepared before the
        // fork and constant ones.
        let mounted = unsafe {
            if hidden.directory {
                libc::mount(
                    c"tmpfs".as_ptr(),
                    hidden.path.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"mode=0,size=4k".as_ptr().cast(),
                )
            } else {
                libc::mount(
                    c"/dev/null".as_ptr(),
                    hidden.path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            }
        };
        if mounted == -1 && errno() != libc::ENOENT {
            return Err(failure(Step::HidePath, errno()));
        }
    }
    Ok(())
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
