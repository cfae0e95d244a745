//! Reading a log from its end, in bounded memory: the newest lines of a
//! JSONL log (or any newline-separated log) without reading the rest.
//!
//! Every reader that serves a log to someone else (the Studio's port,
//! `gdn logs`) goes through [`scan_backwards`], because a log of a swarm
//! that ran for months can be gigabytes long and a whole-file read costs
//! several times its size in memory (issue 35). The file is read backwards
//! in blocks of [`BLOCK_BYTES`]; each complete line is handed to the
//! caller newest first, and the caller says when it has enough. Two bounds
//! hold for every call, whatever the file holds:
//!
//! - at most [`TailLimits::max_read_bytes`] bytes are read from the file;
//!   when that budget ends first, the scan stops and says so
//!   ([`TailReport::budget_exhausted`]);
//! - a line longer than [`TailLimits::max_line_bytes`] (a 1 GB line with
//!   no newline, say) is skipped and counted ([`TailReport::n_long_lines`]);
//!   at most `max_line_bytes` of it are ever held.
//!
//! So the reader itself holds at most `BLOCK_BYTES + 2 × max_line_bytes`
//! (one block, a line's pieces from earlier blocks, the line assembled
//! from them), and it keeps its own account of that
//! ([`TailReport::peak_buffer_bytes`]) so tests can check the bound
//! without measuring the process.
//!
//! What it does not do: parse lines, repair a torn tail (that is the
//! writer's job, `jsonl::repair_torn_tail`), or follow a growing file
//! ([`crate::follow`] does, from [`TailReport::end`]).
//! Bytes after the file's last newline (a line a writer is in the middle
//! of) are handed over with [`TailLine::terminated`] false, so each caller
//! keeps its own rule for them. Blank lines are skipped.

use crate::StoreError;
use std::fs::File;
use std::io::{ErrorKind, Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::Path;

/// Bytes read from the file per step.
pub const BLOCK_BYTES: usize = 64 * 1024;

/// The line cap of [`TailLimits::default`]: far above any event or
/// message a Turn writes, far below what would hurt a machine.
pub const DEFAULT_MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How much one scan may read and hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailLimits {
    /// Bytes read from the file, at most, in one call.
    pub max_read_bytes: u64,
    /// A longer line is skipped and counted, never loaded.
    pub max_line_bytes: usize,
}

impl Default for TailLimits {
    /// No read budget (a command reading for the person who ran it), and
    /// the line cap [`DEFAULT_MAX_LINE_BYTES`].
    fn default() -> Self {
        TailLimits {
            max_read_bytes: u64::MAX,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// One line handed to the caller of [`scan_backwards`].
#[derive(Debug, Clone, Copy)]
pub struct TailLine<'a> {
    /// The line without its newline; never empty or only whitespace.
    pub bytes: &'a [u8],
    /// Byte offset of its first byte in the file.
    pub start: u64,
    /// False for bytes after the file's last newline: a line a writer may
    /// still be in the middle of.
    pub terminated: bool,
}

/// What one scan did, for the caller to pass on ("cut at …, N lines
/// skipped") and for tests to check the bounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TailReport {
    /// Bytes read from the file.
    pub bytes_read: u64,
    /// Lines longer than the line cap, skipped.
    pub n_long_lines: usize,
    /// The read budget ended before the caller had enough and before the
    /// start of the file.
    pub budget_exhausted: bool,
    /// Bytes at the start of the file the scan did not hand over: 0 when
    /// every line was seen, else the offset of the oldest line seen (or
    /// where the budget stopped it). Above 0, older lines may exist.
    pub unread_bytes: u64,
    /// The most the reader held at once (its block, pieces of a line, the
    /// assembled line), by its own account.
    pub peak_buffer_bytes: usize,
    /// The file's length when the scan began: where following it goes on.
    pub end: u64,
}

impl TailReport {
    /// True when the scan left something out the caller asked for: the
    /// budget ended, or a line was over the cap.
    pub fn cut(&self) -> bool {
        self.budget_exhausted || self.n_long_lines > 0
    }

    /// Adds `other`'s counts to this one (several files read for one
    /// answer).
    pub fn absorb(&mut self, other: &TailReport) {
        self.bytes_read += other.bytes_read;
        self.n_long_lines += other.n_long_lines;
        self.budget_exhausted |= other.budget_exhausted;
        self.unread_bytes += other.unread_bytes;
        self.peak_buffer_bytes = self.peak_buffer_bytes.max(other.peak_buffer_bytes);
        self.end += other.end;
    }
}

/// Hands the lines of `path` to `visit`, newest first, until `visit`
/// breaks, the file's start is reached or `limits` stop it. A missing
/// file has no lines.
pub fn scan_backwards(
    path: &Path,
    limits: TailLimits,
    mut visit: impl FnMut(TailLine<'_>) -> ControlFlow<()>,
) -> Result<TailReport, StoreError> {
    let mut report = TailReport::default();
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(report),
        Err(source) => return Err(StoreError::io("opening", path, source)),
    };
    let io = |source| StoreError::io("reading", path, source);
    let mut end = file.seek(SeekFrom::End(0)).map_err(io)?;
    report.end = end;
    // Where the oldest line handed over (or skipped) starts.
    let mut oldest_start = end;
    let mut line = LineInProgress::new(limits.max_line_bytes);
    let mut block: Vec<u8> = Vec::with_capacity(BLOCK_BYTES);
    loop {
        if end == 0 {
            // The first line of the file has no newline before it.
            // Whatever `visit` answers, the scan ends here with nothing
            // left unread.
            let _ = line.finish(&[], 0, &mut report, 0, &mut visit);
            return Ok(report);
        }
        let budget_left = limits.max_read_bytes.saturating_sub(report.bytes_read);
        if budget_left == 0 {
            // The line in progress began before what was read: incomplete,
            // so it is not handed over; when it is already over the cap it
            // is counted as skipped, so a giant line that eats the budget
            // (a 1 GB line with no newline) still gets its note.
            report.budget_exhausted = true;
            if line.too_long {
                report.n_long_lines += 1;
            }
            report.unread_bytes = oldest_start;
            return Ok(report);
        }
        let step = (BLOCK_BYTES as u64).min(end).min(budget_left);
        let start = end - step;
        block.clear();
        block.resize(step as usize, 0);
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        file.read_exact(&mut block).map_err(io)?;
        report.bytes_read += step;
        report.peak_buffer_bytes = report.peak_buffer_bytes.max(block.capacity() + line.len());
        let mut piece_end = block.len();
        while let Some(newline) = block[..piece_end].iter().rposition(|&b| b == b'\n') {
            let line_start = start + newline as u64 + 1;
            let flow = line.finish(
                &block[newline + 1..piece_end],
                line_start,
                &mut report,
                block.capacity(),
                &mut visit,
            );
            oldest_start = line_start;
            if flow.is_break() {
                report.unread_bytes = line_start;
                return Ok(report);
            }
            piece_end = newline;
        }
        line.prepend(&block[..piece_end]);
        end = start;
    }
}
/// The last `n` lines of `path` (oldest first) that `keep` accepts, within
/// `limits`; unterminated bytes after the last newline count as a line
/// only when `keep` accepts them too.
pub fn read_last_lines(
    path: &Path,
    n: usize,
    limits: TailLimits,
    mut keep: impl FnMut(&TailLine<'_>) -> bool,
) -> Result<(Vec<Vec<u8>>, TailReport), StoreError> {
    let mut newest_first: Vec<Vec<u8>> = Vec::new();
    if n == 0 {
        return Ok((newest_first, TailReport::default()));
    }
    let report = scan_backwards(path, limits, |line| {
        if keep(&line) {
            newest_first.push(line.bytes.to_vec());
        }
        if newest_first.len() >= n {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })?;
    newest_first.reverse();
    Ok((newest_first, report))
}

/// The line being assembled from the end of one block and the starts of
/// earlier ones: its pieces, newest (rightmost) first.
struct LineInProgress {
    pieces: Vec<Vec<u8>>,
    len: usize,
    /// Over the cap: the rest of it is dropped as it comes.
    too_long: bool,
    max_len: usize,
    /// Whether the line ends with a newline; false only for the first
    /// line found (the bytes after the file's last newline).
    terminated: bool,
    assembled: Vec<u8>,
}

impl LineInProgress {
    fn new(max_len: usize) -> Self {
        LineInProgress {
            pieces: Vec::new(),
            len: 0,
            too_long: false,
            max_len,
            terminated: false,
            assembled: Vec::new(),
        }
    }

    /// Bytes held for the line.
    fn len(&self) -> usize {
        self.len
    }

    /// Adds `piece`, which comes right before what is held.
    fn prepend(&mut self, piece: &[u8]) {
        if self.too_long || piece.is_empty() {
            return;
        }
        if self.len + piece.len() > self.max_len {
            self.too_long = true;
            self.pieces = Vec::new();
            self.len = 0;
            return;
        }
        self.pieces.push(piece.to_vec());
        self.len += piece.len();
    }

    /// Hands the complete line starting at `start` (`first_piece`, then
    /// what is held) to `visit`, unless it is blank or too long, and starts
    /// the next, older one. `held_besides` is what the reader holds besides
    /// (its block), for the account.
    fn finish(
        &mut self,
        first_piece: &[u8],
        start: u64,
        report: &mut TailReport,
        held_besides: usize,
        visit: &mut impl FnMut(TailLine<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let terminated = std::mem::replace(&mut self.terminated, true);
        let too_long =
            std::mem::take(&mut self.too_long) || self.len + first_piece.len() > self.max_len;
        let flow = if too_long {
            report.n_long_lines += 1;
            ControlFlow::Continue(())
        } else {
            let bytes: &[u8] = if self.pieces.is_empty() {
                // The common case: the line lies inside one block and is
                // handed over without a copy.
                first_piece
            } else {
                self.assembled.clear();
                self.assembled.reserve_exact(first_piece.len() + self.len);
                self.assembled.extend_from_slice(first_piece);
                for piece in self.pieces.iter().rev() {
                    self.assembled.extend_from_slice(piece);
                }
                report.peak_buffer_bytes = report
                    .peak_buffer_bytes
                    .max(held_besides + self.len + self.assembled.capacity());
                &self.assembled
            };
            if bytes.iter().all(u8::is_ascii_whitespace) {
                ControlFlow::Continue(())
            } else {
                visit(TailLine {
                    bytes,
                    start,
                    terminated,
                })
            }
        };
        self.pieces.clear();
        self.len = 0;
        // A long line's copy is not kept for the next one.
        if self.assembled.capacity() > BLOCK_BYTES {
            self.assembled = Vec::new();
        }
        flow
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(content: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, content).unwrap();
        (dir, path)
    }

    fn last(path: &Path, n: usize, limits: TailLimits) -> (Vec<String>, TailReport) {
        let (lines, report) = read_last_lines(path, n, limits, |_| true).unwrap();
        let texts = lines
            .into_iter()
            .map(|line| String::from_utf8(line).unwrap())
            .collect();
        (texts, report)
    }

    #[test]
    fn the_last_n_lines_oldest_first_across_blocks() {
        let content: String = (0..50_000).map(|i| format!("{{\"n\":{i}}}\n")).collect();
        let (_dir, path) = write(content.as_bytes());
        let (lines, report) = last(&path, 3, TailLimits::default());
        assert_eq!(lines, ["{\"n\":49997}", "{\"n\":49998}", "{\"n\":49999}"]);
        assert!(report.unread_bytes > 0);
        assert!(!report.cut());
        assert_eq!(report.bytes_read, BLOCK_BYTES as u64);
        let (all, report) = last(&path, usize::MAX, TailLimits::default());
        assert_eq!(all.len(), 50_000);
        assert_eq!(all[0], "{\"n\":0}");
        assert_eq!(report.unread_bytes, 0);
        assert_eq!(report.bytes_read, content.len() as u64);
    }

    #[test]
    fn a_file_without_a_trailing_newline_hands_over_its_last_line_unterminated() {
        let (_dir, path) = write(b"{\"a\":1}\n\n{\"b\":2}\n{\"c\":");
        let mut seen = Vec::new();
        scan_backwards(&path, TailLimits::default(), |line| {
            seen.push((
                String::from_utf8(line.bytes.to_vec()).unwrap(),
                line.start,
                line.terminated,
            ));
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                ("{\"c\":".to_string(), 17, false),
                ("{\"b\":2}".to_string(), 9, true),
                ("{\"a\":1}".to_string(), 0, true),
            ]
        );
        let (terminated, _) =
            read_last_lines(&path, 5, TailLimits::default(), |line| line.terminated).unwrap();
        assert_eq!(terminated, [b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]);
    }

    #[test]
    fn a_giant_line_is_skipped_and_counted_never_held() {
        let max_line_bytes = 100_000;
        let mut content = b"{\"old\":1}\n".to_vec();
        content.extend(std::iter::repeat_n(b'x', 1_000_000));
        content.extend_from_slice(b"\n{\"new\":1}\n");
        // A giant last line without a newline is skipped the same way.
        content.extend(std::iter::repeat_n(b'y', 500_000));
        let (_dir, path) = write(&content);
        let limits = TailLimits {
            max_read_bytes: u64::MAX,
            max_line_bytes,
        };
        let (lines, report) = last(&path, 10, limits);
        assert_eq!(lines, ["{\"old\":1}", "{\"new\":1}"]);
        assert_eq!(report.n_long_lines, 2);
        assert!(report.cut());
        assert!(report.peak_buffer_bytes <= BLOCK_BYTES + 2 * max_line_bytes);

        // A giant line that eats the whole read budget is still noted.
        let budget = TailLimits {
            max_read_bytes: 300_000,
            max_line_bytes,
        };
        let (lines, report) = last(&path, 10, budget);
        assert!(lines.is_empty());
        assert!(report.budget_exhausted);
        assert_eq!(report.n_long_lines, 1);
    }

    #[test]
    fn a_line_just_under_the_cap_spanning_blocks_is_whole() {
        let long = format!("{{\"a\":\"{}\"}}", "z".repeat(3 * BLOCK_BYTES));
        let content = format!("{long}\n{{\"b\":1}}\n");
        let (_dir, path) = write(content.as_bytes());
        let limits = TailLimits {
            max_read_bytes: u64::MAX,
            max_line_bytes: long.len(),
        };
        let (lines, report) = last(&path, 10, limits);
        assert_eq!(lines, [long.as_str(), "{\"b\":1}"]);
        assert_eq!(report.n_long_lines, 0);
    }

    #[test]
    fn the_read_budget_is_respected() {
        let content: String = (0..100_000).map(|i| format!("{{\"n\":{i}}}\n")).collect();
        let (_dir, path) = write(content.as_bytes());
        let limits = TailLimits {
            max_read_bytes: 100_000,
            max_line_bytes: 1_000,
        };
        let (lines, report) = last(&path, usize::MAX, limits);
        assert!(report.budget_exhausted);
        assert!(report.cut());
        assert_eq!(report.bytes_read, 100_000);
        assert!(report.peak_buffer_bytes <= BLOCK_BYTES + 2 * 1_000);
        let n_bytes_returned: usize = lines.iter().map(|line| line.len() + 1).sum();
        assert!(n_bytes_returned <= 100_000);
        assert_eq!(lines.last().unwrap(), "{\"n\":99999}");
        // Every line returned is complete: the cut one at the budget's edge
        // is left out, and `unread_bytes` points right after it.
        assert!(lines.iter().all(|line| line.starts_with('{')));
        assert_eq!(
            report.unread_bytes,
            (content.len() - n_bytes_returned) as u64
        );
    }

    #[test]
    fn an_empty_or_missing_file_has_no_lines() {
        let (dir, path) = write(b"");
        let (lines, report) = last(&path, 10, TailLimits::default());
        assert!(lines.is_empty());
        assert_eq!(report, TailReport::default());
        let (lines, _) = last(&dir.path().join("absent"), 10, TailLimits::default());
        assert!(lines.is_empty());
        let (_dir, blank) = write(b"\n\n  \n");
        assert!(last(&blank, 10, TailLimits::default()).0.is_empty());
    }
}
