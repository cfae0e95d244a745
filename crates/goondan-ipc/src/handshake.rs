//! The spawn handshake: the first frame a locally spawned child reads on
//! its stdin, before any [`IpcMessage`](goondan_types::IpcMessage).
//!
//! It carries the protocol version and the [`Secrets`] the child needs
//! (API keys and every other variable the bundle reads through
//! `valueFrom.env`). The orchestrator withholds those variables from the
//! child's exec environment, so a tool the child runs (bash, a script)
//! cannot inherit them and `/proc/<pid>/environ` does not hold them; the
//! child keeps them in memory only and never puts them into its own
//! environment.
//!
//! Wire shape, one JSON line:
//! `{"type":"runtime.spawn","protocolVersion":7,"secrets":{"NAME":"value"}}`.
//! This module is the only encoder ([`SpawnHandshake::encode`]) and
//! decoder ([`SpawnHandshake::decode`], [`read_handshake`]). It does not
//! decide which variables are secrets (the binary does) nor how a remote
//! worker would receive them (an authenticated channel, not a pipe).

use crate::error::HandshakeError;
use crate::framing::{self, LineRead};
use crate::protocol::PROTOCOL_VERSION;
use goondan_types::{JsonValue, Secrets};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::io::AsyncBufRead;

/// The largest handshake frame, in bytes. A handful of keys take well
/// under a kilobyte; the bound keeps the write into a fresh pipe (64 KiB
/// on Linux) from ever blocking.
pub const MAX_HANDSHAKE_BYTES: usize = 60 * 1024;

/// How long a child waits for the handshake before it gives up. The
/// spawner writes it right after the fork, so only a child started by
/// hand (without an orchestrator) ever waits.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The value of the frame's `type`.
const HANDSHAKE_TYPE: &str = "runtime.spawn";

/// The first frame on a spawned child's stdin.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename = "runtime.spawn", rename_all = "camelCase")]
pub struct SpawnHandshake {
    /// The orchestrator's [`PROTOCOL_VERSION`]; a child of another version
    /// refuses to start.
    pub protocol_version: u32,
    /// The secret variables, by name; only those that have a value.
    #[serde(default)]
    pub secrets: Secrets,
}

impl std::fmt::Debug for SpawnHandshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpawnHandshake")
            .field("protocol_version", &self.protocol_version)
            .field("secrets", &self.secrets)
            .finish()
    }
}

impl SpawnHandshake {
    /// The handshake of this build's protocol version.
    pub fn new(secrets: Secrets) -> Self {
        SpawnHandshake {
            protocol_version: PROTOCOL_VERSION,
            secrets,
        }
    }

    /// The frame: one JSON line with its newline. Fails only when it
    /// exceeds [`MAX_HANDSHAKE_BYTES`].
    pub fn encode(&self) -> Result<Vec<u8>, HandshakeError> {
        // A struct of strings always serializes.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        if line.len() > MAX_HANDSHAKE_BYTES {
            return Err(HandshakeError::TooLarge {
                limit: MAX_HANDSHAKE_BYTES,
            });
        }
        Ok(line)
    }

    /// Parses one frame (without its newline). The version is checked
    /// before the rest of the shape, so a child of another version says
    /// so instead of calling the frame malformed. Error messages never
    /// quote the frame: it holds secrets.
    pub fn decode(line: &[u8]) -> Result<SpawnHandshake, HandshakeError> {
        let value: JsonValue = serde_json::from_slice(line).map_err(|error| malformed(&error))?;
        if value.get("type").and_then(JsonValue::as_str) != Some(HANDSHAKE_TYPE) {
            return Err(HandshakeError::Malformed {
                reason: format!("the first line is not a `{HANDSHAKE_TYPE}` frame"),
            });
        }
        let version = value.get("protocolVersion").and_then(JsonValue::as_u64);
        if version != Some(u64::from(PROTOCOL_VERSION)) {
            return Err(HandshakeError::Version {
                expected: PROTOCOL_VERSION,
                actual: version,
            });
        }
        serde_json::from_value(value).map_err(|error| malformed(&error))
    }
}

/// Describes a JSON error by its kind and place, never by the text.
fn malformed(error: &serde_json::Error) -> HandshakeError {
    let kind = match error.classify() {
        serde_json::error::Category::Io => "unreadable",
        serde_json::error::Category::Syntax => "not valid JSON",
        serde_json::error::Category::Data => "not of the handshake's shape",
        serde_json::error::Category::Eof => "cut short",
    };
    HandshakeError::Malformed {
        reason: format!(
            "the frame is {kind} (line {}, column {})",
            error.line(),
            error.column()
        ),
    }
}

/// Reads the handshake, the first line of `reader`, waiting at most
/// `timeout`. Whatever follows the line stays in `reader` for the IPC
/// channel.
pub async fn read_handshake<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    timeout: Duration,
) -> Result<SpawnHandshake, HandshakeError> {
    let mut line = Vec::new();
    let read = tokio::time::timeout(
        timeout,
        framing::read_bounded_line(reader, &mut line, MAX_HANDSHAKE_BYTES),
    )
    .await
    .map_err(|_| HandshakeError::TimedOut { after: timeout })?
    .map_err(HandshakeError::Io)?;
    match read {
        LineRead::Line => SpawnHandshake::decode(&line),
        LineRead::TooLong(_) => Err(HandshakeError::TooLarge {
            limit: MAX_HANDSHAKE_BYTES,
        }),
        LineRead::Eof => Err(HandshakeError::Missing),
    }
}

/// A spawned child's side of its pipes: reads the spawn handshake from
/// stdin (what follows it stays buffered for the channel), then speaks IPC
/// as `me` on stdin and stdout. From a good handshake on, its secrets are
/// masked in everything this process logs.
pub async fn child_channel(
    me: &crate::RoutingKey,
) -> (Result<SpawnHandshake, HandshakeError>, crate::IpcChannel) {
    let (stdin, stdout) = child_stdio();
    let mut stdin = tokio::io::BufReader::new(stdin);
    let handshake = read_handshake(&mut stdin, HANDSHAKE_TIMEOUT).await;
    if let Ok(handshake) = &handshake {
        goondan_types::secret::mask_in_logs(&handshake.secrets);
    }
    let channel = crate::IpcChannel::from_io(
        stdin,
        stdout,
        me.to_string(),
        std::sync::Arc::new(crate::protocol::ProtocolStats::default()),
    );
    (handshake, channel)
}

type Reader = Box<dyn tokio::io::AsyncRead + Unpin + Send>;
type Writer = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// The process's stdin and stdout for the channel. The orchestrator gives
/// a child one socket as both (a descriptor fewer on its side than two
/// pipes); a child started some other way may have pipes. Either is
/// waited on by the runtime's reactor; tokio's `stdin()` and `stdout()`
/// would instead park a blocking thread on each (an idle agent's stdin
/// read holds one for its whole life, and threads are what bound how many
/// agents a machine runs: they count against `pid_max`). Anything else (a
/// file, a terminal) keeps those.
fn child_stdio() -> (Reader, Writer) {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    use tokio::net::unix::pipe;
    let stdin = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from);
    if let Ok(stdin) = &stdin {
        let is_socket = stdin
            .metadata()
            .is_ok_and(|metadata| metadata.file_type().is_socket());
        let socket = is_socket
            .then(|| stdin.try_clone())
            .and_then(Result::ok)
            .map(|file| std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(file)))
            .filter(|socket| socket.set_nonblocking(true).is_ok())
            .and_then(|socket| tokio::net::UnixStream::from_std(socket).ok());
        if let Some(socket) = socket {
            // Stdout is the same socket: read and write through one.
            let (reader, writer) = socket.into_split();
            return (Box::new(reader), Box::new(writer));
        }
    }
    let reader: Reader = match stdin
        .map(std::os::fd::OwnedFd::from)
        .and_then(pipe::Receiver::from_owned_fd)
    {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let writer: Writer = match std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd)
    {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    };
    (reader, writer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    const KEY: &str = "sk-test-SECRET-9f3a7c2e1b";

    fn secrets() -> Secrets {
        [("MY_KEY", KEY)].into_iter().collect()
    }

    #[tokio::test]
    async fn the_frame_round_trips_and_leaves_the_rest_of_the_stream() {
        let frame = SpawnHandshake::new(secrets()).encode().unwrap();
        assert_eq!(
            serde_json::from_slice::<JsonValue>(&frame).unwrap(),
            serde_json::json!({
                "type": "runtime.spawn",
                "protocolVersion": PROTOCOL_VERSION,
                "secrets": {"MY_KEY": KEY}
            })
        );
        let mut stream = frame.clone();
        stream.extend_from_slice(b"{\"next\":1}\n");
        let mut reader = tokio::io::BufReader::new(&stream[..]);
        let handshake = read_handshake(&mut reader, HANDSHAKE_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(handshake.secrets.get("MY_KEY"), Some(KEY));
        let mut rest = String::new();
        reader.read_to_string(&mut rest).await.unwrap();
        assert_eq!(rest, "{\"next\":1}\n");
        assert!(!format!("{handshake:?}").contains(KEY));
    }

    #[tokio::test]
    async fn a_bad_or_missing_frame_is_a_coded_error_that_quotes_no_secret() {
        let cases: [(&[u8], &str); 6] = [
            (b"", "E_IPC_HANDSHAKE_MISSING"),
            (
                b"{\"type\":\"runtime.spawn\",\"protocolVersion\":7,\"secrets\":{\"K\":\"sk-test-SECRET-9f3a7c2e1b\"\n",
                "E_IPC_HANDSHAKE_MALFORMED",
            ),
            (
                b"{\"type\":\"event\",\"from\":\"orchestrator\",\"to\":\"a:1\",\"payload\":{}}\n",
                "E_IPC_HANDSHAKE_MALFORMED",
            ),
            (
                b"{\"type\":\"runtime.spawn\",\"protocolVersion\":1,\"secrets\":{}}\n",
                "E_IPC_PROTOCOL_VERSION",
            ),
            (
                b"{\"type\":\"runtime.spawn\",\"protocolVersion\":7,\"secrets\":{\"K\":[\"sk-test-SECRET-9f3a7c2e1b\"]}}\n",
                "E_IPC_HANDSHAKE_MALFORMED",
            ),
            (b"not json at all\n", "E_IPC_HANDSHAKE_MALFORMED"),
        ];
        for (input, code) in cases {
            let mut reader = tokio::io::BufReader::new(input);
            let error = read_handshake(&mut reader, HANDSHAKE_TIMEOUT)
                .await
                .unwrap_err();
            assert_eq!(error.code(), code, "{error}");
            assert!(!error.to_string().contains(KEY), "{error}");
            assert!(!error.suggestion().is_empty());
        }
        let too_long = vec![b'x'; MAX_HANDSHAKE_BYTES + 10];
        let mut reader = tokio::io::BufReader::new(&too_long[..]);
        let error = read_handshake(&mut reader, HANDSHAKE_TIMEOUT)
            .await
            .unwrap_err();
        assert_eq!(error.code(), "E_IPC_HANDSHAKE_TOO_LARGE");
    }

    #[tokio::test]
    async fn a_silent_parent_times_out_instead_of_hanging() {
        let (_writer, reader) = tokio::io::duplex(64);
        let mut reader = tokio::io::BufReader::new(reader);
        let error = read_handshake(&mut reader, Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(error.code(), "E_IPC_HANDSHAKE_TIMEOUT");
    }
}
