//! A mock OpenAI-compatible server on 127.0.0.1, on a bare socket: it
//! answers each request with the next canned Chat Completions body and
//! records the request bodies, so a test can drive the real HTTP model.

use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The running server.
pub struct MockLlm {
    pub base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl MockLlm {
    /// Serves `answers` in order, one per request, each on its own
    /// connection (`connection: close`).
    pub async fn start(answers: Vec<Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = Arc::clone(&requests);
        let mut answers = VecDeque::from(answers);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let body = read_request_body(&mut socket).await;
                recorded
                    .lock()
                    .unwrap()
                    .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                let answer = answers
                    .pop_front()
                    .map(|answer| answer.to_string())
                    .unwrap_or_else(|| r#"{"error":{"message":"no answer left"}}"#.into());
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        MockLlm {
            base_url: format!("http://{address}"),
            requests,
        }
    }

    /// The request bodies received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().unwrap().clone()
    }
}

/// Reads one HTTP/1.1 request and returns its (content-length) body.
async fn read_request_body(socket: &mut TcpStream) -> Vec<u8> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = socket.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return Vec::new();
        }
        buffer.extend_from_slice(&chunk[..n]);
        let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buffer[..end]).to_string();
        let length = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        if buffer.len() >= end + 4 + length {
            return buffer[end + 4..end + 4 + length].to_vec();
        }
    }
}
