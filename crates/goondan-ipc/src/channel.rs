//! [`IpcChannel`]: the message-delivery seam, an ordered, bounded pair of
//! queues, and its first transport, JSON lines over a byte stream.

use crate::framing::{self, LineRead, MAX_LINE_BYTES};
use crate::protocol::{ProtocolError, ProtocolStats};
use crate::ORCHESTRATOR;
use goondan_types::IpcMessage;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// How many messages may wait in each direction before senders wait.
pub const DEFAULT_CAPACITY: usize = 256;

/// An ordered, bounded, bidirectional message channel to one peer.
///
/// Order is preserved per direction. When the peer goes away, `receiver`
/// yields `None` and sends fail.
#[derive(Debug)]
pub struct IpcChannel {
    /// Messages to the peer.
    pub sender: mpsc::Sender<IpcMessage>,
    /// Messages from the peer.
    pub receiver: mpsc::Receiver<IpcMessage>,
    /// Finishes once every sender is dropped and everything sent was
    /// written; a process awaits it before exiting so its last message
    /// (a `shutdown_ack`) is not lost. `None` for in-memory pairs.
    pub writer: Option<tokio::task::JoinHandle<()>>,
}

impl IpcChannel {
    /// Runs the JSON-lines transport over `reader` and `writer` on two
    /// tasks of the current tokio runtime, as the child process `me`. A
    /// malformed or over-long line is logged, counted in `stats` and
    /// answered with a `runtime.rejected` message; it never closes the
    /// channel.
    pub fn from_io<R, W>(reader: R, writer: W, me: String, stats: Arc<ProtocolStats>) -> IpcChannel
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (outbound_tx, outbound_rx) = mpsc::channel(DEFAULT_CAPACITY);
        let (inbound_tx, inbound_rx) = mpsc::channel(DEFAULT_CAPACITY);
        let writer = tokio::spawn(write_lines(writer, outbound_rx, |message| {
            framing::encode(&message)
        }));
        // A weak sender, so that the writer still finishes once the
        // process drops its own senders while stdin stays open.
        let rejections = outbound_tx.downgrade();
        tokio::spawn(async move {
            let reject = |error: &ProtocolError| error.rejection().to_message(&me, ORCHESTRATOR);
            read_messages(reader, &stats, rejections, reject, |message| {
                let inbound = inbound_tx.clone();
                async move { inbound.send(message).await.is_ok() }
            })
            .await;
        });
        IpcChannel {
            sender: outbound_tx,
            receiver: inbound_rx,
            writer: Some(writer),
        }
    }

    /// A connected pair of in-memory channels, for tests and in-process use.
    pub fn pair() -> (IpcChannel, IpcChannel) {
        let (a_tx, a_rx) = mpsc::channel(DEFAULT_CAPACITY);
        let (b_tx, b_rx) = mpsc::channel(DEFAULT_CAPACITY);
        (
            IpcChannel {
                sender: a_tx,
                receiver: b_rx,
                writer: None,
            },
            IpcChannel {
                sender: b_tx,
                receiver: a_rx,
                writer: None,
            },
        )
    }
}

/// How many queued lines one write may carry.
const LINES_PER_WRITE: usize = 64;
/// Lines are gathered into one write up to this many bytes; a longer line
/// goes out on its own, so the buffer never holds a copy of a big frame.
const BYTES_PER_WRITE: usize = 64 * 1024;

/// Writes each queued item as one line (`encode` makes the line) until
/// every sender is gone or the stream breaks. Lines already queued when a
/// write starts go out in that one write, so a burst costs one system
/// call instead of one per message, and a lone message waits for nothing.
pub(crate) async fn write_lines<W: AsyncWrite + Unpin, T>(
    mut writer: W,
    mut outbound: mpsc::Receiver<T>,
    encode: impl Fn(T) -> Vec<u8>,
) {
    let mut items = Vec::with_capacity(LINES_PER_WRITE);
    let mut gathered = Vec::with_capacity(BYTES_PER_WRITE);
    while outbound.recv_many(&mut items, LINES_PER_WRITE).await > 0 {
        for item in items.drain(..) {
            let line = encode(item);
            if gathered.len() + line.len() > BYTES_PER_WRITE {
                if write_now(&mut writer, &gathered).await.is_err() {
                    return;
                }
                gathered.clear();
            }
            if line.len() > BYTES_PER_WRITE {
                if write_now(&mut writer, &line).await.is_err() {
                    return;
                }
            } else {
                gathered.extend_from_slice(&line);
            }
        }
        if write_now(&mut writer, &gathered).await.is_err() {
            return;
        }
        gathered.clear();
    }
}

async fn write_now<W: AsyncWrite + Unpin>(writer: &mut W, bytes: &[u8]) -> std::io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    writer.write_all(bytes).await?;
    writer.flush().await
}

/// Reads messages until the stream ends, handing each to `deliver` (which
/// returns false to stop). A line that is not a message is counted in
/// `stats`, logged, and answered through `rejections` with what `reject`
/// builds.
pub(crate) async fn read_messages<R, F, Fut, T>(
    reader: R,
    stats: &ProtocolStats,
    rejections: mpsc::WeakSender<T>,
    reject: impl Fn(&ProtocolError) -> T,
    mut deliver: F,
) where
    R: AsyncRead + Unpin,
    F: FnMut(IpcMessage) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut reader = BufReader::new(reader);
    let mut buffer = Vec::new();
    loop {
        let refusal =
            match framing::read_bounded_line(&mut reader, &mut buffer, MAX_LINE_BYTES).await {
                Ok(LineRead::Line) if buffer.iter().all(u8::is_ascii_whitespace) => continue,
                Ok(LineRead::Line) => match framing::decode(&buffer) {
                    Ok(message) => {
                        if !deliver(message).await {
                            return;
                        }
                        continue;
                    }
                    Err(error) => ProtocolError::Malformed {
                        what: "IPC line".into(),
                        reason: error.to_string(),
                        event_id: None,
                    },
                },
                Ok(LineRead::TooLong(len)) => ProtocolError::Malformed {
                    what: "IPC line".into(),
                    reason: format!("{len} bytes exceed the {MAX_LINE_BYTES}-byte limit"),
                    event_id: None,
                },
                Ok(LineRead::Eof) | Err(_) => return,
            };
        stats.count(&refusal);
        tracing::warn!(code = refusal.code(), "{refusal}; refused");
        if let Some(sender) = rejections.upgrade() {
            let _ = sender.try_send(reject(&refusal));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_types::IpcMessageType;
    use serde_json::json;

    fn message(n: u64) -> IpcMessage {
        IpcMessage {
            message_type: IpcMessageType::Event,
            from: "a:1".into(),
            to: "b:1".into(),
            payload: json!(n),
        }
    }

    #[tokio::test]
    async fn json_lines_keep_order_and_survive_garbage() {
        let (near, far) = tokio::io::duplex(64);
        let (far_read, mut far_write) = tokio::io::split(far);
        let (near_read, near_write) = tokio::io::split(near);
        let stats = Arc::new(ProtocolStats::default());
        let mut channel = IpcChannel::from_io(
            near_read,
            near_write,
            "alpha:main".into(),
            Arc::clone(&stats),
        );
        far_write.write_all(b"garbage\n\n").await.unwrap();
        for n in 0..50 {
            far_write
                .write_all(&framing::encode(&message(n)))
                .await
                .unwrap();
        }
        for n in 0..50 {
            assert_eq!(channel.receiver.recv().await.unwrap(), message(n));
        }
        assert_eq!(stats.malformed(), 1);
        channel.sender.send(message(7)).await.unwrap();
        let mut reader = BufReader::new(far_read);
        let mut buffer = Vec::new();
        framing::read_bounded_line(&mut reader, &mut buffer, MAX_LINE_BYTES)
            .await
            .unwrap();
        let rejection = framing::decode(&buffer).unwrap();
        assert!(matches!(
            crate::protocol::decode(&rejection).unwrap(),
            crate::Inbound::Runtime(crate::RuntimeMessage::Rejected(_))
        ));
        framing::read_bounded_line(&mut reader, &mut buffer, MAX_LINE_BYTES)
            .await
            .unwrap();
        assert_eq!(framing::decode(&buffer).unwrap(), message(7));
        drop(far_write);
        drop(reader);
        assert!(channel.receiver.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_burst_with_a_big_frame_in_it_arrives_whole_and_in_order() {
        let (near, far) = tokio::io::duplex(4096);
        let (outbound, queued) = mpsc::channel(512);
        let writer = tokio::spawn(write_lines(near, queued, |line: Vec<u8>| line));
        let big = format!("{}\n", "x".repeat(3 * BYTES_PER_WRITE));
        let lines: Vec<String> = (0..300)
            .map(|n| match n {
                150 => big.clone(),
                n => format!("line {n}\n"),
            })
            .collect();
        for line in &lines {
            outbound.send(line.clone().into_bytes()).await.unwrap();
        }
        drop(outbound);
        let mut received = String::new();
        let mut far = far;
        tokio::io::AsyncReadExt::read_to_string(&mut far, &mut received)
            .await
            .unwrap();
        writer.await.unwrap();
        assert_eq!(received, lines.concat());
    }
}
