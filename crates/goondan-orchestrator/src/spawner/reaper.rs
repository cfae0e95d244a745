//! Learning that children ended without holding a descriptor for each.
//!
//! `tokio::process` opens a pidfd per child on Linux and keeps it for the
//! child's whole life. An orchestrator's open descriptors are bounded by
//! its hard `RLIMIT_NOFILE` (20,000 on this project's reference machine,
//! and raising it takes privileges), so a descriptor per child on top of
//! its IPC socket caps a host well below the number of agents its memory
//! holds. The [`Reaper`] instead keeps every child [`LocalSpawner`]
//! started in one table and reaps them when `SIGCHLD` arrives: it peeks
//! at which child ended (`waitid` with `WNOWAIT`, which reaps nothing) and
//! reaps exactly that one, so an exit costs a lookup, not a pass over
//! every child. A child this table does not know about (one started by
//! someone else in the process) is left for its owner; only then does the
//! reaper ask each of its own children in turn.
//!
//! Children are only ever reaped through [`std::process::Child::try_wait`]
//! on their own pid, never `waitpid(-1)`, so no other part of the process
//! loses a child's status to this one.
//!
//! [`LocalSpawner`]: super::LocalSpawner

use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use std::collections::HashMap;
use std::process::Child;
use std::sync::{Mutex, OnceLock};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

/// The children of this process that [`LocalSpawner`](super::LocalSpawner)
/// started and that have not been reaped yet.
pub(super) struct Reaper {
    children: Mutex<HashMap<u32, Watched>>,
}

struct Watched {
    child: Child,
    /// Told the exit code (`None` when a signal ended the child).
    exited: oneshot::Sender<Option<i32>>,
}

impl Reaper {
    /// The process's reaper. The first call starts its listener: a thread
    /// of its own (with a one-thread runtime for the signal) rather than a
    /// task on the caller's runtime, so it outlives whichever runtime
    /// started it (tests run many) and is there before any child it will
    /// watch exists, so no exit goes unannounced.
    pub(super) fn get() -> std::io::Result<&'static Reaper> {
        static REAPER: OnceLock<std::io::Result<Reaper>> = OnceLock::new();
        REAPER
            .get_or_init(Reaper::listen)
            .as_ref()
            .map_err(|error| std::io::Error::new(error.kind(), error.to_string()))
    }

    fn listen() -> std::io::Result<Reaper> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()?;
        // Registered here, before `get` returns, not inside the thread.
        let mut child_ended = {
            let _context = runtime.enter();
            signal(SignalKind::child())?
        };
        std::thread::Builder::new()
            .name("gdn-reaper".into())
            .spawn(move || {
                runtime.block_on(async move {
                    while child_ended.recv().await.is_some() {
                        if let Ok(reaper) = Reaper::get() {
                            reaper.reap();
                        }
                    }
                })
            })?;
        Ok(Reaper {
            children: Mutex::new(HashMap::new()),
        })
    }

    /// Takes `child` into the table; the receiver resolves when it ends.
    pub(super) fn watch(&self, child: Child) -> oneshot::Receiver<Option<i32>> {
        let (exited, ended) = oneshot::channel();
        let pid = child.id();
        let mut children = self.children();
        children.insert(pid, Watched { child, exited });
        // It may have ended before it was in the table, and that SIGCHLD
        // found nothing to reap: look once now, under the same lock.
        reap_one(&mut children, pid);
        ended
    }

    /// Sends SIGKILL to the child `pid` if it has not been reaped (a pid
    /// no longer in the table may already belong to another process).
    pub(super) fn kill(&self, pid: u32) {
        if let Some(watched) = self.children().get_mut(&pid) {
            let _ = watched.child.kill();
        }
    }

    fn reap(&self) {
        let mut children = self.children();
        loop {
            // Which child ended, without reaping it.
            let peeked = waitid(
                Id::All,
                WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
            );
            let pid = match peeked {
                // None ended, or there are no children at all.
                Ok(WaitStatus::StillAlive) | Err(_) => return,
                Ok(status) => status.pid().map(|pid| pid.as_raw() as u32),
            };
            match pid {
                Some(pid) if reap_one(&mut children, pid) => {}
                // Someone else's child ended: ask each of ours.
                _ => {
                    let pids: Vec<u32> = children.keys().copied().collect();
                    for pid in pids {
                        reap_one(&mut children, pid);
                    }
                    return;
                }
            }
        }
    }

    fn children(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Watched>> {
        // A panic while holding the lock leaves a table that is still
        // consistent (every change is one insert or remove).
        self.children
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Reaps `pid` if it is ours and ended, and tells its watcher; true when
/// it did.
fn reap_one(children: &mut HashMap<u32, Watched>, pid: u32) -> bool {
    let Some(watched) = children.get_mut(&pid) else {
        return false;
    };
    let code = match watched.child.try_wait() {
        Ok(Some(status)) => status.code(),
        Ok(None) => return false,
        // The status is lost (someone reaped it): it ended all the same.
        Err(_) => None,
    };
    if let Some(watched) = children.remove(&pid) {
        let _ = watched.exited.send(code);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::Duration;

    #[tokio::test]
    async fn an_exit_code_and_a_kill_reach_their_watchers() {
        let reaper = Reaper::get().unwrap();
        let ends_with_3 = reaper.watch(Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap());
        let sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        let sleeper_pid = sleeper.id();
        let sleeps = reaper.watch(sleeper);
        let ended = tokio::time::timeout(Duration::from_secs(10), ends_with_3).await;
        assert_eq!(ended.unwrap().unwrap(), Some(3));
        reaper.kill(sleeper_pid);
        let ended = tokio::time::timeout(Duration::from_secs(10), sleeps).await;
        assert_eq!(ended.unwrap().unwrap(), None, "killed by a signal");
        assert!(!reaper.children().contains_key(&sleeper_pid), "reaped");
    }

    #[tokio::test]
    async fn a_child_it_does_not_watch_is_left_to_its_owner() {
        let reaper = Reaper::get().unwrap();
        // Not in the table: its exit wakes the reaper, which must not
        // take its status.
        let mut theirs = Command::new("true").spawn().unwrap();
        let ours = reaper.watch(
            Command::new("sh")
                .args(["-c", "sleep 0.2; exit 4"])
                .spawn()
                .unwrap(),
        );
        let ended = tokio::time::timeout(Duration::from_secs(10), ours).await;
        assert_eq!(ended.unwrap().unwrap(), Some(4));
        assert!(
            theirs.wait().unwrap().success(),
            "its owner still gets its status"
        );
    }
}
