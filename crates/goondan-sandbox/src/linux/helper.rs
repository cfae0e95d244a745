//! The bash helper's side: PID 1 of an agent's namespaces, which forks
//! and execs each command the agent sends (see the `shared` module for
//! the agent's side and the design).
//!
//! Everything here runs in a forked copy of the multi-threaded agent
//! that never execs itself: raw system calls, stack buffers, `mmap` and
//! `_exit` only (no allocation, no locks, no unwinding), like the rest
//! of the `linux` module.
//!
//! The wire is a `SOCK_SEQPACKET` socket pair, one fixed [`RECORD`] per
//! message each way: `kind: u32, value: i32, id: u64, len: u64` in the
//! machine's byte order (both ends are the same program).

use super::{close_range, errno, wait_for};
use nix::libc;
use std::os::fd::RawFd;

/// Bytes in one request or reply.
pub(crate) const RECORD: usize = 24;

/// Agent → helper: run a command; carries four descriptors (stdin,
/// stdout, stderr, and a memfd of `len` bytes holding the [`payload`]).
pub(crate) const RUN: u32 = 1;
/// Agent → helper: kill the process group of command `id` (SIGKILL).
pub(crate) const KILL: u32 = 2;
/// Agent → helper: the agent dropped command `id`; forget it once it
/// has ended.
pub(crate) const RELEASE: u32 = 3;

/// Helper → agent: command `id` exec'd; `value` is its pid inside.
pub(crate) const STARTED: u32 = 1;
/// Helper → agent: command `id` did not start; `value` is the errno.
pub(crate) const FAILED: u32 = 2;
/// Helper → agent: command `id` ended; `value` is its raw wait status.
pub(crate) const EXITED: u32 = 3;

/// Commands the helper tracks at once (running, or ended and not yet
/// released by the agent); one more is refused with `EAGAIN`.
const MAX_COMMANDS: usize = 1024;

/// A request or reply record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) kind: u32,
    pub(crate) value: i32,
    pub(crate) id: u64,
    pub(crate) len: u64,
}

impl Record {
    pub(crate) fn encode(&self) -> [u8; RECORD] {
        let mut bytes = [0u8; RECORD];
        bytes[..4].copy_from_slice(&self.kind.to_ne_bytes());
        bytes[4..8].copy_from_slice(&self.value.to_ne_bytes());
        bytes[8..16].copy_from_slice(&self.id.to_ne_bytes());
        bytes[16..].copy_from_slice(&self.len.to_ne_bytes());
        bytes
    }

    pub(crate) fn decode(bytes: &[u8; RECORD]) -> Record {
        let word = |range: std::ops::Range<usize>| {
            let mut out = [0u8; 8];
            out[..range.len()].copy_from_slice(&bytes[range]);
            out
        };
        let [a, b, c, d, ..] = word(0..4);
        let [e, f, g, h, ..] = word(4..8);
        Record {
            kind: u32::from_ne_bytes([a, b, c, d]),
            value: i32::from_ne_bytes([e, f, g, h]),
            id: u64::from_ne_bytes(word(8..16)),
            len: u64::from_ne_bytes(word(16..24)),
        }
    }
}

/// The layout of a command in its memfd, written by the agent and read
/// by the forked command before it execs. All words are `usize`; an
/// offset counts from the payload's start:
///
/// ```text
/// [argc][envc][program offset][cwd offset]
/// [argv offsets ×argc][0][envp offsets ×envc][0]
/// NUL-terminated strings
/// ```
///
/// The command maps the memfd privately and turns every offset into an
/// address in place, so the arrays become `execve`'s `argv` and `envp`
/// without an allocation.
pub(crate) mod payload {
    /// Words before the argument offsets.
    pub(crate) const HEADER_WORDS: usize = 4;
    /// Bytes per word.
    pub(crate) const WORD: usize = std::mem::size_of::<usize>();
}

/// What `execve` needs, as addresses into a fixed-up payload.
pub(crate) struct Exec {
    pub(crate) program: *const libc::c_char,
    pub(crate) cwd: *const libc::c_char,
    pub(crate) argv: *const *const libc::c_char,
    pub(crate) envp: *const *const libc::c_char,
}

/// Turns the payload at `base` (`len` bytes, writable, word-aligned)
/// into [`Exec`]; `None` when it is malformed.
///
/// # Safety
///
/// `base` must point to `len` writable bytes aligned for `usize`.
pub(crate) unsafe fn fix_up(base: *mut u8, len: usize) -> Option<Exec> {
    use payload::{HEADER_WORDS, WORD};
    // SAFETY: every access below is bounds-checked against `len`.
    unsafe {
        let bytes = std::slice::from_raw_parts_mut(base, len);
        // Every string must end inside the payload.
        if len < HEADER_WORDS * WORD || bytes[len - 1] != 0 {
            return None;
        }
        let words = std::slice::from_raw_parts_mut(base.cast::<usize>(), len / WORD);
        let (argc, envc) = (words[0], words[1]);
        let needed = HEADER_WORDS
            .checked_add(argc)?
            .checked_add(envc)?
            .checked_add(2)?;
        if needed > words.len() {
            return None;
        }
        let text_start = needed * WORD;
        let address = |offset: usize| {
            (offset >= text_start && offset < len).then(|| base.add(offset) as usize)
        };
        let program = address(words[2])?;
        let cwd = address(words[3])?;
        let argv_start = HEADER_WORDS;
        let envp_start = argv_start + argc + 1;
        for index in (argv_start..argv_start + argc).chain(envp_start..envp_start + envc) {
            words[index] = address(words[index])?;
        }
        words[argv_start + argc] = 0;
        words[envp_start + envc] = 0;
        Some(Exec {
            program: program as *const libc::c_char,
            cwd: cwd as *const libc::c_char,
            argv: words.as_ptr().add(argv_start).cast(),
            envp: words.as_ptr().add(envp_start).cast(),
        })
    }
}

/// One command the helper tracks.
#[derive(Clone, Copy)]
struct Slot {
    used: bool,
    id: u64,
    /// The command's pid inside, which is also its process group.
    pid: libc::pid_t,
    /// Not reaped yet.
    running: bool,
    /// The agent dropped it: free the slot once it is reaped.
    released: bool,
}

const FREE: Slot = Slot {
    used: false,
    id: 0,
    pid: 0,
    running: false,
    released: false,
};

fn reply(socket: RawFd, kind: u32, value: i32, id: u64) {
    let record = Record {
        kind,
        value,
        id,
        len: 0,
    }
    .encode();
    // SAFETY: a send of a stack buffer. A failed send means the agent is
    // gone; the next receive sees that and ends the helper.
    unsafe {
        libc::send(
            socket,
            record.as_ptr().cast(),
            record.len(),
            libc::MSG_NOSIGNAL,
        );
    }
}

/// The helper's loop, in I once the namespaces are set up: serves the
/// agent on `socket` until the agent's end closes, then exits, and the
/// kernel kills everything left in the namespace (the helper is its
/// PID 1).
pub(super) fn serve(socket: RawFd) -> ! {
    // SAFETY (whole function): async-signal-safe system calls on stack
    // data; see the module docs.
    unsafe {
        // No handler of the agent's may run here, and an ignored signal
        // (the runtime ignores SIGPIPE) would stay ignored in every
        // command across exec.
        for signal in 1..=64 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        // SIGCHLD is read from a descriptor, so one `poll` waits for
        // both requests and ended commands.
        let mut children: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut children);
        libc::sigaddset(&mut children, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_SETMASK, &children, std::ptr::null_mut());
        // Nothing of the agent's stays open here but the socket.
        close_range(0, socket - 1);
        close_range(socket + 1, RawFd::MAX);
        let signals = libc::signalfd(-1, &children, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if signals == -1 {
            libc::_exit(1);
        }
        let mut slots = [FREE; MAX_COMMANDS];
        loop {
            let mut polled = [
                libc::pollfd {
                    fd: socket,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: signals,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            if libc::poll(polled.as_mut_ptr(), 2, -1) == -1 {
                if errno() == libc::EINTR {
                    continue;
                }
                libc::_exit(1);
            }
            if polled[1].revents != 0 {
                let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
                while libc::read(signals, info.as_mut_ptr().cast(), info.len()) > 0 {}
                reap(socket, &mut slots);
            }
            if polled[0].revents != 0 && !receive(socket, &mut slots) {
                // The agent is gone: so is everything it ran.
                libc::_exit(0);
            }
        }
    }
}

/// Reaps every ended child (orphans the namespace inherited included)
/// and tells the agent about its commands.
fn reap(socket: RawFd, slots: &mut [Slot; MAX_COMMANDS]) {
    loop {
        let mut status = 0;
        // SAFETY: waitpid with a live out-pointer.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
        if let Some(slot) = slots
            .iter_mut()
            .find(|slot| slot.used && slot.running && slot.pid == pid)
        {
            reply(socket, EXITED, status, slot.id);
            slot.running = false;
            if slot.released {
                *slot = FREE;
            }
        }
    }
}

/// Handles one request; false when the agent's end is closed.
fn receive(socket: RawFd, slots: &mut [Slot; MAX_COMMANDS]) -> bool {
    let mut bytes = [0u8; RECORD];
    // Room for one SCM_RIGHTS message of four descriptors, aligned.
    let mut control = [0u64; 8];
    let mut fds: [RawFd; 4] = [-1; 4];
    let mut n_fds = 0;
    // SAFETY: recvmsg into stack buffers described by a stack msghdr;
    // the CMSG macros only walk that control buffer.
    let received = unsafe {
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: bytes.len(),
        };
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control) as _;
        let received = libc::recvmsg(socket, &mut message, libc::MSG_CMSG_CLOEXEC);
        if received > 0 {
            let mut header = libc::CMSG_FIRSTHDR(&message);
            while !header.is_null() {
                if (*header).cmsg_level == libc::SOL_SOCKET
                    && (*header).cmsg_type == libc::SCM_RIGHTS
                {
                    let data = libc::CMSG_DATA(header).cast::<RawFd>();
                    let count = ((*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                        / std::mem::size_of::<RawFd>();
                    for index in 0..count {
                        let fd = data.add(index).read_unaligned();
                        if n_fds < fds.len() {
                            fds[n_fds] = fd;
                            n_fds += 1;
                        } else {
                            libc::close(fd);
                        }
                    }
                }
                header = libc::CMSG_NXTHDR(&message, header);
            }
        }
        received
    };
    if received == -1 {
        return errno() == libc::EINTR || errno() == libc::EAGAIN;
    }
    let request = if received as usize == RECORD {
        Record::decode(&bytes)
    } else {
        // A short message (none is sent) is dropped with its descriptors.
        Record {
            kind: 0,
            value: 0,
            id: 0,
            len: 0,
        }
    };
    match request.kind {
        RUN if n_fds == 4 => run(socket, slots, request, fds),
        KILL => kill(slots, request.id),
        RELEASE => {
            if let Some(slot) = slots
                .iter_mut()
                .find(|slot| slot.used && slot.id == request.id)
            {
                if slot.running {
                    slot.released = true;
                } else {
                    *slot = FREE;
                }
            }
        }
        _ => {}
    }
    for fd in &fds[..n_fds] {
        // SAFETY: closes descriptors this process received.
        unsafe {
            libc::close(*fd);
        }
    }
    // Zero bytes: the agent's end is closed.
    received > 0
}

/// Kills command `id`'s process group. After its leader was reaped the
/// group may still hold jobs (the case a timeout kills); its id cannot be
/// reused while it does, and is not killed when it now names another
/// running command.
fn kill(slots: &[Slot; MAX_COMMANDS], id: u64) {
    let Some(target) = slots.iter().find(|slot| slot.used && slot.id == id) else {
        return;
    };
    let reused = !target.running
        && slots
            .iter()
            .any(|slot| slot.used && slot.running && slot.pid == target.pid);
    if !reused {
        // SAFETY: kill with integer arguments.
        unsafe {
            libc::kill(-target.pid, libc::SIGKILL);
        }
    }
}

/// Forks and execs one command; replies STARTED once it exec'd, FAILED
/// with the errno when it could not.
fn run(socket: RawFd, slots: &mut [Slot; MAX_COMMANDS], request: Record, fds: [RawFd; 4]) {
    let Some(slot) = slots.iter().position(|slot| !slot.used) else {
        reply(socket, FAILED, libc::EAGAIN, request.id);
        return;
    };
    let Ok(len) = usize::try_from(request.len) else {
        reply(socket, FAILED, libc::EINVAL, request.id);
        return;
    };
    // SAFETY: pipe2, fork, read, close and waitpid on stack data; the
    // child runs `exec_command` (async-signal-safe) and ends in execve or
    // _exit.
    unsafe {
        // The command's own exec error channel, closed by a successful
        // exec (close-on-exec), as std's spawn does it.
        let mut exec_error = [0 as RawFd; 2];
        if libc::pipe2(exec_error.as_mut_ptr(), libc::O_CLOEXEC) == -1 {
            reply(socket, FAILED, errno(), request.id);
            return;
        }
        let [error_read, error_write] = exec_error;
        let child = libc::fork();
        if child == -1 {
            let fork_errno = errno();
            libc::close(error_read);
            libc::close(error_write);
            reply(socket, FAILED, fork_errno, request.id);
            return;
        }
        if child == 0 {
            let code = exec_command(fds, len).to_ne_bytes();
            libc::write(error_write, code.as_ptr().cast(), code.len());
            libc::_exit(127);
        }
        libc::close(error_write);
        let mut code = [0u8; 4];
        let read = loop {
            let read = libc::read(error_read, code.as_mut_ptr().cast(), code.len());
            if read == -1 && errno() == libc::EINTR {
                continue;
            }
            break read;
        };
        libc::close(error_read);
        if read == 4 {
            wait_for(child);
            reply(socket, FAILED, i32::from_ne_bytes(code), request.id);
            return;
        }
        slots[slot] = Slot {
            used: true,
            id: request.id,
            pid: child,
            running: true,
            released: false,
        };
        reply(socket, STARTED, child, request.id);
    }
}

/// In the forked command: its own process group, the agent's stdio,
/// the working directory, then `execve`. Returns only with the errno
/// of the step that failed.
fn exec_command(fds: [RawFd; 4], len: usize) -> i32 {
    let [stdin, stdout, stderr, payload] = fds;
    // SAFETY: async-signal-safe system calls; the payload is mapped
    // privately, so fixing it up touches this process's copy only.
    unsafe {
        if libc::setpgid(0, 0) == -1 {
            return errno();
        }
        let empty: libc::sigset_t = {
            let mut set = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            set
        };
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // Mapped before the stdio is placed: the payload's descriptor
        // may be 0, 1 or 2.
        let base = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            payload,
            0,
        );
        if base == libc::MAP_FAILED {
            return errno();
        }
        let Some(exec) = fix_up(base.cast(), len) else {
            return libc::EINVAL;
        };
        // Lifted above 2 first, so placing one cannot close another.
        let mut lifted = [-1; 3];
        for (index, fd) in [stdin, stdout, stderr].into_iter().enumerate() {
            lifted[index] = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
            if lifted[index] == -1 {
                return errno();
            }
        }
        for (target, fd) in lifted.into_iter().enumerate() {
            if libc::dup2(fd, target as RawFd) == -1 {
                return errno();
            }
        }
        if libc::chdir(exec.cwd) == -1 {
            return errno();
        }
        libc::execve(exec.program, exec.argv, exec.envp);
        errno()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let record = Record {
            kind: RUN,
            value: -3,
            id: u64::MAX - 1,
            len: 12_345,
        };
        assert_eq!(Record::decode(&record.encode()), record);
    }

    #[test]
    fn a_malformed_payload_is_refused() {
        for bytes in [vec![0usize; 2], vec![1usize << 40, 0, 0, 0, 0, 0, 0]] {
            let mut words = bytes;
            let len = words.len() * payload::WORD;
            // SAFETY: a live, aligned, writable buffer of `len` bytes.
            let exec = unsafe { fix_up(words.as_mut_ptr().cast(), len) };
            assert!(exec.is_none());
        }
    }
}
