//! A server-sent events decoder: bytes in, complete events out.
//!
//! Owns only the text/event-stream framing (fields, blank-line dispatch,
//! CR/LF handling); what an event means is each reader's business (the
//! model providers' streams, an A2A agent's `SendStreamingMessage`).
//! It keeps at most one unfinished line and one unfinished event: a
//! reader of an untrusted stream bounds those by capping the bytes it
//! feeds.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, empty when absent.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Accumulates bytes and yields events as their blank line arrives.
#[derive(Debug, Default)]
pub struct SseDecoder {
    pending: Vec<u8>,
    event: String,
    data: Vec<String>,
    has_data: bool,
}

impl SseDecoder {
    /// Feeds a chunk; returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        // Lines end in LF, CRLF or a lone CR; a CR at the very end of the
        // buffer may be the first half of a CRLF, so it waits for more bytes.
        let mut start = 0;
        let mut index = 0;
        while index < self.pending.len() {
            let byte = self.pending[index];
            if byte == b'\n' || byte == b'\r' {
                if byte == b'\r' && index + 1 == self.pending.len() {
                    break;
                }
                let line = String::from_utf8_lossy(&self.pending[start..index]).into_owned();
                let mut next = index + 1;
                if byte == b'\r' && self.pending.get(next) == Some(&b'\n') {
                    next += 1;
                }
                if let Some(event) = self.line(&line) {
                    events.push(event);
                }
                start = next;
                index = next;
            } else {
                index += 1;
            }
        }
        self.pending.drain(..start);
        events
    }

    /// Ends the stream; a final event without its blank line still counts.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.pending.is_empty() {
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
            if let Some(event) = self.line(&line) {
                return Some(event);
            }
        }
        self.dispatch()
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                self.data.push(value.to_string());
                self.has_data = true;
            }
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data).join("\n"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent {
            event: name.into(),
            data: data.into(),
        }
    }

    #[test]
    fn splits_across_chunks_and_line_endings() {
        let mut decoder = SseDecoder::default();
        let mut events = decoder.feed(b"event: a\r");
        events.extend(decoder.feed(b"\ndata: {\"x\":"));
        events.extend(decoder.feed(b"1}\r\n\r\n: comment\n\ndata: one\ndata:two\n\n"));
        events.extend(decoder.feed(b"data: [DONE]"));
        events.extend(decoder.finish());
        assert_eq!(
            events,
            vec![
                event("a", "{\"x\":1}"),
                event("", "one\ntwo"),
                event("", "[DONE]")
            ]
        );
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        let mut decoder = SseDecoder::default();
        assert!(decoder.feed(b"event: ping\n\n").is_empty());
        assert_eq!(decoder.feed(b"data: x\n\n"), vec![event("", "x")]);
    }
}
