//! Transport behavior on raw sockets: connection resets are retried, read
//! timeouts and refused connections become errors, dropping the future
//! closes the connection.

use crate::support::*;
use goondan_model::{build, ModelParams, ModelRequest, NoStream};
use goondan_types::ModelMessage;
use serde_json::json;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn request() -> ModelRequest {
    ModelRequest {
        model: "gpt-test".into(),
        messages: vec![ModelMessage::user("hi")],
        tools: vec![],
        params: ModelParams::default(),
    }
}

/// Reads one HTTP/1.1 request (headers and a content-length body).
async fn read_request(socket: &mut TcpStream) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = socket.read(&mut chunk).await.unwrap();
        if n == 0 {
            return;
        }
        buffer.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buffer).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse::<usize>().ok())?
                })
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                return;
            }
        }
    }
}

#[tokio::test]
async fn a_connection_reset_is_retried() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut first, _) = listener.accept().await.unwrap();
        read_request(&mut first).await;
        drop(first);
        let (mut second, _) = listener.accept().await.unwrap();
        read_request(&mut second).await;
        let body = json!({"choices": [{"message": {"role": "assistant", "content": "after reset"}, "finish_reason": "stop"}]}).to_string();
        let response = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        second.write_all(response.as_bytes()).await.unwrap();
    });
    let model = build(
        &http_config("openai", &format!("http://{address}"), json!({})),
        &no_env(),
    )
    .unwrap();
    let answer = model.generate(request(), &NoStream).await.unwrap();
    assert_eq!(answer.text(), "after reset");
}

#[tokio::test]
async fn a_silent_server_hits_the_read_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
    });
    let config = http_config(
        "openai",
        &format!("http://{address}"),
        json!({"readTimeoutMs": 100, "maxRetries": 0}),
    );
    let model = build(&config, &no_env()).unwrap();
    let error = model.generate(request(), &NoStream).await.unwrap_err();
    assert_eq!(error.code(), "E_MODEL_TRANSPORT");
    assert!(error.suggestion().unwrap().contains("readTimeoutMs"));
}

#[tokio::test]
async fn a_refused_connection_exhausts_retries() {
    let address = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap()
    };
    let config = http_config(
        "anthropic",
        &format!("http://{address}"),
        json!({"maxRetries": 1}),
    );
    let model = build(&config, &no_env()).unwrap();
    let error = model.generate(request(), &NoStream).await.unwrap_err();
    assert_eq!(error.code(), "E_MODEL_RETRIES_EXHAUSTED");
    assert!(error.to_string().contains("2 attempts"), "{error}");
}

#[tokio::test]
async fn dropping_the_future_closes_the_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        let mut rest = [0u8; 64];
        let n = socket.read(&mut rest).await.unwrap_or(0);
        let _ = closed_tx.send(n);
    });
    let model = build(
        &http_config("openai", &format!("http://{address}"), json!({})),
        &no_env(),
    )
    .unwrap();
    let outcome = tokio::time::timeout(
        Duration::from_millis(100),
        model.generate(request(), &NoStream),
    )
    .await;
    assert!(outcome.is_err(), "the silent server cannot have answered");
    let read_after_drop = tokio::time::timeout(Duration::from_secs(5), closed_rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(read_after_drop, 0, "the client closed its end");
}

/// Answers one request with SSE headers, then an OpenAI text chunk every
/// 200 ms for as long as the client listens; returns the address.
async fn trickling_server() -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        if socket.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        loop {
            let event = format!(
                "data: {}\n\n",
                json!({"choices": [{"index": 0, "delta": {"content": "tick "}}]})
            );
            let chunk = format!("{:x}\r\n{event}\r\n", event.len());
            if socket.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    address
}

/// Issue 16 #8: a stream that never stops trickling is cut at the Model's
/// total deadline, although no read ever waits long.
#[tokio::test]
async fn a_trickling_stream_is_cut_at_the_total_deadline() {
    let address = trickling_server().await;
    let config = http_config(
        "openai",
        &format!("http://{address}"),
        json!({"stream": true, "timeoutMs": 1000, "readTimeoutMs": 5000}),
    );
    let model = build(&config, &no_env()).unwrap();
    let deltas = Deltas::default();
    let started = std::time::Instant::now();
    let error = model.generate(request(), &deltas).await.unwrap_err();
    let elapsed = started.elapsed();
    assert_eq!(error.code(), "E_MODEL_TIMEOUT");
    assert!(
        error.to_string().contains("Model/test-model") && error.to_string().contains("1000 ms"),
        "{error}"
    );
    assert!(error.suggestion().unwrap().contains("timeoutMs"));
    assert!(
        elapsed >= Duration::from_millis(1000) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    assert!(deltas.all().len() >= 2, "the stream did trickle");
}

/// Issue 16 #8: a server that accepts and never answers costs the total
/// deadline, not every retry's read timeout.
#[tokio::test]
async fn a_silent_server_is_cut_at_the_total_deadline_across_retries() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            read_request(&mut socket).await;
            sockets.push(socket);
        }
    });
    let config = http_config(
        "openai",
        &format!("http://{address}"),
        json!({"timeoutMs": 1000, "readTimeoutMs": 600, "maxRetries": 5}),
    );
    let model = build(&config, &no_env()).unwrap();
    let started = std::time::Instant::now();
    let error = model.generate(request(), &NoStream).await.unwrap_err();
    assert_eq!(error.code(), "E_MODEL_TIMEOUT", "{error}");
    assert!(started.elapsed() < Duration::from_secs(3));
}
