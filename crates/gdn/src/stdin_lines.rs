//! Lines from standard input, each at most a fixed number of bytes, read
//! on a thread of their own so an async caller can wait for the next line
//! and for anything else at once without losing half a line.
//!
//! A line over the cap is skipped up to its newline and reported as
//! [`Line::TooLong`], so an endless line costs the cap and no more; a line
//! that is not UTF-8 is [`Line::NotUtf8`]. Neither stops the reading.

use std::io::BufRead;
use tokio::sync::mpsc;

/// One line of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Line {
    /// The text, without its line ending.
    Text(String),
    /// A line longer than the cap, skipped.
    TooLong,
    /// A line that is not UTF-8, skipped.
    NotUtf8,
}

/// Starts reading standard input; the receiver yields each line and ends
/// at the end of the input (or a read error, which ends it too).
pub(crate) fn spawn(max_line_bytes: usize) -> mpsc::Receiver<Line> {
    let (lines, received) = mpsc::channel(1);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        while let Ok(Some(line)) = next_line(&mut stdin, max_line_bytes) {
            if lines.blocking_send(line).is_err() {
                break;
            }
        }
    });
    received
}

/// Reads the next line of `reader`, keeping at most `cap` bytes of it;
/// `None` at the end of the input.
pub(crate) fn next_line(reader: &mut impl BufRead, cap: usize) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut read_any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        if available.is_empty() {
            break;
        }
        read_any = true;
        let (chunk, ended) = match available.iter().position(|byte| *byte == b'\n') {
            Some(end) => (&available[..end], true),
            None => (available, false),
        };
        if !too_long && line.len() + chunk.len() <= cap {
            line.extend_from_slice(chunk);
        } else {
            too_long = true;
            line = Vec::new();
        }
        let consumed = chunk.len() + usize::from(ended);
        reader.consume(consumed);
        if ended {
            break;
        }
    }
    if !read_any {
        return Ok(None);
    }
    if too_long {
        return Ok(Some(Line::TooLong));
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(Some(match String::from_utf8(line) {
        Ok(text) => Line::Text(text),
        Err(_) => Line::NotUtf8,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8], cap: usize) -> Vec<Line> {
        // A tiny buffer makes lines span several reads.
        let mut reader = std::io::BufReader::with_capacity(3, input);
        std::iter::from_fn(|| next_line(&mut reader, cap).unwrap()).collect()
    }

    #[test]
    fn lines_end_at_newlines_and_the_last_needs_none() {
        assert_eq!(
            all(b"one\r\ntwo\n\nlast", 16),
            vec![
                Line::Text("one".into()),
                Line::Text("two".into()),
                Line::Text(String::new()),
                Line::Text("last".into()),
            ]
        );
        assert!(all(b"", 16).is_empty());
    }

    #[test]
    fn an_overlong_line_is_skipped_and_reading_goes_on() {
        assert_eq!(
            all(b"ok\nthis line is far too long\nafter\n", 8),
            vec![
                Line::Text("ok".into()),
                Line::TooLong,
                Line::Text("after".into()),
            ]
        );
        assert_eq!(all(b"12345678\n", 8), vec![Line::Text("12345678".into())]);
    }

    #[test]
    fn a_line_that_is_not_utf8_is_reported() {
        assert_eq!(
            all(b"\xff\xfe\nfine\n", 8),
            vec![Line::NotUtf8, Line::Text("fine".into())]
        );
    }
}
