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
    if fragment.iter().all(u8::is_ascii_whitespace) {
        content.valid_len = bytes.len() as u64;
        return Ok(content);
    }
    let line_number = bytes[..complete_len]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1;
    let complete_json = std::str::from_utf8(fragment)
        .ok()
        .filter(|text| serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok());
    match complete_json {
        Some(text) => {
            content.lines.push(JsonlLine {
                number: line_number,
                start: complete_len as u64,
                text: text.to_string(),
            });
            {
                let mut file = OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(|source| StoreError::io("opening", path, source))?;
                file.write_all(b"\n")
                    .map_err(|source| StoreError::io("appending to", path, source))?;
            }
            content.valid_len = bytes.len() as u64 + 1;
        }
        None => {
            content.warnings.push(format!(
                "{}:{line_number}: dropped a torn last line of {} bytes (a write cut short by a crash)",
                path.display(),
                fragment.len()
            ));
            truncate(path, complete_len as u64)?;
        }
    }
    Ok(content)
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
