//! Every platform behind the real HTTP front on 127.0.0.1, posted to the
//! way its sender posts (and the way an attacker would), with an emitter
//! that records what got through.

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair};
use futures_util::future::BoxFuture;
use goondan_connector::approvals::Press;
use goondan_connector::discord::Discord;
use goondan_connector::github::Github;
use goondan_connector::http::serve;
use goondan_connector::slack::Slack;
use goondan_connector::verify::{encode_hex, hmac_sha256_hex};
use goondan_connector::webhook::Webhook;
use goondan_connector::{Accepted, ConnectorConfig, EmitError, Emitter, HttpFront, Platform};
use goondan_types::{ConnectorEvent, ConnectorMessage};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Records events and presses; refuses every event past `capacity` as a
/// full queue.
struct Recorder {
    events: Mutex<Vec<ConnectorEvent>>,
    presses: Mutex<Vec<Press>>,
    capacity: usize,
}

impl Emitter for Recorder {
    fn emit(&self, event: ConnectorEvent) -> BoxFuture<'_, Result<Accepted, EmitError>> {
        Box::pin(async move {
            let mut events = self.events.lock().unwrap();
            if events.len() >= self.capacity {
                return Err(EmitError::QueueFull(
                    "webhook:default holds 3 events".into(),
                ));
            }
            events.push(event);
            Ok(Accepted::default())
        })
    }

    fn press(&self, press: Press) -> BoxFuture<'_, Result<(), EmitError>> {
        Box::pin(async move {
            self.presses.lock().unwrap().push(press);
            Ok(())
        })
    }
}

struct Server {
    base: String,
    recorder: Arc<Recorder>,
    client: reqwest::Client,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Server {
    async fn start(platform: Arc<dyn Platform>, mut front: HttpFront, capacity: usize) -> Server {
        front.addr.set_port(0);
        let listener = front.bind().await.unwrap();
        let addr = listener.local_addr().unwrap();
        let recorder = Arc::new(Recorder {
            events: Mutex::new(Vec::new()),
            presses: Mutex::new(Vec::new()),
            capacity,
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let path = front.path.clone();
        tokio::spawn(serve(listener, front, platform, recorder.clone(), async {
            let _ = stopped.await;
        }));
        Server {
            base: format!("http://{addr}{}", if path == "/" { "" } else { &path }),
            recorder,
            client: reqwest::Client::new(),
            _stop: stop,
        }
    }

    async fn post(
        &self,
        headers: &[(&str, String)],
        body: impl Into<reqwest::Body>,
    ) -> (u16, String) {
        let mut request = self.client.post(&self.base).body(body);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    fn events(&self) -> Vec<ConnectorEvent> {
        self.recorder.events.lock().unwrap().clone()
    }

    fn presses(&self) -> Vec<Press> {
        self.recorder.presses.lock().unwrap().clone()
    }
}

fn config(pairs: &[(&str, &str)], secrets: &[(&str, &str)]) -> ConnectorConfig {
    let mut config = ConnectorConfig::default();
    for (key, value) in pairs {
        config.config.insert(key.to_string(), value.to_string());
    }
    for (key, value) in secrets {
        config.secrets.insert(*key, *value);
    }
    config
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn webhook(pairs: &[(&str, &str)], capacity: usize) -> Server {
    let (platform, front) =
        Webhook::from_config(&config(pairs, &[("SIGNING_SECRET", "hook-secret")])).unwrap();
    Server::start(Arc::new(platform), front, capacity).await
}

#[tokio::test]
async fn a_signed_webhook_post_becomes_one_event() {
    let server = webhook(&[("WEBHOOK_PATH", "hooks/in")], 100).await;
    assert!(server.base.ends_with("/hooks/in"), "{}", server.base);
    let body = r#"{"event":"order_paid","text":"order 7 paid","instanceKey":"shop:7","properties":{"amount":12}}"#;
    let signature = format!(
        "sha256={}",
        hmac_sha256_hex(b"hook-secret", body.as_bytes())
    );
    let (status, answer) = server
        .post(&[("X-Webhook-Signature", signature)], body)
        .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains(r#""event":"order_paid""#), "{answer}");
    assert!(answer.contains(r#""target":null"#), "{answer}");
    let events = server.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name, "order_paid");
    assert_eq!(
        events[0].message,
        ConnectorMessage::Text {
            text: "order 7 paid".into()
        }
    );
    assert_eq!(events[0].properties["amount"], "12");

    // GitHub-style header name and no prefix are accepted too.
    let body = r#"{"text":"two"}"#;
    let bare = hmac_sha256_hex(b"hook-secret", body.as_bytes());
    assert_eq!(
        server.post(&[("X-Hub-Signature-256", bare)], body).await.0,
        200
    );
    assert_eq!(server.events().len(), 2);
}

#[tokio::test]
async fn forged_missing_and_replayed_signatures_get_401_and_no_event() {
    let server = webhook(&[("REPLAY_WINDOW_SECONDS", "60")], 100).await;
    let body = r#"{"text":"transfer everything"}"#;
    let wrong = format!("sha256={}", hmac_sha256_hex(b"guess", body.as_bytes()));
    let (status, answer) = server.post(&[("X-Webhook-Signature", wrong)], body).await;
    assert_eq!(status, 401);
    assert!(answer.contains("does not match"), "{answer}");
    let (status, answer) = server.post(&[], body).await;
    assert_eq!(status, 401);
    assert!(answer.contains("X-Webhook-Signature"), "{answer}");
    assert_eq!(
        server
            .post(&[("X-Webhook-Signature", "sha256=zz".into())], body)
            .await
            .0,
        401
    );

    // A signature of the body alone does not cover a timestamped post.
    let stamp = now().to_string();
    let body_only = hmac_sha256_hex(b"hook-secret", body.as_bytes());
    let headers = [
        ("X-Webhook-Signature", body_only),
        ("X-Webhook-Timestamp", stamp.clone()),
    ];
    assert_eq!(server.post(&headers, body).await.0, 401);

    // A timestamped post is accepted once; the same bytes again are a replay.
    let signed = hmac_sha256_hex(b"hook-secret", format!("{stamp}.{body}").as_bytes());
    let headers = [
        ("X-Webhook-Signature", signed),
        ("X-Webhook-Timestamp", stamp),
    ];
    assert_eq!(server.post(&headers, body).await.0, 200);
    let (status, answer) = server.post(&headers, body).await;
    assert_eq!(status, 401);
    assert!(answer.contains("replay"), "{answer}");

    // An old one, validly signed, is stale.
    let old = (now() - 3600).to_string();
    let signed = hmac_sha256_hex(b"hook-secret", format!("{old}.{body}").as_bytes());
    let (status, answer) = server
        .post(
            &[
                ("X-Webhook-Signature", signed),
                ("X-Webhook-Timestamp", old),
            ],
            body,
        )
        .await;
    assert_eq!(status, 401);
    assert!(answer.contains("window"), "{answer}");
    assert_eq!(
        server.events().len(),
        1,
        "only the one good post got through"
    );
}

#[tokio::test]
async fn require_timestamp_refuses_posts_without_one() {
    let server = webhook(&[("REQUIRE_TIMESTAMP", "true")], 100).await;
    let body = r#"{"text":"x"}"#;
    let signature = hmac_sha256_hex(b"hook-secret", body.as_bytes());
    let (status, answer) = server
        .post(&[("X-Webhook-Signature", signature)], body)
        .await;
    assert_eq!(status, 401);
    assert!(answer.contains("X-Webhook-Timestamp"), "{answer}");
    assert!(server.events().is_empty());
}

#[tokio::test]
async fn oversized_malformed_misdirected_and_slow_requests_are_refused() {
    let server = webhook(
        &[("MAX_BODY_BYTES", "1024"), ("BODY_TIMEOUT_SECONDS", "1")],
        100,
    )
    .await;
    let sign = |body: &str| {
        (
            "X-Webhook-Signature",
            hmac_sha256_hex(b"hook-secret", body.as_bytes()),
        )
    };

    let big = format!(r#"{{"text":"{}"}}"#, "a".repeat(4096));
    let (status, answer) = server.post(&[sign(&big)], big.clone()).await;
    assert_eq!(status, 413, "{answer}");
    // Without a Content-Length (chunked), the limit holds while reading.
    let chunks = futures_util::stream::iter(
        big.clone()
            .into_bytes()
            .chunks(512)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let (status, _) = server
        .post(&[sign(&big)], reqwest::Body::wrap_stream(chunks))
        .await;
    assert_eq!(status, 413);

    for malformed in ["{not json", "[1,2]", "\"text\""] {
        let (status, answer) = server.post(&[sign(malformed)], malformed).await;
        assert_eq!(status, 400, "{malformed}: {answer}");
    }

    let wrong_path = server
        .client
        .post(format!("{}/elsewhere", server.base))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_path.status().as_u16(), 404);
    let get = server.client.get(&server.base).send().await.unwrap();
    assert_eq!(get.status().as_u16(), 405);

    // A body promised but never sent is cut off after BODY_TIMEOUT_SECONDS.
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"te")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_string(&mut answer),
    )
    .await
    .expect("the server answers a slow body")
    .unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(server.events().is_empty());
}

#[tokio::test]
async fn a_flood_beyond_the_queue_gets_429_and_every_accepted_post_is_kept() {
    let server = Arc::new(webhook(&[], 3).await);
    let mut posts = Vec::new();
    for n in 0..10 {
        let server = server.clone();
        posts.push(tokio::spawn(async move {
            let body = format!(r#"{{"text":"post {n}"}}"#);
            let signature = hmac_sha256_hex(b"hook-secret", body.as_bytes());
            server
                .post(&[("X-Webhook-Signature", signature)], body)
                .await
        }));
    }
    let mut accepted = 0;
    for post in posts {
        let (status, answer) = post.await.unwrap();
        match status {
            200 => accepted += 1,
            429 => assert!(answer.contains("E_QUEUE_FULL"), "{answer}"),
            other => panic!("unexpected {other}: {answer}"),
        }
    }
    assert_eq!(accepted, 3);
    assert_eq!(server.events().len(), 3);
}

#[tokio::test]
async fn github_deliveries_are_checked_and_pings_answered() {
    let (platform, front) =
        Github::from_config(&config(&[], &[("GITHUB_WEBHOOK_SECRET", "gh")])).unwrap();
    let server = Server::start(Arc::new(platform), front, 100).await;
    let sign = |body: &str| {
        (
            "X-Hub-Signature-256",
            format!("sha256={}", hmac_sha256_hex(b"gh", body.as_bytes())),
        )
    };

    let ping = r#"{"zen":"Keep it logically awesome."}"#;
    let (status, answer) = server
        .post(&[sign(ping), ("X-GitHub-Event", "ping".into())], ping)
        .await;
    assert_eq!((status, answer.contains("pong")), (200, true), "{answer}");

    let issue = r#"{"action":"opened","issue":{"number":42,"title":"Crash on start"},"repository":{"full_name":"acme/app"},"sender":{"login":"ann"}}"#;
    let headers = [
        sign(issue),
        ("X-GitHub-Event", "issues".into()),
        ("X-GitHub-Delivery", "d-1".into()),
    ];
    assert_eq!(server.post(&headers, issue).await.0, 200);
    let forged = [
        (
            "X-Hub-Signature-256",
            format!("sha256={}", hmac_sha256_hex(b"not-gh", issue.as_bytes())),
        ),
        ("X-GitHub-Event", "issues".into()),
    ];
    assert_eq!(server.post(&forged, issue).await.0, 401);
    assert_eq!(
        server.post(&[sign(issue)], issue).await.0,
        400,
        "no event type"
    );

    let events = server.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name, "github_issue");
    assert_eq!(events[0].instance_key.as_deref(), Some("github:acme/app"));
    assert_eq!(events[0].properties["delivery"], "d-1");
    assert_eq!(events[0].properties["number"], "42");
}

#[tokio::test]
async fn slack_requests_are_checked_challenges_answered_and_retries_ignored() {
    let (platform, front) =
        Slack::from_config(&config(&[], &[("SLACK_SIGNING_SECRET", "sl")])).unwrap();
    let server = Server::start(Arc::new(platform), front, 100).await;
    let sign = |body: &str, stamp: u64| {
        let base = format!("v0:{stamp}:{body}");
        [
            (
                "X-Slack-Signature",
                format!("v0={}", hmac_sha256_hex(b"sl", base.as_bytes())),
            ),
            ("X-Slack-Request-Timestamp", stamp.to_string()),
        ]
    };

    let challenge = r#"{"type":"url_verification","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#;
    let (status, answer) = server.post(&sign(challenge, now()), challenge).await;
    assert_eq!(
        (status, answer.as_str()),
        (200, "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
    );
    assert_eq!(
        server
            .post(&sign(challenge, now() - 600), challenge)
            .await
            .0,
        401,
        "stale"
    );
    assert_eq!(server.post(&[], challenge).await.0, 401, "unsigned");

    let mention = r#"{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{"type":"app_mention","channel":"C1","ts":"171.1","user":"U1","text":"<@B1> deploy?"}}"#;
    assert_eq!(server.post(&sign(mention, now()), mention).await.0, 200);
    // Slack retries a slow answer with the same event_id: one event only.
    assert_eq!(server.post(&sign(mention, now()), mention).await.0, 200);

    let command = "command=%2Fask&text=status+please&channel_id=C2&user_id=U1&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2F1";
    assert_eq!(server.post(&sign(command, now()), command).await.0, 200);

    let events = server.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].name, "app_mention");
    assert_eq!(events[0].instance_key.as_deref(), Some("slack:C1:171.1"));
    assert_eq!(events[1].name, "slash_command");
    assert_eq!(
        events[1].message,
        ConnectorMessage::Text {
            text: "status please".into()
        }
    );
    assert_eq!(
        events[1].properties["response_url"],
        "https://hooks.slack.com/commands/1"
    );
}

#[tokio::test]
async fn a_signed_press_of_an_approval_button_is_a_press_never_an_event() {
    let (platform, front) =
        Slack::from_config(&config(&[], &[("SLACK_SIGNING_SECRET", "sl")])).unwrap();
    let server = Server::start(Arc::new(platform), front, 100).await;
    let signed = |body: &str, secret: &[u8]| {
        let stamp = now();
        let base = format!("v0:{stamp}:{body}");
        [
            (
                "X-Slack-Signature",
                format!("v0={}", hmac_sha256_hex(secret, base.as_bytes())),
            ),
            ("X-Slack-Request-Timestamp", stamp.to_string()),
        ]
    };
    let payload = serde_json::json!({
        "type": "block_actions",
        "user": {"id": "U042", "username": "ann"},
        "channel": {"id": "C0123"},
        "container": {"message_ts": "1700000000.000100"},
        "actions": [{"action_id": "goondan_approve", "value": "apv_0123456789abcdef"}],
    });
    let body: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish();
    assert_eq!(
        server.post(&signed(&body, b"forged"), body.clone()).await.0,
        401
    );
    assert_eq!(server.post(&[], body.clone()).await.0, 401);
    assert!(server.presses().is_empty());

    assert_eq!(server.post(&signed(&body, b"sl"), body).await.0, 200);
    let presses = server.presses();
    assert_eq!(presses.len(), 1, "{presses:?}");
    assert_eq!(presses[0].approval_id, "apv_0123456789abcdef");
    assert_eq!(presses[0].user_id, "U042");
    assert!(server.events().is_empty(), "a press reached an agent");
}

#[tokio::test]
async fn discord_interactions_are_checked_with_ed25519_and_pings_answered() {
    let key = Ed25519KeyPair::generate().unwrap();
    let public = encode_hex(key.public_key().as_ref());
    let (platform, front) =
        Discord::from_config(&config(&[("DISCORD_PUBLIC_KEY", &public)], &[])).unwrap();
    let server = Server::start(Arc::new(platform), front, 100).await;
    let sign = |body: &str, stamp: String| {
        let message = format!("{stamp}{body}");
        [
            (
                "X-Signature-Ed25519",
                encode_hex(key.sign(message.as_bytes()).as_ref()),
            ),
            ("X-Signature-Timestamp", stamp),
        ]
    };

    let ping = r#"{"type":1,"id":"P"}"#;
    let (status, answer) = server.post(&sign(ping, now().to_string()), ping).await;
    assert_eq!((status, answer.as_str()), (200, r#"{"type":1}"#));

    let command = r#"{"type":2,"id":"I1","token":"t","channel_id":"C1","member":{"user":{"id":"U1","username":"ann"}},"data":{"name":"ask"}}"#;
    let (status, answer) = server
        .post(&sign(command, now().to_string()), command)
        .await;
    assert_eq!((status, answer.as_str()), (200, r#"{"type":5}"#));

    // Discord's own probe: a valid-looking but wrong signature.
    let other = Ed25519KeyPair::generate().unwrap();
    let forged = [
        (
            "X-Signature-Ed25519",
            encode_hex(
                other
                    .sign(format!("{}{command}", now()).as_bytes())
                    .as_ref(),
            ),
        ),
        ("X-Signature-Timestamp", now().to_string()),
    ];
    assert_eq!(server.post(&forged, command).await.0, 401);
    // A signed body with a tampered byte.
    let headers = sign(command, now().to_string());
    assert_eq!(
        server.post(&headers, command.replace("ask", "rm!")).await.0,
        401
    );
    assert_eq!(
        server
            .post(&sign(command, (now() - 3600).to_string()), command)
            .await
            .0,
        401,
        "stale"
    );

    let events = server.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].name, "slash_command");
    assert_eq!(events[0].properties["command_name"], "ask");
}

impl Server {
    /// The listener's `host:port`.
    fn authority(&self) -> String {
        self.base
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_string()
    }
}

/// Reads until the server closes the connection; `None` if it is still
/// open after `within`.
async fn closed_within(
    stream: &mut tokio::net::TcpStream,
    within: std::time::Duration,
) -> Option<Vec<u8>> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(within, async {
        let mut buffer = [0u8; 1024];
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    read.ok().map(|()| received)
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_headers_is_closed() {
    let server = webhook(&[("HEADER_TIMEOUT_SECONDS", "1")], 100).await;
    // Says nothing at all.
    let mut silent = tokio::net::TcpStream::connect(server.authority())
        .await
        .unwrap();
    // Sends half a request head, then one byte at a time (slowloris).
    let mut slow = tokio::net::TcpStream::connect(server.authority())
        .await
        .unwrap();
    slow.write_all(b"POST / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let trickle = async {
        for _ in 0..6 {
            tokio::time::sleep(std::time::Duration::from_millis(400)).await;
            if slow.write_all(b"X").await.is_err() {
                break;
            }
        }
    };
    let within = std::time::Duration::from_secs(5);
    let (silent_closed, ()) = tokio::join!(closed_within(&mut silent, within), trickle);
    assert!(silent_closed.is_some(), "a silent connection stayed open");
    assert!(
        closed_within(&mut slow, within).await.is_some(),
        "a trickled head kept its connection"
    );
    // The front still serves; a kept-alive connection that then goes
    // quiet is closed the same way.
    let body = r#"{"text":"still here"}"#;
    let signature = format!(
        "sha256={}",
        hmac_sha256_hex(b"hook-secret", body.as_bytes())
    );
    let mut kept = tokio::net::TcpStream::connect(server.authority())
        .await
        .unwrap();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nX-Webhook-Signature: {signature}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    kept.write_all(request.as_bytes()).await.unwrap();
    let answer = closed_within(&mut kept, within)
        .await
        .expect("an idle kept-alive connection stayed open");
    assert!(
        String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_at_once_and_the_rest_served() {
    let server = webhook(&[("MAX_CONNECTIONS", "2")], 100).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(
            tokio::net::TcpStream::connect(server.authority())
                .await
                .unwrap(),
        );
    }
    // Give the server time to take both.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let mut third = tokio::net::TcpStream::connect(server.authority())
        .await
        .unwrap();
    assert!(
        closed_within(&mut third, std::time::Duration::from_secs(2))
            .await
            .is_some_and(|answer| answer.is_empty()),
        "a connection past the cap was kept"
    );
    drop(held);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let body = r#"{"text":"after the crowd"}"#;
    let signature = format!(
        "sha256={}",
        hmac_sha256_hex(b"hook-secret", body.as_bytes())
    );
    let (status, _) = server
        .post(&[("X-Webhook-Signature", signature)], body)
        .await;
    assert_eq!(status, 200);
}
