//! Commands that share one set of namespaces per agent: the bash tool's
//! sandbox without a namespace set-up per call (issue 37 #2).
//!
//! The first [`SharedChild::spawn`] of a process starts the **helper**:
//! the agent's child P enters new user, mount and PID namespaces exactly
//! as a [`Contained`](crate::Contained) child does, and its child I, PID 1
//! there with a fresh, locked `/proc`, stays. For every later command the
//! agent sends I one request over a `SOCK_SEQPACKET` socket pair, with the
//! command's stdin, stdout and stderr and a memfd holding its program,
//! arguments, environment and working directory (`SCM_RIGHTS`); I forks,
//! the fork becomes the leader of its own process group, takes the three
//! descriptors and execs. A call then costs one fork of I instead of new
//! namespaces, three processes handing over to each other and a mount.
//!
//! ```text
//! agent ─ thread "goondan-sandbox" ─ forks ─▶ P (pdeathsig, unshare, id maps)
//!   │                                          └─ forks ─▶ I = helper, PID 1
//!   └── socket pair: RUN / KILL / RELEASE ─────────────────▶ │ forks, execs
//!       ◀──────────── STARTED / FAILED / EXITED ──────────── ├─▶ command 1
//!                                                            └─▶ command 2
//! ```
//!
//! * **Why I never execs.** Exec'ing a hidden mode of the binary would drop
//!   the agent's memory image from the helper, but the sandbox serves test
//!   binaries and benches as well as `gdn`, and only `gdn` has a hidden
//!   mode to exec; a fork that stays in async-signal-safe code works in any
//!   of them. The price is the one the per-call init paid, now for the
//!   agent's life: I is a copy-on-write image of the agent when the first
//!   command ran (non-dumpable, so no command can read it through
//!   `/proc/1/mem` or `/proc/1/environ`), and each page the agent writes
//!   later is copied once.
//! * **Who kills what.** Commands are I's children, so their pids (and
//!   process groups) are the namespace's; the agent cannot `killpg` them,
//!   so a timeout or a dropped call sends KILL and I kills the group.
//! * **Lifetime.** P is forked by a dedicated thread that lives while the
//!   helper does (it reads I's replies), so P's `PR_SET_PDEATHSIG` fires
//!   when the agent process dies, not when some runtime thread ends; I has
//!   its own pdeathsig on P, and exits when the agent's end of the socket
//!   closes. I is the namespace's PID 1: when it dies the kernel kills
//!   everything inside, a job that called `setsid` or double-forked
//!   included. Should I die while the agent runs, the next command starts a
//!   new helper.
//! * **What is shared.** Commands of one agent see each other's processes
//!   (a server started by one call can be used by the next), but each
//!   gets a fresh environment built by the agent (`PATH`, `HOME`, `LANG`
//!   and the call's own variables), as before. A job that left its
//!   command's process group (`setsid`) is no longer killed with the
//!   command at a timeout; like a `nohup` job it lives until the agent
//!   stops.
//! * **Refusal.** When the platform refuses the namespaces the refusal is
//!   remembered exactly as for [`Contained`](crate::Contained), and
//!   [`SharedChild::spawn`] returns `None`: the caller runs the command in
//!   a process group of its own.

use crate::error::SharedError;
use crate::linux::helper::{self, payload, Record, RECORD};
use crate::{linux, refusal, remember_refusal};
use nix::libc;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A command to run in the agent's shared namespaces.
#[derive(Debug, Clone)]
pub struct SharedCommand {
    /// The program: a path, or a name looked up in the `PATH` of `env`.
    pub program: OsString,
    /// Its arguments, without the program name.
    pub args: Vec<OsString>,
    /// The working directory.
    pub cwd: PathBuf,
    /// The whole environment; nothing of the agent's is inherited.
    pub env: Vec<(OsString, OsString)>,
}

/// The command's standard streams, handed to it as they are.
#[derive(Debug)]
pub struct SharedStdio {
    /// Standard input.
    pub stdin: OwnedFd,
    /// Standard output.
    pub stdout: OwnedFd,
    /// Standard error.
    pub stderr: OwnedFd,
}

/// A command running in the agent's shared namespaces.
#[derive(Debug)]
pub struct SharedChild {
    connection: Arc<Connection>,
    id: u64,
    exited: Option<oneshot::Receiver<i32>>,
    status: Option<ExitStatus>,
    kill_on_drop: bool,
}

impl SharedChild {
    /// Runs `command` in the agent's namespaces (starting the helper on
    /// the first call) with `stdio`, as the leader of a new process group
    /// there. `None` when the platform refuses the namespaces (remembered
    /// and logged once; see [`refusal`]). Not killed on drop unless
    /// [`SharedChild::kill_on_drop`] says so.
    pub async fn spawn(
        command: &SharedCommand,
        stdio: SharedStdio,
    ) -> io::Result<Option<SharedChild>> {
        let Some(connection) = connection()? else {
            return Ok(None);
        };
        let memfd = write_payload(command)?;
        let len = u64::try_from(memfd.1).map_err(io::Error::other)?;
        let id = connection.next_id.fetch_add(1, Ordering::Relaxed);
        let (started_sender, started) = oneshot::channel();
        let (exited_sender, exited) = oneshot::channel();
        connection.waiters().insert(
            id,
            Waiter {
                started: Some(started_sender),
                exited: exited_sender,
            },
        );
        // From here a dropped future kills and releases the command.
        let mut child = SharedChild {
            connection: Arc::clone(&connection),
            id,
            exited: Some(exited),
            status: None,
            kill_on_drop: true,
        };
        connection.send(
            Record {
                kind: helper::RUN,
                value: 0,
                id,
                len,
            },
            &[
                stdio.stdin.as_raw_fd(),
                stdio.stdout.as_raw_fd(),
                stdio.stderr.as_raw_fd(),
                memfd.0.as_raw_fd(),
            ],
        )?;
        // The helper holds its own copies now; the agent's must go, or the
        // command's output would never reach end-of-file.
        drop(stdio);
        drop(memfd);
        match started.await {
            Ok(0) => {
                child.kill_on_drop = false;
                Ok(Some(child))
            }
            Ok(errno) => Err(io::Error::from_raw_os_error(errno)),
            Err(_) => Err(SharedError::HelperExited.into()),
        }
    }

    /// Whether dropping this handle kills the command's process group.
    pub fn kill_on_drop(&mut self, kill: bool) {
        self.kill_on_drop = kill;
    }

    /// Waits for the command itself to end and gives its wait status;
    /// `None` when the helper died first (and with it the command).
    pub async fn status(&mut self) -> Option<ExitStatus> {
        if let Some(exited) = self.exited.as_mut() {
            let status = exited.await.ok().map(ExitStatus::from_raw);
            self.exited = None;
            self.status = status;
        }
        self.status
    }

    /// Kills the command's process group with SIGKILL (the helper does;
    /// the group's ids are the namespace's). Harmless when it is gone.
    pub fn kill(&self) {
        // A failed send means the helper is gone, and the command with it.
        let _ = self.connection.send(
            Record {
                kind: helper::KILL,
                value: 0,
                id: self.id,
                len: 0,
            },
            &[],
        );
    }
}

impl Drop for SharedChild {
    fn drop(&mut self) {
        if self.kill_on_drop {
            self.kill();
        }
        self.connection.waiters().remove(&self.id);
        let _ = self.connection.send(
            Record {
                kind: helper::RELEASE,
                value: 0,
                id: self.id,
                len: 0,
            },
            &[],
        );
    }
}

/// What a command waits for from the helper.
#[derive(Debug)]
struct Waiter {
    /// 0 once it exec'd, else the errno.
    started: Option<oneshot::Sender<i32>>,
    /// Its raw wait status.
    exited: oneshot::Sender<i32>,
}

/// The agent's end of the socket to a live helper.
#[derive(Debug)]
struct Connection {
    socket: OwnedFd,
    next_id: AtomicU64,
    waiters: Mutex<HashMap<u64, Waiter>>,
    alive: AtomicBool,
}

/// The helper of this process, while it lives.
static CONNECTION: Mutex<Option<Arc<Connection>>> = Mutex::new(None);

/// The live helper, started when there is none; `None` when the
/// platform refuses the namespaces.
fn connection() -> io::Result<Option<Arc<Connection>>> {
    let mut current = CONNECTION
        .lock()
        .unwrap_or_else(|poison| poison.into_inner());
    if let Some(connection) = current.as_ref() {
        if connection.alive.load(Ordering::Acquire) {
            return Ok(Some(Arc::clone(connection)));
        }
    }
    if refusal().is_some() {
        return Ok(None);
    }
    match start() {
        Ok(connection) => {
            *current = Some(Arc::clone(&connection));
            Ok(Some(connection))
        }
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

/// Starts a helper from a thread of its own, which then reads its
/// replies until it is gone. Blocks for the namespace set-up (once per
/// agent).
fn start() -> io::Result<Arc<Connection>> {
    let (agent_end, helper_end) = socket_pair()?;
    let connection = Arc::new(Connection {
        socket: agent_end,
        next_id: AtomicU64::new(1),
        waiters: Mutex::new(HashMap::new()),
        alive: AtomicBool::new(true),
    });
    let reader = Arc::clone(&connection);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("goondan-sandbox".into())
        .spawn(move || {
            let started = linux::start_helper(helper_end.as_raw_fd());
            // Only the helper may hold its end: its exit must read as
            // end-of-file here.
            drop(helper_end);
            let helper_pid = started.as_ref().ok().copied();
            let _ = sender.send(started.map(|_| ()));
            if let Some(helper_pid) = helper_pid {
                reader.read_replies();
                linux::reap(helper_pid);
            }
        })?;
    receiver
        .recv()
        .map_err(|_| io::Error::from(SharedError::ThreadEnded))??;
    Ok(connection)
}

fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: socketpair with a live out-array; the two descriptors it
    // returns are owned by nothing else.
    unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        ) == -1
        {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

impl Connection {
    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
        self.waiters
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Sends one request with `fds` attached. A message of a sequenced
    /// packet socket is sent whole, so callers on several threads need no
    /// lock.
    fn send(&self, record: Record, fds: &[RawFd]) -> io::Result<()> {
        let bytes = record.encode();
        // Room for four descriptors, aligned for the header.
        let mut control = [0u64; 8];
        // SAFETY: sendmsg of stack buffers described by a stack msghdr;
        // the CMSG macros only walk that control buffer, sized for the at
        // most four descriptors written into it.
        let sent = unsafe {
            let mut iov = libc::iovec {
                iov_base: bytes.as_ptr() as *mut libc::c_void,
                iov_len: bytes.len(),
            };
            let mut message: libc::msghdr = std::mem::zeroed();
            message.msg_iov = &mut iov;
            message.msg_iovlen = 1;
            if !fds.is_empty() {
                let fd_bytes = std::mem::size_of_val(fds);
                message.msg_control = control.as_mut_ptr().cast();
                message.msg_controllen = libc::CMSG_SPACE(fd_bytes as u32) as _;
                let header = libc::CMSG_FIRSTHDR(&message);
                (*header).cmsg_level = libc::SOL_SOCKET;
                (*header).cmsg_type = libc::SCM_RIGHTS;
                (*header).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
                std::ptr::copy_nonoverlapping(
                    fds.as_ptr().cast::<u8>(),
                    libc::CMSG_DATA(header),
                    fd_bytes,
                );
            }
            libc::sendmsg(self.socket.as_raw_fd(), &message, libc::MSG_NOSIGNAL)
        };
        if sent == -1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The reader thread's loop: hands each reply to its command, until
    /// the helper is gone; then every waiting command learns it.
    fn read_replies(&self) {
        loop {
            let mut bytes = [0u8; RECORD];
            // SAFETY: recv into a stack buffer.
            let received = unsafe {
                libc::recv(
                    self.socket.as_raw_fd(),
                    bytes.as_mut_ptr().cast(),
                    bytes.len(),
                    0,
                )
            };
            if received == -1 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if received != RECORD as isize {
                break;
            }
            let reply = Record::decode(&bytes);
            let mut waiters = self.waiters();
            match reply.kind {
                helper::STARTED | helper::FAILED => {
                    let Some(waiter) = waiters.get_mut(&reply.id) else {
                        continue;
                    };
                    if let Some(started) = waiter.started.take() {
                        let _ = started.send(if reply.kind == helper::STARTED {
                            0
                        } else {
                            reply.value
                        });
                    }
                    if reply.kind == helper::FAILED {
                        waiters.remove(&reply.id);
                    }
                }
                helper::EXITED => {
                    if let Some(waiter) = waiters.remove(&reply.id) {
                        let _ = waiter.exited.send(reply.value);
                    }
                }
                _ => {}
            }
        }
        self.alive.store(false, Ordering::Release);
        self.waiters().clear();
    }
}

/// Writes `command` as the helper's [`payload`] into a fresh memfd;
/// the descriptor and the payload's length.
fn write_payload(command: &SharedCommand) -> io::Result<(OwnedFd, usize)> {
    let bytes = encode_payload(command)?;
    // SAFETY: memfd_create with a constant name; the descriptor it
    // returns is owned by nothing else.
    let memfd = unsafe {
        let fd = libc::memfd_create(c"goondan-bash".as_ptr(), libc::MFD_CLOEXEC);
        if fd == -1 {
            return Err(io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(fd)
    };
    let mut file = std::fs::File::from(memfd);
    file.write_all(&bytes)?;
    Ok((OwnedFd::from(file), bytes.len()))
}

/// The program as `execve` wants it: a name without a slash is looked
/// up in the command's own `PATH`, as std's spawn does.
fn resolve_program(command: &SharedCommand) -> OsString {
    use std::os::unix::fs::PermissionsExt;
    if command.program.as_bytes().contains(&b'/') {
        return command.program.clone();
    }
    let path = command
        .env
        .iter()
        .find(|(key, _)| key == "PATH")
        .map(|(_, value)| value.clone())
        .unwrap_or_default();
    std::env::split_paths(&path)
        .map(|folder| folder.join(&command.program))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|metadata| {
                metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
            })
        })
        .map_or_else(|| command.program.clone(), PathBuf::into_os_string)
}

fn encode_payload(command: &SharedCommand) -> io::Result<Vec<u8>> {
    use payload::{HEADER_WORDS, WORD};
    let program = resolve_program(command);
    let mut argv: Vec<OsString> = vec![command.program.clone()];
    argv.extend(command.args.iter().cloned());
    let envp: Vec<OsString> = command
        .env
        .iter()
        .map(|(key, value)| {
            let mut entry = key.clone();
            entry.push("=");
            entry.push(value);
            entry
        })
        .collect();
    let n_words = HEADER_WORDS + argv.len() + 1 + envp.len() + 1;
    let mut words = vec![0usize; n_words];
    let mut text = Vec::new();
    let mut add = |string: &OsStr| -> io::Result<usize> {
        if string.as_bytes().contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a program, argument, variable or directory holds a NUL byte",
            ));
        }
        let offset = n_words * WORD + text.len();
        text.extend_from_slice(string.as_bytes());
        text.push(0);
        Ok(offset)
    };
    words[0] = argv.len();
    words[1] = envp.len();
    words[2] = add(&program)?;
    words[3] = add(command.cwd.as_os_str())?;
    for (index, argument) in argv.iter().enumerate() {
        words[HEADER_WORDS + index] = add(argument)?;
    }
    let envp_start = HEADER_WORDS + argv.len() + 1;
    for (index, entry) in envp.iter().enumerate() {
        words[envp_start + index] = add(entry)?;
    }
    let mut bytes: Vec<u8> = words.iter().flat_map(|word| word.to_ne_bytes()).collect();
    bytes.extend_from_slice(&text);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_fixes_up_into_execves_arrays() {
        let command = SharedCommand {
            program: "/bin/sh".into(),
            args: vec!["-lc".into(), "echo hi".into()],
            cwd: "/tmp".into(),
            env: vec![("PATH".into(), "/bin".into())],
        };
        let bytes = encode_payload(&command).unwrap();
        let mut words = vec![0usize; bytes.len().div_ceil(payload::WORD)];
        // SAFETY: copies into a buffer at least as long.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast(), bytes.len());
        }
        // SAFETY: the buffer is live, aligned and `bytes.len()` long.
        let exec = unsafe { helper::fix_up(words.as_mut_ptr().cast(), bytes.len()) }.unwrap();
        let text = |pointer: *const libc::c_char| {
            // SAFETY: fix_up only yields pointers to NUL-terminated text
            // inside the buffer.
            unsafe { std::ffi::CStr::from_ptr(pointer) }
                .to_string_lossy()
                .into_owned()
        };
        let list = |mut array: *const *const libc::c_char| {
            let mut out = Vec::new();
            // SAFETY: both arrays end with a null pointer.
            unsafe {
                while !(*array).is_null() {
                    out.push(text(*array));
                    array = array.add(1);
                }
            }
            out
        };
        assert_eq!(text(exec.program), "/bin/sh");
        assert_eq!(text(exec.cwd), "/tmp");
        assert_eq!(list(exec.argv), ["/bin/sh", "-lc", "echo hi"]);
        assert_eq!(list(exec.envp), ["PATH=/bin"]);
    }
}
