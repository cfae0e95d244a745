//! Following a log as it grows: the complete lines appended since the last
//! look, in bounded memory. The Studio's live view and `gdn logs -f` both
//! poll through [`FollowedLog`].
//!
//! Each look reads at most [`MAX_READ_PER_LOOK`] bytes (the rest comes on
//! the next look, so one burst cannot hold the caller), and a line longer
//! than the cap is dropped up to its newline instead of growing the
//! buffer: a writer that appends a line with no end (a 1 GB line, say)
//! costs a follower at most the cap plus one look's read. A line is handed
//! over only once its newline is written, so a write in progress is never
//! seen half. What it does not do: read what was there before it began
//! (that is [`crate::tail`]'s job).

use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Bytes read from the file per look, at most.
pub const MAX_READ_PER_LOOK: u64 = 1024 * 1024;

/// One followed log file.
#[derive(Debug)]
pub struct FollowedLog {
    path: PathBuf,
    offset: u64,
    /// Bytes after the last newline, waiting for the rest of their line.
    partial: Vec<u8>,
    /// The line being appended is over the cap: its bytes are dropped up
    /// to its newline.
    skipping: bool,
    max_line_bytes: usize,
}

impl FollowedLog {
    /// Follows `path` from byte `offset` (its length, to see only what is
    /// appended from now on); a line longer than `max_line_bytes` is
    /// dropped.
    pub fn from_offset(path: PathBuf, offset: u64, max_line_bytes: usize) -> Self {
        FollowedLog {
            path,
            offset,
            partial: Vec::new(),
            skipping: false,
            max_line_bytes,
        }
    }

    /// The followed file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The complete, non-empty lines appended since the last look (without
    /// their newlines). A missing file has none; a file that became
    /// shorter (deleted and made again) is followed from its start.
    pub fn new_lines(&mut self) -> std::io::Result<Vec<Vec<u8>>> {
        let length = match std::fs::metadata(&self.path) {
            Ok(metadata) => metadata.len(),
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        if length < self.offset {
            self.offset = 0;
            self.partial.clear();
            self.skipping = false;
        }
        if length == self.offset {
            return Ok(Vec::new());
        }
        let mut file = std::fs::File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut chunk = Vec::new();
        file.take((length - self.offset).min(MAX_READ_PER_LOOK))
            .read_to_end(&mut chunk)?;
        self.offset += chunk.len() as u64;
        let mut new_bytes: &[u8] = &chunk;
        if self.skipping {
            let Some(newline) = chunk.iter().position(|&byte| byte == b'\n') else {
                return Ok(Vec::new());
            };
            new_bytes = &chunk[newline + 1..];
            self.skipping = false;
        }
        self.partial.extend_from_slice(new_bytes);
        let complete = match self.partial.iter().rposition(|&byte| byte == b'\n') {
            Some(last_newline) => {
                let rest = self.partial.split_off(last_newline + 1);
                std::mem::replace(&mut self.partial, rest)
            }
            None => Vec::new(),
        };
        if self.partial.len() > self.max_line_bytes {
            self.partial = Vec::new();
            self.skipping = true;
        }
        Ok(complete
            .split(|&byte| byte == b'\n')
            .filter(|line| !line.is_empty() && line.len() <= self.max_line_bytes)
            .map(<[u8]>::to_vec)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn append(path: &Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
    }

    #[test]
    fn hands_over_whole_lines_and_drops_one_over_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"before\n");
        let mut followed = FollowedLog::from_offset(path.clone(), 7, 100);
        assert!(followed.new_lines().unwrap().is_empty());
        append(&path, b"one\ntw");
        assert_eq!(followed.new_lines().unwrap(), [b"one".to_vec()]);
        append(&path, b"o\n");
        assert_eq!(followed.new_lines().unwrap(), [b"two".to_vec()]);
        // A line that goes on and on is dropped, and what follows it comes.
        for _ in 0..3 {
            append(&path, &[b'x'; 80]);
            followed.new_lines().unwrap();
            assert!(followed.partial.len() <= 100 + 80);
        }
        append(&path, b"xx\nthree\n");
        assert_eq!(followed.new_lines().unwrap(), [b"three".to_vec()]);
        std::fs::write(&path, b"new\n").unwrap();
        assert_eq!(followed.new_lines().unwrap(), [b"new".to_vec()]);
    }
}
