//! The shared accept loop tried from outside over real TCP: one client
//! that fills the port with idle connections from 127.0.0.2 (its own
//! loopback address) does not lock out another client on 127.0.0.1, and
//! the router sees each request's peer.

use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use goondan_http::AcceptLimits;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Answers with the peer's IP address, as the accept loop reported it.
fn echo_peer() -> Router {
    Router::new().route(
        "/",
        get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }),
    )
}

/// A connection to `server` from the loopback address `source`.
async fn connect_from(source: &str, server: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    socket.connect(server).await.unwrap()
}

/// Sends one kept-alive GET and reads until the answer's body (the
/// peer's address) arrived or the server closed the connection; the
/// bytes read. The connection stays open (idle) when it was served.
async fn get_and_keep(stream: &mut TcpStream, expected_body: &str) -> String {
    let request = "GET / HTTP/1.1\r\nHost: test\r\nConnection: keep-alive\r\n\r\n";
    if stream.write_all(request.as_bytes()).await.is_err() {
        return String::new();
    }
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buffer))
            .await
            .expect("the server answers or closes");
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
        }
        if String::from_utf8_lossy(&answer).ends_with(expected_body) {
            break;
        }
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn one_client_with_idle_connections_does_not_lock_out_another() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let limits = AcceptLimits {
        max_connections_per_client: 2,
        // Long enough that no idle connection is closed during the test.
        ..AcceptLimits::new(8, Duration::from_secs(120))
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(goondan_http::serve(listener, echo_peer(), limits, async {
        let _ = stopped.await;
    }));

    // The crowd: as many connections as the whole port allows, each
    // served once and then left idle (kept alive). Only its first two
    // are held; the rest are closed without an answer.
    let mut crowd = Vec::new();
    let mut served = 0;
    for _ in 0..limits.max_connections {
        let mut stream = connect_from("127.0.0.2", server).await;
        let answer = get_and_keep(&mut stream, "127.0.0.2").await;
        if answer.starts_with("HTTP/1.1 200") {
            served += 1;
        } else {
            assert!(answer.is_empty(), "closed without an answer: {answer}");
        }
        crowd.push(stream);
    }
    assert_eq!(served, 2, "one client holds only its own share");

    // Another client still gets in, and the router sees who it is.
    let mut other = connect_from("127.0.0.1", server).await;
    let answer = get_and_keep(&mut other, "127.0.0.1").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(answer.ends_with("127.0.0.1"), "{answer}");

    // The crowd's slots come back when its connections close.
    drop(crowd);
    let mut again = connect_from("127.0.0.2", server).await;
    let mut answer = String::new();
    // Its closed connections are given back as the server notices the
    // close; a refused attempt is retried on a new connection.
    for _ in 0..1000 {
        answer = get_and_keep(&mut again, "127.0.0.2").await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        again = connect_from("127.0.0.2", server).await;
    }
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}
