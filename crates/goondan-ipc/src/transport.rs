//! [`Transport`]: how the orchestrator's messages reach a routing key, and
//! the first implementation, [`StdioTransport`] (JSON lines over a child's
//! stdin and stdout).
//!
//! Starting a process is not this module's business: a spawner starts it
//! and hands over an [`Endpoint`]; the transport only carries messages.
//! Every message is addressed by a [`Link`], a routing key plus the
//! generation of the process serving it, so a message to or from an older
//! generation of an instance is refused instead of reaching the wrong
//! process (the generation fence). The end of a link's stream is explicit
//! ([`TransportEvent::EndOfStream`]): every message the process sent is
//! delivered before it, so the orchestrator never guesses how long to wait
//! for a dead process's last lines.

use crate::channel::{read_messages, write_lines};
use crate::framing;
use crate::protocol::{ProtocolError, ProtocolStats};
use crate::{RoutingKey, ORCHESTRATOR};
use goondan_types::IpcMessage;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

/// How many messages may wait for one process's writer.
pub const LINK_CAPACITY: usize = crate::channel::DEFAULT_CAPACITY;

/// One generation of one instance: where a message goes or came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Link {
    /// The instance.
    pub key: RoutingKey,
    /// Which process serving it; grows with every spawn.
    pub generation: u64,
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.key, self.generation)
    }
}

/// What a transport reports to the orchestrator, in order per link.
#[derive(Debug, Clone, PartialEq)]
pub enum TransportEvent {
    /// A message from the process behind `link`.
    Message {
        /// Where it came from.
        link: Link,
        /// The message.
        message: Box<IpcMessage>,
    },
    /// The link's stream ended; nothing more will come from it.
    EndOfStream {
        /// Which link.
        link: Link,
    },
}

/// How a freshly started process is reached.
pub enum Endpoint {
    /// Byte streams: what the process writes and where it reads.
    Stdio {
        /// The process's output (its stdout).
        from_process: Box<dyn AsyncRead + Send + Unpin>,
        /// The process's input (its stdin).
        to_process: Box<dyn AsyncWrite + Send + Unpin>,
    },
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Stdio { .. } => f.write_str("Endpoint::Stdio"),
        }
    }
}

/// Why a message was not sent; the message comes back so the caller can
/// keep it.
#[derive(Debug)]
pub enum SendError {
    /// The link's queue is full: try again after it drains.
    Full(Box<IpcMessage>),
    /// The link is gone (its process ended).
    Closed(Box<IpcMessage>),
    /// The link is of an older generation than the one now open.
    Stale(Box<IpcMessage>),
    /// The message would be a line over the frame bound
    /// ([`MAX_LINE_BYTES`](crate::framing::MAX_LINE_BYTES)); no peer would
    /// accept it.
    TooLarge {
        /// The message.
        message: Box<IpcMessage>,
        /// Its encoded size.
        bytes: usize,
    },
}

impl SendError {
    /// The message that was not sent.
    pub fn into_message(self) -> IpcMessage {
        match self {
            SendError::Full(message)
            | SendError::Closed(message)
            | SendError::Stale(message)
            | SendError::TooLarge { message, .. } => *message,
        }
    }
}

/// Delivers messages to and from routing keys.
///
/// Contract: messages to one link keep their order, and so do messages
/// from it; every [`TransportEvent`] of a link comes before its
/// [`TransportEvent::EndOfStream`]; `try_send` never blocks and never
/// buffers beyond the link's bound.
pub trait Transport: Send + Sync {
    /// Starts carrying messages for `link`, reached through `endpoint`.
    /// Opening a newer generation of the same key fences the older one.
    fn open(&self, link: Link, endpoint: Endpoint) -> Result<(), crate::IpcError>;
    /// Queues `message` for `link` without waiting.
    fn try_send(&self, link: &Link, message: IpcMessage) -> Result<(), SendError>;
    /// Stops sending to `link` (its process is gone); the inbound side ends
    /// with its own end of stream.
    fn close(&self, link: &Link);
}

/// The open links of a [`StdioTransport`]: the newest generation per key.
type Links = Arc<Mutex<HashMap<RoutingKey, (u64, mpsc::Sender<Vec<u8>>)>>>;

/// JSON lines over each child's stdio.
pub struct StdioTransport {
    links: Links,
    events: mpsc::Sender<TransportEvent>,
    stats: Arc<ProtocolStats>,
}

impl StdioTransport {
    /// A transport reporting to `events`, counting refusals in `stats`.
    pub fn new(events: mpsc::Sender<TransportEvent>, stats: Arc<ProtocolStats>) -> Self {
        StdioTransport {
            links: Arc::default(),
            events,
            stats,
        }
    }
}

impl Transport for StdioTransport {
    fn open(&self, link: Link, endpoint: Endpoint) -> Result<(), crate::IpcError> {
        let Endpoint::Stdio {
            from_process,
            to_process,
        } = endpoint;
        let (outbound, outbound_rx) = mpsc::channel(LINK_CAPACITY);
        tokio::spawn(write_lines(to_process, outbound_rx, |line| line));
        let rejections = outbound.downgrade();
        self.links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(link.key.clone(), (link.generation, outbound));
        tokio::spawn(read_lines(
            from_process,
            link,
            self.events.clone(),
            Arc::clone(&self.links),
            Arc::clone(&self.stats),
            rejections,
        ));
        Ok(())
    }

    fn try_send(&self, link: &Link, message: IpcMessage) -> Result<(), SendError> {
        let links = self.links.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((generation, sender)) = links.get(&link.key) else {
            return Err(SendError::Closed(Box::new(message)));
        };
        if *generation != link.generation {
            return Err(SendError::Stale(Box::new(message)));
        }
        let line = framing::encode(&message);
        if line.len() > framing::MAX_LINE_BYTES {
            let bytes = line.len();
            return Err(SendError::TooLarge {
                message: Box::new(message),
                bytes,
            });
        }
        sender.try_send(line).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => SendError::Full(Box::new(message)),
            mpsc::error::TrySendError::Closed(_) => SendError::Closed(Box::new(message)),
        })
    }

    fn close(&self, link: &Link) {
        let mut links = self.links.lock().unwrap_or_else(PoisonError::into_inner);
        if links
            .get(&link.key)
            .is_some_and(|(generation, _)| *generation == link.generation)
        {
            links.remove(&link.key);
        }
    }
}

fn is_current(links: &Links, link: &Link) -> bool {
    links
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&link.key)
        .is_none_or(|(generation, _)| *generation <= link.generation)
}

async fn read_lines<R: AsyncRead + Unpin>(
    reader: R,
    link: Link,
    events: mpsc::Sender<TransportEvent>,
    links: Links,
    stats: Arc<ProtocolStats>,
    rejections: mpsc::WeakSender<Vec<u8>>,
) {
    let to = link.key.to_string();
    let reject =
        |error: &ProtocolError| framing::encode(&error.rejection().to_message(ORCHESTRATOR, &to));
    read_messages(reader, &stats, rejections, reject, |message| {
        let link = link.clone();
        let events = events.clone();
        let current = is_current(&links, &link);
        async move {
            if !current {
                tracing::warn!(link = %link, code = "E_IPC_STALE", "message from an older generation refused");
                return true;
            }
            let event = TransportEvent::Message {
                link,
                message: Box::new(message),
            };
            events.send(event).await.is_ok()
        }
    })
    .await;
    let _ = events.send(TransportEvent::EndOfStream { link }).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{decode, Inbound, Ready, RuntimeMessage, WireCode, PROTOCOL_VERSION};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    fn link(generation: u64) -> Link {
        Link {
            key: RoutingKey::new("alpha", "main"),
            generation,
        }
    }

    fn stdio() -> (Endpoint, tokio::io::DuplexStream, tokio::io::DuplexStream) {
        let (orchestrator_in, child_out) = tokio::io::duplex(1 << 16);
        let (orchestrator_out, child_in) = tokio::io::duplex(1 << 16);
        (
            Endpoint::Stdio {
                from_process: Box::new(orchestrator_in),
                to_process: Box::new(orchestrator_out),
            },
            child_out,
            child_in,
        )
    }

    fn ready() -> IpcMessage {
        RuntimeMessage::Ready(Ready {
            protocol_version: PROTOCOL_VERSION,
        })
        .to_message("alpha:main", ORCHESTRATOR)
    }

    #[tokio::test]
    async fn messages_arrive_in_order_and_the_end_of_stream_comes_last() {
        let (events_tx, mut events) = mpsc::channel(16);
        let transport = StdioTransport::new(events_tx, Arc::default());
        let (endpoint, mut child_out, child_in) = stdio();
        transport.open(link(1), endpoint).unwrap();
        for _ in 0..3 {
            child_out
                .write_all(&framing::encode(&ready()))
                .await
                .unwrap();
        }
        drop(child_out);
        for _ in 0..3 {
            assert!(matches!(
                events.recv().await.unwrap(),
                TransportEvent::Message { link: l, .. } if l == link(1)
            ));
        }
        assert_eq!(
            events.recv().await.unwrap(),
            TransportEvent::EndOfStream { link: link(1) }
        );
        drop(child_in);
    }

    #[tokio::test]
    async fn a_newer_generation_fences_the_older_one() {
        let (events_tx, mut events) = mpsc::channel(16);
        let transport = StdioTransport::new(events_tx, Arc::default());
        let (old_endpoint, mut old_out, _old_in) = stdio();
        transport.open(link(1), old_endpoint).unwrap();
        let (new_endpoint, _new_out, _new_in) = stdio();
        transport.open(link(2), new_endpoint).unwrap();
        assert!(matches!(
            transport.try_send(&link(1), ready()),
            Err(SendError::Stale(_))
        ));
        assert!(transport.try_send(&link(2), ready()).is_ok());
        old_out.write_all(&framing::encode(&ready())).await.unwrap();
        drop(old_out);
        assert_eq!(
            events.recv().await.unwrap(),
            TransportEvent::EndOfStream { link: link(1) },
            "the old generation's message was refused"
        );
    }

    #[tokio::test]
    async fn garbage_is_counted_and_answered_with_a_rejection() {
        let (events_tx, _events) = mpsc::channel(16);
        let stats = Arc::new(ProtocolStats::default());
        let transport = StdioTransport::new(events_tx, Arc::clone(&stats));
        let (endpoint, mut child_out, child_in) = stdio();
        transport.open(link(1), endpoint).unwrap();
        child_out.write_all(b"{not json\n").await.unwrap();
        let mut lines = BufReader::new(child_in).lines();
        let line = lines.next_line().await.unwrap().unwrap();
        let message = framing::decode(line.as_bytes()).unwrap();
        assert!(matches!(
            decode(&message).unwrap(),
            Inbound::Runtime(RuntimeMessage::Rejected(rejected)) if rejected.is(WireCode::Malformed)
        ));
        assert_eq!(stats.malformed(), 1);
    }

    #[tokio::test]
    async fn a_message_over_the_frame_bound_is_refused_at_once() {
        let (events_tx, _events) = mpsc::channel(16);
        let transport = StdioTransport::new(events_tx, Arc::default());
        let (endpoint, _child_out, _child_in) = stdio();
        transport.open(link(1), endpoint).unwrap();
        let mut huge = ready();
        huge.payload["metadata"]["padding"] = "\"".repeat(framing::MAX_LINE_BYTES / 2 + 1).into();
        match transport.try_send(&link(1), huge) {
            Err(SendError::TooLarge { bytes, .. }) => assert!(bytes > framing::MAX_LINE_BYTES),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_full_link_hands_the_message_back() {
        let (events_tx, _events) = mpsc::channel(16);
        let transport = StdioTransport::new(events_tx, Arc::default());
        // Nobody reads the child's stdin, so the writer stalls and the
        // queue fills.
        let (orchestrator_in, _child_out) = tokio::io::duplex(16);
        let (orchestrator_out, _child_in) = tokio::io::duplex(16);
        transport
            .open(
                link(1),
                Endpoint::Stdio {
                    from_process: Box::new(orchestrator_in),
                    to_process: Box::new(orchestrator_out),
                },
            )
            .unwrap();
        let mut full = false;
        for _ in 0..(LINK_CAPACITY + 8) {
            if let Err(error) = transport.try_send(&link(1), ready()) {
                assert!(matches!(error, SendError::Full(_)));
                full = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(full);
    }
}
