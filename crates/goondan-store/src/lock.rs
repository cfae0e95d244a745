//! The single-writer lock of an instance: an advisory lock on
//! `instance.lock` in the instance folder, held as long as any handle of the
//! instance lives, with the holder's pid written inside so a refused opener
//! can name it.
//!
//! The lock is `flock`-style (`File::try_lock`): it belongs to the open
//! file, so two opens in one process exclude each other just as two
//! processes do, and the kernel drops it when the holder dies, even by
//! SIGKILL. A stale pid left in the file after such a death is harmless: it
//! is only read after a lock attempt failed, that is while someone holds it.

use crate::StoreError;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a waiting open retries.
const RETRY_INTERVAL: Duration = Duration::from_millis(10);

/// A held instance lock; released on drop.
#[derive(Debug)]
pub(crate) struct InstanceLock {
    file: File,
}

impl InstanceLock {
    /// Takes the lock at `path`, retrying for up to `wait`.
    pub(crate) fn acquire(
        path: &Path,
        instance_key: &str,
        wait: Duration,
    ) -> Result<Self, StoreError> {
        let mut file = crate::owner_only::open_options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|source| StoreError::io("opening", path, source))?;
        let deadline = Instant::now() + wait;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(std::fs::TryLockError::WouldBlock) => {
                    if Instant::now() >= deadline {
                        return Err(StoreError::InstanceLocked {
                            instance_key: instance_key.to_string(),
                            lock_path: path.to_path_buf(),
                            holder_pid: read_pid(&mut file),
                        });
                    }
                    std::thread::sleep(RETRY_INTERVAL);
                }
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(StoreError::io("locking", path, source));
                }
            }
        }
        let pid = std::process::id().to_string();
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| file.write_all(pid.as_bytes()))
            .map_err(|source| StoreError::io("writing", path, source))?;
        Ok(InstanceLock { file })
    }
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        // Clearing the pid first keeps a later refusal from naming a process
        // that let go; the unlock itself also happens when the file closes.
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// The pid the holder wrote, if the file holds one.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_acquire_is_refused_with_the_holder_pid_until_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("instance.lock");
        let held = InstanceLock::acquire(&path, "k", Duration::ZERO).unwrap();
        let error = InstanceLock::acquire(&path, "k", Duration::from_millis(30)).unwrap_err();
        match error {
            StoreError::InstanceLocked { holder_pid, .. } => {
                assert_eq!(holder_pid, Some(std::process::id()));
            }
            other => panic!("unexpected {other:?}"),
        }
        drop(held);
        InstanceLock::acquire(&path, "k", Duration::ZERO).unwrap();
    }
}
