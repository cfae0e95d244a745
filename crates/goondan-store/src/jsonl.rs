//! Reading JSONL logs the way a crash may have left them.
//!
//! A writer appends `line + "\n"` with one `write_all`; a process killed in
//! the middle leaves a last fragment without its newline (a torn line).
//! Such a fragment was never acknowledged, so dropping it is always legal;
//! when it is nevertheless complete JSON (only the newline is missing, as in
//! a hand-edited file) it is kept. Every earlier, newline-terminated line is
//! trusted: if it does not parse, the log is corrupt and the caller reports
//! it rather than silently losing history. Blank lines are skipped, as the
//! original reader does.

use crate::StoreError;
use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::Path;

/// One complete line of a log.
#[derive(Debug, Clone)]
pub(crate) struct JsonlLine {
    /// One-based line number, for error messages.
    pub(crate) number: usize,
    /// Byte offset of the line's first byte.
    pub(crate) start: u64,
    /// The line without its newline.
    pub(crate) text: String,
}

/// The readable part of a log.
#[derive(Debug, Default)]
pub(crate) struct JsonlContent {
    /// Complete lines, in file order, blank ones left out.
    pub(crate) lines: Vec<JsonlLine>,
    /// Length in bytes of the file once its torn tail is dealt with.
    pub(crate) valid_len: u64,
    /// What was recovered from.
    pub(crate) warnings: Vec<String>,
}

/// Reads `path` (missing means empty) and repairs a torn last line: cut
/// away, or finished with a newline when it is complete JSON. Only the
/// instance's single writer calls this, during recovery.
pub(crate) fn read_jsonl_repairing(path: &Path) -> Result<JsonlContent, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(JsonlContent::default()),
        Err(source) => return Err(StoreError::io("reading", path, source)),
    };
    let mut content = JsonlContent::default();
    let complete_len = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut start = 0usize;
    for (index, raw) in bytes[..complete_len].split(|&b| b == b'\n').enumerate() {
        let line_start = start;
        start += raw.len() + 1;
        if line_start >= complete_len {
            break;
        }
        let text = std::str::from_utf8(raw).map_err(|_| StoreError::CorruptLog {
            path: path.to_path_buf(),
            line: index + 1,
            reason: "not valid UTF-8".to_string(),
        })?;
        if text.trim().is_empty() {
            continue;
        }
        content.lines.push(JsonlLine {
            number: index + 1,
            start: line_start as u64,
            text: text.to_string(),
        });
    }
    content.valid_len = complete_len as u64;

    let fragment = &bytes[complete_len..];
    let line_number = bytes[..complete_len]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1;
    match settle_torn_tail(path, complete_len as u64, fragment, line_number)? {
        TornTail::Absent => content.valid_len = bytes.len() as u64,
        TornTail::Finished { text, valid_len } => {
            content.lines.push(JsonlLine {
                number: line_number,
                start: complete_len as u64,
                text,
            });
            content.valid_len = valid_len;
        }
        TornTail::Dropped { warning, valid_len } => {
            content.warnings.push(warning);
            content.valid_len = valid_len;
        }
    }
    Ok(content)
}

/// Repairs a torn last line of `path` (missing means empty) the way
/// [`read_jsonl_repairing`] does, reading only the bytes after the last
/// newline: what an appender calls before appending to a log it does not
/// read back. Returns the warning when a fragment was dropped.
pub(crate) fn repair_torn_tail(path: &Path) -> Result<Option<String>, StoreError> {
    use std::io::{Read, Seek, SeekFrom};
    const CHUNK_BYTES: u64 = 8 * 1024;
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::io("opening", path, source)),
    };
    let io = |source| StoreError::io("reading", path, source);
    let len = file.seek(SeekFrom::End(0)).map_err(io)?;
    // Scanning backwards, `fragment` is everything after the last newline.
    let mut fragment: Vec<u8> = Vec::new();
    let mut end = len;
    let complete_len = loop {
        if end == 0 {
            break 0;
        }
        let start = end.saturating_sub(CHUNK_BYTES);
        let mut chunk = vec![0u8; (end - start) as usize];
        file.seek(SeekFrom::Start(start)).map_err(io)?;
        file.read_exact(&mut chunk).map_err(io)?;
        match chunk.iter().rposition(|&b| b == b'\n') {
            Some(index) => {
                fragment.splice(0..0, chunk[index + 1..].iter().copied());
                break start + index as u64 + 1;
            }
            None => {
                fragment.splice(0..0, chunk);
                end = start;
            }
        }
    };
    // The line number is only for the warning; counting every newline of
    // a long log would defeat reading just its tail.
    match settle_torn_tail(path, complete_len, &fragment, 0)? {
        TornTail::Absent | TornTail::Finished { .. } => Ok(None),
        TornTail::Dropped { warning, .. } => Ok(Some(warning)),
    }
}

/// What became of the bytes after a log's last newline.
enum TornTail {
    /// There were none, or only whitespace.
    Absent,
    /// They were complete JSON and got their newline.
    Finished { text: String, valid_len: u64 },
    /// They were cut away.
    Dropped { warning: String, valid_len: u64 },
}

/// Deals with `fragment`, the bytes of `path` after its first
/// `complete_len` bytes (which end with a newline): kept and finished with
/// a newline when it is complete JSON, else cut away. `line_number` names
/// the fragment's line in the warning (0: unknown).
fn settle_torn_tail(
    path: &Path,
    complete_len: u64,
    fragment: &[u8],
    line_number: usize,
) -> Result<TornTail, StoreError> {
    if fragment.iter().all(u8::is_ascii_whitespace) {
        return Ok(TornTail::Absent);
    }
    let complete_json = std::str::from_utf8(fragment)
        .ok()
        .filter(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok());
    match complete_json {
        Some(text) => {
            let mut file = OpenOptions::new()
                .append(true)
                .open(path)
                .map_err(|source| StoreError::io("opening", path, source))?;
            file.write_all(b"\n")
                .map_err(|source| StoreError::io("appending to", path, source))?;
            Ok(TornTail::Finished {
                text: text.to_string(),
                valid_len: complete_len + fragment.len() as u64 + 1,
            })
        }
        None => {
            truncate(path, complete_len)?;
            let place = match line_number {
                0 => String::new(),
                number => format!(":{number}"),
            };
            Ok(TornTail::Dropped {
                warning: format!(
                    "{}{place}: dropped a torn last line of {} bytes (a write cut short by a crash or a full disk)",
                    path.display(),
                    fragment.len()
                ),
                valid_len: complete_len,
            })
        }
    }
}

/// Cuts `path` to `len` bytes.
pub(crate) fn truncate(path: &Path, len: u64) -> Result<(), StoreError> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|source| StoreError::io("opening", path, source))?;
    file.set_len(len)
        .map_err(|source| StoreError::io("truncating", path, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, lines: &[&str], file_after: &str, n_warnings: usize) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, input).unwrap();
        let content = read_jsonl_repairing(&path).unwrap();
        let texts: Vec<&str> = content.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, lines, "input {input:?}");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            file_after,
            "input {input:?}"
        );
        assert_eq!(content.warnings.len(), n_warnings, "input {input:?}");
        assert_eq!(
            content.valid_len,
            file_after.len() as u64,
            "input {input:?}"
        );
    }

    #[test]
    fn torn_tails_are_dropped_or_finished() {
        check("", &[], "", 0);
        check("{\"a\":1}\n", &["{\"a\":1}"], "{\"a\":1}\n", 0);
        check(
            "{\"a\":1}\n\n{\"b\":2}\n",
            &["{\"a\":1}", "{\"b\":2}"],
            "{\"a\":1}\n\n{\"b\":2}\n",
            0,
        );
        check("{\"a\":1}\n{\"b\":", &["{\"a\":1}"], "{\"a\":1}\n", 1);
        check(
            "{\"a\":1}\n{\"b\":2}",
            &["{\"a\":1}", "{\"b\":2}"],
            "{\"a\":1}\n{\"b\":2}\n",
            0,
        );
        check("{\"b\":", &[], "", 1);
    }

    #[test]
    fn tail_repair_agrees_with_the_full_read() {
        let long_line = format!("{{\"a\":\"{}\"}}", "x".repeat(20_000));
        for input in [
            String::new(),
            "{\"a\":1}\n".to_string(),
            "{\"a\":1}\n{\"b\":".to_string(),
            "{\"a\":1}\n{\"b\":2}".to_string(),
            "{\"b\":".to_string(),
            format!("{{\"a\":1}}\n{}", &long_line[..15_000]),
            format!("{long_line}\n{long_line}"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let (by_tail, by_read) = (dir.path().join("tail"), dir.path().join("read"));
            std::fs::write(&by_tail, &input).unwrap();
            std::fs::write(&by_read, &input).unwrap();
            let warning = repair_torn_tail(&by_tail).unwrap();
            let content = read_jsonl_repairing(&by_read).unwrap();
            assert_eq!(
                std::fs::read(&by_tail).unwrap(),
                std::fs::read(&by_read).unwrap(),
                "input of {} bytes",
                input.len()
            );
            assert_eq!(warning.is_some(), !content.warnings.is_empty());
        }
    }

    #[test]
    fn missing_file_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let content = read_jsonl_repairing(&dir.path().join("absent.jsonl")).unwrap();
        assert!(content.lines.is_empty());
    }

    #[test]
    fn line_numbers_and_offsets_point_into_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        std::fs::write(&path, "1\n\n22\n").unwrap();
        let content = read_jsonl_repairing(&path).unwrap();
        assert_eq!(content.lines[1].number, 3);
        assert_eq!(content.lines[1].start, 3);
    }
}
