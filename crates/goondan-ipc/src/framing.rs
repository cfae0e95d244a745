//! Newline-delimited JSON framing with a size bound per line.

use crate::IpcError;
use goondan_types::IpcMessage;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The largest IPC line accepted, in bytes. Payloads are bounded so that a
/// runaway peer cannot exhaust memory; 8 MiB fits any sane conversation
/// event.
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// Serializes one message as a JSON line (with the trailing newline).
pub fn encode(message: &IpcMessage) -> Vec<u8> {
    // Serializing a tree of JSON values cannot fail: every map key is a
    // string and no custom Serialize impl is involved.
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    line
}

/// The length of `message`'s line, newline included, without building it.
pub fn encoded_len(message: &IpcMessage) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(1);
    let _ = serde_json::to_writer(&mut count, message);
    count.0
}

/// True when `message` fits one frame ([`MAX_LINE_BYTES`]).
pub fn fits(message: &IpcMessage) -> bool {
    encoded_len(message) <= MAX_LINE_BYTES
}

/// Parses one line (without its newline) into a message.
pub fn decode(line: &[u8]) -> Result<IpcMessage, IpcError> {
    serde_json::from_slice(line).map_err(|error| IpcError::Malformed {
        reason: error.to_string(),
        excerpt: String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned(),
    })
}

/// What one bounded read produced.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A complete line is in the buffer (newline stripped).
    Line,
    /// A line longer than the bound was skipped; its length is given.
    TooLong(usize),
    /// The stream ended.
    Eof,
}

/// Reads the next line into `buffer` (cleared first) without ever holding
/// more than `limit` bytes of it: an over-long line is consumed and dropped.
pub async fn read_bounded_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buffer: &mut Vec<u8>,
    limit: usize,
) -> std::io::Result<LineRead> {
    buffer.clear();
    let mut skipped = 0usize;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(match (skipped, buffer.is_empty()) {
                (0, true) => LineRead::Eof,
                (0, false) => LineRead::Line,
                (n, _) => LineRead::TooLong(n),
            });
        }
        let (chunk, consumed, done) = match available.iter().position(|&b| b == b'\n') {
            Some(pos) => (&available[..pos], pos + 1, true),
            None => (available, available.len(), false),
        };
        if skipped > 0 || buffer.len() + chunk.len() > limit {
            skipped += buffer.len() + chunk.len();
            buffer.clear();
        } else {
            buffer.extend_from_slice(chunk);
        }
        reader.consume(consumed);
        if done {
            return Ok(if skipped > 0 {
                LineRead::TooLong(skipped)
            } else {
                LineRead::Line
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::IpcMessageType;
    use serde_json::json;

    #[tokio::test]
    async fn bounded_reader_skips_long_lines_and_keeps_the_rest() {
        let input = b"short\nthis line is far too long\nok\nlast".to_vec();
        let mut reader = tokio::io::BufReader::with_capacity(4, &input[..]);
        let mut buffer = Vec::new();
        let mut seen = Vec::new();
        loop {
            match read_bounded_line(&mut reader, &mut buffer, 8)
                .await
                .unwrap()
            {
                LineRead::Line => seen.push(String::from_utf8(buffer.clone()).unwrap()),
                LineRead::TooLong(n) => seen.push(format!("<{n}>")),
                LineRead::Eof => break,
            }
        }
        assert_eq!(seen, ["short", "<25>", "ok", "last"]);
    }

    #[test]
    fn encode_decode_round_trip_and_malformed_lines_are_errors() {
        let message = IpcMessage {
            message_type: IpcMessageType::Event,
            from: "a:1".into(),
            to: "b:1".into(),
            payload: json!({"x": [1, 2]}),
        };
        let line = encode(&message);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(encoded_len(&message), line.len());
        assert_eq!(decode(&line[..line.len() - 1]).unwrap(), message);
        let error = decode(b"{not json").unwrap_err();
        assert_eq!(error.code(), "E_IPC_MALFORMED");
        assert!(decode(br#"{"type":"bogus","from":"a","to":"b","payload":1}"#).is_err());
    }
}
