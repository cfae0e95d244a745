//! One log followed as it grows: the complete lines appended since the
//! last look, in bounded memory, across the file being cut back,
//! truncated or replaced.
//!
//! Each look reads at most [`MAX_READ_PER_LOOK`] bytes (the rest comes on
//! the next look, so one burst cannot hold the caller), and a line longer
//! than the cap is dropped up to its newline and counted instead of
//! growing the buffer: a writer that appends a line with no end (a 1 GB
//! line, say) costs a follower at most the cap plus one look's read. A
//! line is handed over only once its newline is written, so a write in
//! progress is never seen half.
//!
//! # When the file changes under it
//!
//! No file handle is kept between looks (a follower of every instance of
//! a workspace would hold one descriptor per instance, in the process of
//! `gdn run` that also holds the orchestrator's children). Instead a look
//! knows the file by its device and inode, and by the last
//! [`ANCHOR_BYTES`] bytes it read before two places: where it stopped
//! reading, and where its last complete line ended. Each look reads those
//! bytes again with what is new and compares them:
//!
//! - same file, same bytes before where it stopped: plain appends;
//! - same file, shorter than where it stopped or other bytes there, but
//!   the same bytes before the end of the last complete line: a torn last
//!   line was cut away (the writer's `jsonl::repair_torn_tail`); it goes
//!   on from that line's start, emitting nothing twice;
//! - another file at the path (deleted and made again, renamed over), or
//!   other bytes before the last complete line (truncated, as
//!   `gdn instance restart --fresh` does, then written again): the file is
//!   new to it and is read from its start.
//!
//! What a replaced file gained after the last look and before it was
//! replaced is not read (that would need a handle kept open). Nothing in
//! this crate replaces a runtime-event log: a reset truncates it in place,
//! a fork gives the new instance a log of its own and a rewind leaves it
//! as it is. What it does not do: read what was there before it began
//! (that is [`crate::tail`]'s job).

use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Bytes read from the file per look, at most.
pub const MAX_READ_PER_LOOK: u64 = 1024 * 1024;

/// Bytes before a known place compared at each look to tell an append
/// from a rewrite: enough to hold most of a runtime event's line, with
/// its timestamp and span id, so two different files rarely agree there.
pub const ANCHOR_BYTES: usize = 256;

/// One followed log file.
#[derive(Debug)]
pub struct FollowedLog {
    path: PathBuf,
    /// Bytes of the file consumed so far (the start of the next read).
    offset: u64,
    /// The bytes just before `offset`, as read (`None` until a read).
    anchor: Option<Vec<u8>>,
    /// Where the last complete line ended (`offset` less what is held in
    /// `partial` or skipped).
    line_end: u64,
    /// The bytes just before `line_end`, as read (`None` until a read).
    line_anchor: Option<Vec<u8>>,
    /// Device and inode of the file last read.
    identity: Option<(u64, u64)>,
    /// Bytes after the last newline, waiting for the rest of their line.
    partial: Vec<u8>,
    /// The line being appended is over the cap: its bytes are dropped up
    /// to its newline.
    skipping: bool,
    max_line_bytes: usize,
    max_read_per_look: u64,
    n_long_lines: u64,
    n_rewrites: u64,
}

impl FollowedLog {
    /// Follows `path` from byte `offset` (its length, to see only what is
    /// appended from now on; the end of what a reader of its history saw,
    /// to go on from there); a line longer than `max_line_bytes` is
    /// dropped.
    pub fn from_offset(path: PathBuf, offset: u64, max_line_bytes: usize) -> Self {
        FollowedLog {
            path,
            offset,
            anchor: None,
            line_end: offset,
            line_anchor: None,
            identity: None,
            partial: Vec::new(),
            skipping: false,
            max_line_bytes,
            max_read_per_look: MAX_READ_PER_LOOK,
            n_long_lines: 0,
            n_rewrites: 0,
        }
    }

    /// Follows `path` from its current end (from its start when it does
    /// not exist yet).
    pub fn from_end(path: PathBuf, max_line_bytes: usize) -> Self {
        let length = std::fs::metadata(&path).map_or(0, |metadata| metadata.len());
        FollowedLog::from_offset(path, length, max_line_bytes)
    }

    /// Reads at most `bytes` per look instead of [`MAX_READ_PER_LOOK`].
    pub fn with_read_per_look(mut self, bytes: u64) -> Self {
        self.max_read_per_look = bytes.max(1);
        self
    }

    /// The followed file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines over the cap dropped so far.
    pub fn n_long_lines(&self) -> u64 {
        self.n_long_lines
    }

    /// How often the file was found replaced or rewritten and read again
    /// from its start.
    pub fn n_rewrites(&self) -> u64 {
        self.n_rewrites
    }

    /// The complete, non-empty lines appended since the last look (without
    /// their newlines). A missing file has none.
    pub fn new_lines(&mut self) -> std::io::Result<Vec<Vec<u8>>> {
        let metadata = match std::fs::metadata(&self.path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let identity = file_identity(&metadata);
        if self.identity.is_some_and(|known| known != identity) {
            self.restart();
        }
        self.identity = Some(identity);
        let length = metadata.len();
        if length < self.offset {
            self.shrunk(length)?;
        }
        // A first look reads the bytes before where it starts, to know
        // the file by them from then on.
        if length == self.offset && self.anchor.is_some() {
            return Ok(Vec::new());
        }
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let mut n_mismatches = 0;
        let (before, chunk) = loop {
            let n_before = self.anchor.as_ref().map_or_else(
                || {
                    usize::try_from(self.offset)
                        .unwrap_or(usize::MAX)
                        .min(ANCHOR_BYTES)
                },
                Vec::len,
            );
            let start = self.offset - n_before as u64;
            file.seek(SeekFrom::Start(start))?;
            let mut bytes = Vec::new();
            (&mut file)
                .take(n_before as u64 + self.max_read_per_look)
                .read_to_end(&mut bytes)?;
            if bytes.len() < n_before {
                // Shorter than it was a moment ago: look again next time.
                return Ok(Vec::new());
            }
            let chunk = bytes.split_off(n_before);
            match &self.anchor {
                // Changing while it is looked at: read it all again.
                Some(anchor) if *anchor != bytes && n_mismatches > 1 => self.restart(),
                Some(anchor) if *anchor != bytes => self.rewritten(&mut file)?,
                _ => break (bytes, chunk),
            }
            n_mismatches += 1;
        };
        Ok(self.take(before, chunk))
    }

    /// Hands over the complete lines of `chunk`, read at `offset` after
    /// `before` (the bytes just before it).
    fn take(&mut self, before: Vec<u8>, chunk: Vec<u8>) -> Vec<Vec<u8>> {
        let chunk_start = self.offset;
        self.offset += chunk.len() as u64;
        let mut window = before;
        window.extend_from_slice(&chunk);
        let window_start = self.offset - window.len() as u64;
        self.anchor = Some(tail_of(&window, ANCHOR_BYTES).to_vec());
        if let Some(last_newline) = chunk.iter().rposition(|&byte| byte == b'\n') {
            self.line_end = chunk_start + last_newline as u64 + 1;
            let end_in_window = (self.line_end - window_start) as usize;
            self.line_anchor = Some(tail_of(&window[..end_in_window], ANCHOR_BYTES).to_vec());
        } else if self.line_anchor.is_none() && self.partial.is_empty() && !self.skipping {
            // Nothing complete yet: the bytes before the start point are
            // the last complete line's end.
            let end_in_window = (self.line_end.saturating_sub(window_start)) as usize;
            self.line_anchor = Some(tail_of(&window[..end_in_window], ANCHOR_BYTES).to_vec());
        }
        let mut new_bytes: &[u8] = &chunk;
        if self.skipping {
            let Some(newline) = chunk.iter().position(|&byte| byte == b'\n') else {
                return Vec::new();
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
            self.n_long_lines += 1;
        }
        let mut lines = Vec::new();
        for line in complete.split(|&byte| byte == b'\n') {
            if line.len() > self.max_line_bytes {
                self.n_long_lines += 1;
            } else if !line.is_empty() {
                lines.push(line.to_vec());
            }
        }
        lines
    }

    /// The file is shorter than what was read of it.
    fn shrunk(&mut self, length: u64) -> std::io::Result<()> {
        if length < self.line_end {
            self.restart();
            return Ok(());
        }
        match std::fs::File::open(&self.path) {
            Ok(mut file) => self.rewritten(&mut file),
            Err(error) if error.kind() == ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The bytes before where the last read stopped changed: goes on from
    /// the end of the last complete line when what is before it is as
    /// read (a torn line cut away), else from the file's start.
    fn rewritten(&mut self, file: &mut std::fs::File) -> std::io::Result<()> {
        let kept = match &self.line_anchor {
            Some(line_anchor) => {
                let start = self.line_end - line_anchor.len() as u64;
                file.seek(SeekFrom::Start(start))?;
                let mut bytes = Vec::new();
                (&mut *file)
                    .take(line_anchor.len() as u64)
                    .read_to_end(&mut bytes)?;
                bytes == *line_anchor
            }
            None => false,
        };
        if kept {
            self.offset = self.line_end;
            self.anchor = self.line_anchor.clone();
            self.partial.clear();
            self.skipping = false;
        } else {
            self.restart();
        }
        Ok(())
    }

    /// Reads the file again from its start.
    fn restart(&mut self) {
        self.offset = 0;
        self.anchor = Some(Vec::new());
        self.line_end = 0;
        self.line_anchor = Some(Vec::new());
        self.partial.clear();
        self.skipping = false;
        self.n_rewrites += 1;
    }
}

/// The last `n` bytes of `bytes` (all of them when shorter).
fn tail_of(bytes: &[u8], n: usize) -> &[u8] {
    &bytes[bytes.len().saturating_sub(n)..]
}

#[cfg(unix)]
fn file_identity(metadata: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (metadata.dev(), metadata.ino())
}

#[cfg(not(unix))]
fn file_identity(_metadata: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Cuts `path` to `length` bytes in place, as a writer's repair or a
    /// reset does.
    fn cut(path: &Path, length: u64) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(length)
            .unwrap();
    }

    fn append(path: &Path, bytes: &[u8]) {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
    }

    fn lines(followed: &mut FollowedLog) -> Vec<String> {
        followed
            .new_lines()
            .unwrap()
            .into_iter()
            .map(|line| String::from_utf8(line).unwrap())
            .collect()
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
        assert_eq!(followed.n_long_lines(), 1);
        // A complete line over the cap in one read is counted too.
        append(&path, &[b'y'; 150]);
        append(&path, b"\nfour\n");
        assert_eq!(lines(&mut followed), ["four"]);
        assert_eq!(followed.n_long_lines(), 2);
    }

    #[test]
    fn a_burst_comes_over_several_looks_of_bounded_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut followed = FollowedLog::from_offset(path.clone(), 0, 100).with_read_per_look(10);
        append(&path, b"aaaa\nbbbb\ncccc\ndddd\n");
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.extend(lines(&mut followed));
        }
        assert_eq!(seen, ["aaaa", "bbbb", "cccc", "dddd"]);
        assert!(lines(&mut followed).is_empty());
    }

    /// A torn last line cut away by the writer, then written whole: no
    /// line twice, none lost.
    #[test]
    fn a_torn_tail_cut_away_is_gone_on_from_the_last_whole_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"one\n");
        let mut followed = FollowedLog::from_offset(path.clone(), 0, 100);
        assert_eq!(lines(&mut followed), ["one"]);
        append(&path, b"{\"torn");
        assert!(lines(&mut followed).is_empty());
        // The writer repairs the tail (shorter than read), then appends.
        cut(&path, 4);
        assert!(lines(&mut followed).is_empty());
        append(&path, b"two\n");
        assert_eq!(lines(&mut followed), ["two"]);
        // The same, but written past the torn fragment before the look.
        append(&path, b"{\"tor");
        assert!(lines(&mut followed).is_empty());
        let length = std::fs::metadata(&path).unwrap().len();
        cut(&path, length - 5);
        append(&path, b"three, longer than the fragment\n");
        assert_eq!(lines(&mut followed), ["three, longer than the fragment"]);
        assert_eq!(followed.n_rewrites(), 0);
    }

    #[test]
    fn a_truncated_or_replaced_file_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        append(&path, b"old one\nold two\n");
        let mut followed = FollowedLog::from_end(path.clone(), 100);
        assert!(lines(&mut followed).is_empty());
        // Truncated in place and written again, past where it was read to,
        // before the next look.
        cut(&path, 0);
        append(&path, b"new one, a longer line\nnew two\n");
        assert_eq!(lines(&mut followed), ["new one, a longer line", "new two"]);
        assert_eq!(followed.n_rewrites(), 1);
        // Truncated and written again, shorter.
        std::fs::write(&path, b"short\n").unwrap();
        assert_eq!(lines(&mut followed), ["short"]);
        // Replaced by another file (renamed over it), longer.
        let other = dir.path().join("other");
        std::fs::write(&other, b"replaced one\nreplaced two\nreplaced three\n").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(
            lines(&mut followed),
            ["replaced one", "replaced two", "replaced three"]
        );
        // Deleted: nothing, and made again: from its start.
        std::fs::remove_file(&path).unwrap();
        assert!(lines(&mut followed).is_empty());
        append(&path, b"again\n");
        assert_eq!(lines(&mut followed), ["again"]);
        append(&path, b"and more\n");
        assert_eq!(lines(&mut followed), ["and more"]);
    }
}
