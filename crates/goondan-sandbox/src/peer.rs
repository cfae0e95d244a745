//! Who is at the other end of a local socket: a person's process, or one
//! that something a Turn ran started (issue 47 #1).
//!
//! The orchestrator's control socket decides approvals, cancels, forks,
//! rewinds and stops. A bash command, a script tool or anything they start
//! runs as the same user as `gdn`, so file modes cannot keep them from the
//! socket; what can tell them apart is where a process comes from, which
//! the kernel reports and no process can rewrite about itself:
//!
//! * **Ancestry.** A process whose chain of parents reaches the
//!   orchestrator is one of its descendants: an agent, a connector, or
//!   something they started. The orchestrator itself is not.
//! * **The agent mark.** Every AgentProcess sets `no_new_privs` on itself
//!   as it starts ([`mark_turn_process`]); the flag is inherited by
//!   everything it starts and can never be cleared, so a job that
//!   double-forked out of the agent's tree (and was adopted by `init`)
//!   still carries it. It tells only while the orchestrator itself runs
//!   without the flag (not under Docker's `no-new-privileges` or
//!   Kubernetes' `allowPrivilegeEscalation: false`, where every process
//!   has it).
//! * **Nested namespaces.** A process in a user namespace created below
//!   the orchestrator's runs in a sandbox (the bash and plugin sandboxes
//!   make one per agent).
//!
//! A process of the same user started outside the swarm (a person's shell,
//! a cron job) is none of these: it is an operator. SECURITY.md says so.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// How far up a chain of parents [`PeerOrigin`] looks; deeper trees than
/// this are refused as unknown rather than walked without end.
const MAX_ANCESTRY: usize = 256;
/// How far up nested user namespaces [`PeerOrigin`] looks.
const MAX_NAMESPACE_DEPTH: usize = 33;
/// The longest executable path recorded for a peer.
const MAX_EXE_CHARS: usize = 256;

/// Where a peer process comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerOrigin {
    /// A process from outside the swarm: a person's.
    Outside,
    /// A process the swarm (something a Turn ran) started.
    Inside(InsideReason),
}

/// What showed that a peer comes from inside the swarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsideReason {
    /// Its chain of parents reaches the orchestrator.
    Descendant,
    /// It carries the mark every AgentProcess leaves on what it starts.
    AgentMark,
    /// It runs in a user namespace created below the orchestrator's.
    NestedNamespace,
    /// Where it comes from could not be read: refused to be safe.
    Unknown,
}

impl fmt::Display for InsideReason {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            InsideReason::Descendant => "it descends from the orchestrator (an agent, a connector or something they started)",
            InsideReason::AgentMark => "it was started by an agent process (it carries the no_new_privs flag every agent sets on what it runs)",
            InsideReason::NestedNamespace => "it runs in a sandbox's user namespace",
            InsideReason::Unknown => "where it comes from could not be read from /proc",
        })
    }
}

/// A peer as the kernel reports it, for the record of who acted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerIdentity {
    /// Its user id.
    pub uid: u32,
    /// Its pid in this process's PID namespace (`None` when it lives
    /// outside it).
    pub pid: Option<i32>,
    /// Its executable, when it could be read.
    pub exe: Option<PathBuf>,
}

impl PeerIdentity {
    /// The peer with `uid` and `pid` (from `SO_PEERCRED`), its executable
    /// read from `/proc`.
    pub fn new(uid: u32, pid: Option<i32>) -> PeerIdentity {
        let exe = pid
            .filter(|pid| *pid > 0)
            .and_then(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).ok());
        PeerIdentity { uid, pid, exe }
    }
}

impl fmt::Display for PeerIdentity {
    /// `uid-<uid>:pid-<pid>:<exe>`, as recorded with what the peer did.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "uid-{}", self.uid)?;
        match self.pid {
            Some(pid) => write!(formatter, ":pid-{pid}")?,
            None => formatter.write_str(":pid-unknown")?,
        }
        match &self.exe {
            Some(exe) => {
                let exe = exe.to_string_lossy();
                let cut: String = exe.chars().take(MAX_EXE_CHARS).collect();
                // A control character in a path must not forge a record.
                let clean: String = cut
                    .chars()
                    .map(|c| if c.is_control() { '?' } else { c })
                    .collect();
                write!(formatter, ":{clean}")
            }
            None => formatter.write_str(":exe-unknown"),
        }
    }
}

/// Where the process `pid` (a peer's, from `SO_PEERCRED`) comes from, seen
/// from this process (the orchestrator). `None` is a peer outside this
/// PID namespace, which no descendant can be.
pub fn origin(pid: Option<i32>) -> PeerOrigin {
    let Some(pid) = pid.filter(|pid| *pid > 0) else {
        return PeerOrigin::Outside;
    };
    if pid == own_pid() {
        return PeerOrigin::Outside;
    }
    match ancestry_reaches(pid, own_pid()) {
        Ok(true) => return PeerOrigin::Inside(InsideReason::Descendant),
        Ok(false) => {}
        Err(_) => return PeerOrigin::Inside(InsideReason::Unknown),
    }
    match no_new_privs(&format!("/proc/{pid}/status")) {
        Ok(true) if !own_no_new_privs() => return PeerOrigin::Inside(InsideReason::AgentMark),
        Ok(_) => {}
        Err(_) => return PeerOrigin::Inside(InsideReason::Unknown),
    }
    if in_nested_user_namespace(pid) {
        return PeerOrigin::Inside(InsideReason::NestedNamespace);
    }
    PeerOrigin::Outside
}

/// Marks this process as one that runs Turns: sets `no_new_privs`, which
/// everything it starts inherits and nothing can clear (see the module
/// docs). A set-uid program a command runs then gains no privileges
/// either. Call once, first thing, in an AgentProcess.
pub fn mark_turn_process() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(())
    }
}

fn own_pid() -> i32 {
    i32::try_from(std::process::id()).unwrap_or(i32::MAX)
}

fn own_no_new_privs() -> bool {
    static OWN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| no_new_privs("/proc/self/status").unwrap_or(true))
}

/// The `NoNewPrivs:` line of a `/proc/<pid>/status` file.
fn no_new_privs(status_file: &str) -> io::Result<bool> {
    let status = read_bounded(status_file)?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("NoNewPrivs:"))
        .map(|value| value.trim() == "1")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no NoNewPrivs line"))
}

/// True when `ancestor` is on the chain of parents of `pid`.
fn ancestry_reaches(pid: i32, ancestor: i32) -> io::Result<bool> {
    let mut current = pid;
    for _ in 0..MAX_ANCESTRY {
        let parent = parent_of(current)?;
        if parent == ancestor {
            return Ok(true);
        }
        if parent <= 1 {
            return Ok(false);
        }
        current = parent;
    }
    Err(io::Error::other("the chain of parents is too deep"))
}

/// The parent pid in `/proc/<pid>/stat`: the fourth field, counted after
/// the command name's closing parenthesis (the name may hold spaces and
/// parentheses of its own).
fn parent_of(pid: i32) -> io::Result<i32> {
    let stat = read_bounded(&format!("/proc/{pid}/stat"))?;
    parse_parent(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unreadable /proc stat line"))
}

fn parse_parent(stat: &str) -> Option<i32> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_ascii_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// Reads a small `/proc` file, never more than 16 KiB of it.
fn read_bounded(path: &str) -> io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(16 * 1024)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// True when `pid` runs in a user namespace nested below this process's
/// (`NS_GET_PARENT` up the chain reaches ours). A namespace that cannot
/// be opened (a non-dumpable peer of another user) tells nothing.
#[cfg(target_os = "linux")]
fn in_nested_user_namespace(pid: i32) -> bool {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::MetadataExt;
    /// `_IO(0xb7, 0x2)` from `linux/nsfs.h`.
    const NS_GET_PARENT: u64 = 0xb702;
    let identity = |file: &std::fs::File| file.metadata().map(|m| (m.dev(), m.ino())).ok();
    let Some(own) = std::fs::File::open("/proc/self/ns/user")
        .ok()
        .and_then(|file| identity(&file))
    else {
        return false;
    };
    let Ok(mut current) = std::fs::File::open(format!("/proc/{pid}/ns/user")) else {
        return false;
    };
    if identity(&current) == Some(own) {
        return false;
    }
    for _ in 0..MAX_NAMESPACE_DEPTH {
        // SAFETY: an ioctl without argument on a descriptor we own: a
        // new descriptor on success, -1 (EPERM past the top) otherwise.
        let parent = unsafe { nix::libc::ioctl(current.as_raw_fd(), NS_GET_PARENT as _) };
        if parent < 0 {
            return false;
        }
        // SAFETY: the ioctl returned a fresh descriptor only we hold.
        current = unsafe { std::fs::File::from_raw_fd(parent) };
        match identity(&current) {
            Some(found) if found == own => return true,
            Some(_) => {}
            None => return false,
        }
    }
    false
}

#[cfg(not(target_os = "linux"))]
fn in_nested_user_namespace(_pid: i32) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_after_the_last_parenthesis_of_the_name() {
        assert_eq!(parse_parent("42 (gdn) S 7 42 42 0"), Some(7));
        assert_eq!(parse_parent("42 (a) b) (c) R 9 1 1"), Some(9));
        assert_eq!(parse_parent("42 (sh) S"), None);
        assert_eq!(parse_parent("garbage"), None);
    }

    #[test]
    fn this_process_is_outside_and_its_child_is_inside() {
        assert_eq!(origin(Some(own_pid())), PeerOrigin::Outside);
        assert_eq!(origin(None), PeerOrigin::Outside);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        assert_eq!(
            origin(Some(pid)),
            PeerOrigin::Inside(InsideReason::Descendant)
        );
        child.kill().unwrap();
        child.wait().unwrap();
        // The parent of this test binary (cargo, a shell) is outside.
        let parent = parent_of(own_pid()).unwrap();
        if parent > 1 && !own_no_new_privs() {
            assert_eq!(origin(Some(parent)), PeerOrigin::Outside);
        }
    }

    #[test]
    fn an_identity_names_uid_pid_and_executable_without_control_characters() {
        let identity = PeerIdentity {
            uid: 0,
            pid: Some(12),
            exe: Some(PathBuf::from("/usr/bin/g\ndn")),
        };
        assert_eq!(identity.to_string(), "uid-0:pid-12:/usr/bin/g?dn");
        let unknown = PeerIdentity {
            uid: 1000,
            pid: None,
            exe: None,
        };
        assert_eq!(unknown.to_string(), "uid-1000:pid-unknown:exe-unknown");
        let own = PeerIdentity::new(0, Some(own_pid()));
        assert!(own.exe.is_some());
    }
}
