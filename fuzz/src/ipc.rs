//! The IPC decoder: one JSON line through `goondan_ipc::framing` (the
//! bounded line reader and the line decoder), then
//! `goondan_ipc::protocol::decode`, as the orchestrator and every child
//! read what the other side wrote.

use goondan_ipc::framing::{self, LineRead};
use goondan_ipc::protocol;

/// A line limit small enough that short inputs exercise the over-long
/// path of the bounded reader.
const SMALL_LIMIT: usize = 64;

/// Splits `data` into lines with the bounded reader (twice: with the
/// real limit and with a small one), and decodes every line it keeps.
pub fn ipc_line(data: &[u8]) {
    for limit in [framing::MAX_LINE_BYTES, SMALL_LIMIT] {
        for line in bounded_lines(data, limit) {
            decode_line(&line);
        }
    }
}

/// The lines `read_bounded_line` yields from `data`, reading through a
/// tiny buffer so lines straddle refills as they do on a pipe.
fn bounded_lines(data: &[u8], limit: usize) -> Vec<Vec<u8>> {
    crate::block_on(async {
        let mut reader = tokio::io::BufReader::with_capacity(7, data);
        let mut lines = Vec::new();
        let mut buffer = Vec::new();
        loop {
            match framing::read_bounded_line(&mut reader, &mut buffer, limit).await {
                Ok(LineRead::Line) => {
                    assert!(buffer.len() <= limit, "a kept line is over the limit");
                    lines.push(buffer.clone());
                }
                Ok(LineRead::TooLong(length)) => assert!(length > limit),
                Ok(LineRead::Eof) => return lines,
                Err(error) => panic!("reading from memory cannot fail: {error}"),
            }
        }
    })
}

fn decode_line(line: &[u8]) {
    let Ok(message) = framing::decode(line) else {
        return;
    };
    // What one side encodes, the other must decode to the same message.
    let encoded = framing::encode(&message);
    let again =
        framing::decode(&encoded[..encoded.len() - 1]).expect("an encoded message decodes again");
    assert_eq!(
        again, message,
        "an IPC message does not survive a round trip"
    );
    match protocol::decode(&message) {
        Ok(_) => {}
        Err(error) => {
            // The refusal sent back must build for every refused message.
            let _ = (error.code(), error.wire_code(), error.event_id());
            let _ = error.rejection();
        }
    }
}
