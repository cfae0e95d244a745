//! How a program reaches a running swarm: the client of an
//! orchestrator's control socket (`<System Root>/runtime/<workspaceId>.sock`,
//! `goondan_orchestrator::control`), one JSON line per request and per
//! response.
//!
//! [`ControlSocket`] is the one client: `gdn`'s commands, the Studio's
//! actions, `gdn serve` and `gdn mcp serve` all reach the orchestrator
//! through it. It has three shapes of exchange:
//!
//! - [`ControlSocket::call`]: one request, one response (status, list,
//!   cancel, fork, rewind, edit, decide, restart, shutdown, …);
//! - [`ControlSocket::open`]: a request answered line by line
//!   (`DeliverStreaming`: accepted, text as it streams, the answer); the
//!   connection lives as long as the [`Responses`], and dropping it
//!   before the answer cancels the Turn;
//! - [`ControlSocket::ask`]: one Turn asked and answered (`Request`).
//!
//! What it keeps apart, so no caller has to: an orchestrator that is not
//! running (nothing was sent; [`ClientError::is_unreachable`]), one whose
//! socket takes no more connections now ([`ClientError::Busy`]), and one
//! that took the request and went away before answering
//! ([`ClientError::Stopped`]: the request may still be acted on).
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

use goondan_orchestrator::control::{ControlRequest, ControlResponse};
use goondan_types::{AgentEvent, ConnectorEvent, ErrorBody};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// The longest response line read: an answer with its text (a Turn's
/// answer is bounded by the model's output limit) or a listing.
pub const MAX_RESPONSE_LINE: u64 = 16 * 1024 * 1024;

/// A failure to exchange a request with the orchestrator; a refusal of
/// the orchestrator itself is a [`ControlResponse::Failed`], not this.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No orchestrator listens at the socket: nothing was sent.
    #[error("no orchestrator listens at {}", path.display())]
    NotRunning {
        /// The socket path.
        path: PathBuf,
    },
    /// The orchestrator runs but its socket takes no more connections
    /// now (a full listen queue): nothing was sent.
    #[error("the orchestrator's control socket {} takes no more connections now: {source}", path.display())]
    Busy {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The orchestrator took the request and went away (stopped,
    /// killed) before it answered: what was asked may still be done.
    #[error("the orchestrator stopped before it answered")]
    Stopped,
    /// Reading or writing the socket failed otherwise.
    #[error("control socket {}: {source}", path.display())]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The orchestrator answered with a line that is not a response, or
    /// one over [`MAX_RESPONSE_LINE`], or a response the request does
    /// not take.
    #[error("the orchestrator's answer breaks the control protocol: {detail}")]
    Protocol {
        /// What was wrong.
        detail: String,
    },
}

impl ClientError {
    /// The error code (`docs/errors.md`).
    pub fn code(&self) -> &'static str {
        match self {
            ClientError::NotRunning { .. } => "E_ORCHESTRATOR_NOT_RUNNING",
            ClientError::Busy { .. } => "E_CONTROL_BUSY",
            ClientError::Stopped => "E_ORCHESTRATOR_STOPPED",
            ClientError::Io { .. } => "E_CONTROL_SOCKET",
            ClientError::Protocol { .. } => "E_CONTROL_PROTOCOL",
        }
    }

    /// What to do about it.
    pub fn suggestion(&self) -> &'static str {
        match self {
            ClientError::NotRunning { .. } | ClientError::Io { .. } => {
                "start the swarm with `gdn run --detach` in its bundle's folder"
            }
            ClientError::Busy { .. } => "try again in a moment",
            ClientError::Stopped => {
                "what was asked may still be done when the swarm starts again (`gdn run --detach`)"
            }
            ClientError::Protocol { .. } => {
                "the orchestrator runs another version of gdn: restart it with this one (`gdn restart`)"
            }
        }
    }

    /// Whether nothing was sent because no orchestrator listens (the
    /// caller may then act on the files itself).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::NotRunning { .. })
    }

    /// The error as the shared error body, with its suggestion.
    pub fn to_body(&self) -> ErrorBody {
        ErrorBody::new(self.code(), self.to_string()).with_suggestion(self.suggestion())
    }

    fn protocol(response: &ControlResponse) -> ClientError {
        ClientError::Protocol {
            detail: format!("an unexpected answer {response:?}"),
        }
    }
}

/// The client of one orchestrator's control socket. It holds only the
/// path: each exchange is a connection of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlSocket {
    path: PathBuf,
}

impl ControlSocket {
    /// The client of the socket at `path`.
    pub fn new(path: impl Into<PathBuf>) -> ControlSocket {
        ControlSocket { path: path.into() }
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sends `request` and reads its one response.
    pub async fn call(&self, request: &ControlRequest) -> Result<ControlResponse, ClientError> {
        let mut responses = self.open(request).await?;
        responses.next().await?.ok_or(ClientError::Stopped)
    }

    /// [`call`](Self::call), or `None` when no orchestrator listens
    /// (nothing was asked).
    pub async fn call_if_running(
        &self,
        request: &ControlRequest,
    ) -> Result<Option<ControlResponse>, ClientError> {
        match self.call(request).await {
            Ok(response) => Ok(Some(response)),
            Err(error) if error.is_unreachable() => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Sends `request` and hands back its responses as they come; the
    /// connection stays open while the [`Responses`] live (dropping them
    /// before a `DeliverStreaming` or a `Request` with
    /// `cancel_on_disconnect` is answered cancels its Turn).
    pub async fn open(&self, request: &ControlRequest) -> Result<Responses, ClientError> {
        let stream =
            UnixStream::connect(&self.path)
                .await
                .map_err(|source| match source.kind() {
                    ErrorKind::NotFound | ErrorKind::ConnectionRefused => ClientError::NotRunning {
                        path: self.path.clone(),
                    },
                    ErrorKind::WouldBlock => ClientError::Busy {
                        path: self.path.clone(),
                        source,
                    },
                    _ => ClientError::Io {
                        path: self.path.clone(),
                        source,
                    },
                })?;
        let (read, mut write) = stream.into_split();
        let mut line = serde_json::to_vec(request).map_err(|error| ClientError::Protocol {
            detail: format!("the request does not encode: {error}"),
        })?;
        line.push(b'\n');
        write
            .write_all(&line)
            .await
            .map_err(|source| self.after_connect(source))?;
        Ok(Responses {
            lines: BufReader::new(read),
            _write: write,
            path: self.path.clone(),
        })
    }

    /// One Turn of `agent` (else the entry agent) on `event`, answered:
    /// the answer event, or the orchestrator's refusal. With
    /// `cancel_on_disconnect`, dropping the future before it resolves
    /// cancels the Turn.
    pub async fn ask(
        &self,
        agent: Option<String>,
        event: ConnectorEvent,
        cancel_on_disconnect: bool,
    ) -> Result<Result<Box<AgentEvent>, ErrorBody>, ClientError> {
        let request = ControlRequest::Request {
            agent,
            event,
            cancel_on_disconnect,
        };
        match self.call(&request).await? {
            ControlResponse::Answer { response } => Ok(Ok(response)),
            ControlResponse::Failed(refused) => Ok(Err(refused)),
            other => Err(ClientError::protocol(&other)),
        }
    }

    /// An IO error on a connection the orchestrator had accepted: it went
    /// away when the peer closed or reset it.
    fn after_connect(&self, source: std::io::Error) -> ClientError {
        after_connect(&self.path, source)
    }
}

fn after_connect(path: &Path, source: std::io::Error) -> ClientError {
    match source.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
            ClientError::Stopped
        }
        _ => ClientError::Io {
            path: path.to_path_buf(),
            source,
        },
    }
}

/// The responses to one request, as the orchestrator sends them; the
/// connection closes when this is dropped.
#[derive(Debug)]
pub struct Responses {
    lines: BufReader<OwnedReadHalf>,
    /// Held open: the orchestrator takes its close for the client's
    /// leaving.
    _write: OwnedWriteHalf,
    path: PathBuf,
}

impl Responses {
    /// The next response; `None` when the orchestrator closed the
    /// connection.
    pub async fn next(&mut self) -> Result<Option<ControlResponse>, ClientError> {
        let mut line = Vec::new();
        let read = (&mut self.lines)
            .take(MAX_RESPONSE_LINE + 1)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|source| after_connect(&self.path, source))?;
        if read == 0 {
            return Ok(None);
        }
        if line.last() != Some(&b'\n') {
            return Err(if line.len() as u64 > MAX_RESPONSE_LINE {
                ClientError::Protocol {
                    detail: format!("a response line over {MAX_RESPONSE_LINE} bytes"),
                }
            } else {
                // The connection ended in the middle of a line.
                ClientError::Stopped
            });
        }
        serde_json::from_slice(&line)
            .map(Some)
            .map_err(|error| ClientError::Protocol {
                detail: format!("a line that is not a response ({error})"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    /// A one-connection orchestrator stand-in at a new socket: it reads
    /// the request line, then writes `answer` and closes.
    async fn stand_in(answer: &'static [u8]) -> (tempfile::TempDir, ControlSocket) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("control.sock");
        let listener = UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (read, mut write) = stream.into_split();
            let mut request = String::new();
            BufReader::new(read).read_line(&mut request).await.unwrap();
            assert!(request.ends_with('\n'), "{request:?}");
            write.write_all(answer).await.unwrap();
        });
        (dir, ControlSocket::new(path))
    }

    #[tokio::test]
    async fn no_socket_is_not_running_and_nothing_was_sent() {
        let dir = tempfile::tempdir().unwrap();
        let client = ControlSocket::new(dir.path().join("none.sock"));
        let error = client.call(&ControlRequest::Status).await.unwrap_err();
        assert!(error.is_unreachable(), "{error}");
        assert_eq!(error.code(), "E_ORCHESTRATOR_NOT_RUNNING");
        assert_eq!(
            client
                .call_if_running(&ControlRequest::Status)
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn an_orchestrator_that_closes_before_answering_stopped() {
        for answer in [&b""[..], b"{\"result\":\"stat"] {
            let (_dir, client) = stand_in(answer).await;
            let error = client.call(&ControlRequest::List).await.unwrap_err();
            assert!(matches!(error, ClientError::Stopped), "{answer:?}: {error}");
            assert!(!error.is_unreachable());
        }
    }

    #[tokio::test]
    async fn a_line_that_is_not_a_response_breaks_the_protocol() {
        let (_dir, client) = stand_in(b"[1, 2]\n").await;
        let error = client.call(&ControlRequest::List).await.unwrap_err();
        assert_eq!(error.code(), "E_CONTROL_PROTOCOL", "{error}");
    }

    #[tokio::test]
    async fn a_refused_turn_is_the_orchestrators_refusal_not_an_error() {
        let (_dir, client) = stand_in(
            b"{\"result\":\"failed\",\"code\":\"E_TURN_CANCELLED\",\"message\":\"cancelled\"}\n",
        )
        .await;
        let answer = client
            .ask(None, ConnectorEvent::text("stdin_message", "hi"), true)
            .await;
        match answer {
            Ok(Err(refused)) => assert_eq!(refused.code, "E_TURN_CANCELLED"),
            other => panic!("not a refusal: {other:?}"),
        }
    }
}
