//! A minimal Chrome DevTools Protocol client for the Studio's browser
//! test: headless Chromium started with the flags `.ci/run` documents, a
//! WebSocket (RFC 6455, text frames only, client frames masked) to its
//! page target, and `Page.navigate`, `Runtime.evaluate` and
//! `Page.captureScreenshot`. Everything stays on 127.0.0.1.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Chromium is, when it is installed.
pub(crate) fn chromium_path() -> Option<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
}

/// A headless Chromium, killed on drop.
pub(crate) struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    page: Page,
}

/// The WebSocket to one page target.
pub(crate) struct Page {
    stream: TcpStream,
    next_id: u64,
}

impl Browser {
    pub(crate) fn start(chromium: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                "--window-size=1400,900",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromium");
        // Chromium writes its DevTools port into the profile once it
        // listens.
        let port_file = profile.path().join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port: u16 = loop {
            if let Some(port) = std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|text| text.lines().next()?.trim().parse().ok())
            {
                break port;
            }
            assert!(Instant::now() < deadline, "chromium never opened DevTools");
            std::thread::sleep(Duration::from_millis(50));
        };
        let targets = http_get(port, "/json/list");
        let targets: Value = serde_json::from_str(&targets).unwrap();
        let page_url = targets
            .as_array()
            .unwrap()
            .iter()
            .find(|target| target["type"] == "page")
            .and_then(|target| target["webSocketDebuggerUrl"].as_str())
            .expect("a page target")
            .to_string();
        let path = page_url
            .split_once(&format!("127.0.0.1:{port}"))
            .map(|(_, path)| path.to_string())
            .expect("a local DevTools URL");
        Browser {
            child,
            _profile: profile,
            page: Page::connect(port, &path),
        }
    }

    pub(crate) fn page(&mut self) -> &mut Page {
        &mut self.page
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One GET to Chromium's DevTools HTTP server, which keeps the
/// connection open: the body is read by its `Content-Length`.
fn http_get(port: u16, path: &str) -> String {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        &stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut content_length = 0usize;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.trim().parse().unwrap();
            }
        }
    }
    let mut body = vec![0u8; content_length];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

impl Page {
    fn connect(port: u16, path: &str) -> Page {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 101 "), "no WebSocket upgrade: {status}");
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
        }
        assert!(reader.buffer().is_empty(), "data before the first frame");
        Page { stream, next_id: 1 }
    }

    fn send_text(&mut self, text: &str) {
        let payload = text.as_bytes();
        let mut frame = vec![0x81u8];
        match payload.len() {
            len if len < 126 => frame.push(0x80 | len as u8),
            len if len < 65536 => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(len as u16).to_be_bytes());
            }
            len => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        let mask = [0x5a, 0x13, 0xc7, 0x2e];
        frame.extend_from_slice(&mask);
        frame.extend(
            payload
                .iter()
                .enumerate()
                .map(|(i, byte)| byte ^ mask[i % 4]),
        );
        self.stream.write_all(&frame).unwrap();
    }

    fn read_message(&mut self) -> String {
        let mut message = Vec::new();
        loop {
            let mut head = [0u8; 2];
            self.stream.read_exact(&mut head).unwrap();
            let fin = head[0] & 0x80 != 0;
            let opcode = head[0] & 0x0f;
            let mut len = u64::from(head[1] & 0x7f);
            if len == 126 {
                let mut bytes = [0u8; 2];
                self.stream.read_exact(&mut bytes).unwrap();
                len = u64::from(u16::from_be_bytes(bytes));
            } else if len == 127 {
                let mut bytes = [0u8; 8];
                self.stream.read_exact(&mut bytes).unwrap();
                len = u64::from_be_bytes(bytes);
            }
            let mut payload = vec![0u8; len as usize];
            self.stream.read_exact(&mut payload).unwrap();
            match opcode {
                0x0 | 0x1 => {
                    message.extend_from_slice(&payload);
                    if fin {
                        return String::from_utf8(message).unwrap();
                    }
                }
                0x8 => panic!("chromium closed the DevTools connection"),
                _ => {} // ping, pong: nothing to do
            }
        }
    }

    /// Sends one command and returns its `result`, skipping events.
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        self.try_call(method, params)
            .unwrap_or_else(|message| panic!("{method}: {message}"))
    }

    /// Sends one command: its `result`, or the whole answer when it is an
    /// error.
    fn try_call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next_id;
        self.next_id += 1;
        self.send_text(&json!({"id": id, "method": method, "params": params}).to_string());
        loop {
            let message: Value = serde_json::from_str(&self.read_message()).unwrap();
            if message["id"] == id {
                if message.get("error").is_some() {
                    return Err(message);
                }
                return Ok(message["result"].clone());
            }
        }
    }

    pub(crate) fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
    }

    /// The value of a JavaScript expression in the page.
    pub(crate) fn evaluate(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        result["result"]["value"].clone()
    }

    /// Polls `expression` until it is `true`, then returns; panics with
    /// `what` and the page's text after 20 s.
    pub(crate) fn wait_for(&mut self, what: &str, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // A page still loading (after a reload) refuses to evaluate
            // ("Inspected target navigated or closed"): not yet, so poll on.
            let value = self.try_call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
            );
            if value.is_ok_and(|result| result["result"]["value"] == Value::Bool(true)) {
                return;
            }
            if Instant::now() > deadline {
                // What the expression last gave (an exception says why it
                // never held), then what the page shows.
                let last = self.try_call(
                    "Runtime.evaluate",
                    json!({"expression": expression, "returnByValue": true}),
                );
                let text = self.evaluate("document.body ? document.body.innerText : ''");
                panic!("the page never showed {what}; the check gave {last:?}; it shows:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the viewport.
    pub(crate) fn screenshot(&mut self, path: &Path) {
        let result = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let data = result["data"].as_str().expect("screenshot data");
        std::fs::write(path, decode_base64(data)).unwrap();
    }
}

fn decode_base64(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0;
    for byte in text.bytes().filter(|byte| *byte != b'=') {
        let value = ALPHABET.iter().position(|c| *c == byte).expect("base64") as u32;
        buffer = (buffer << 6) | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
        }
    }
    out
}
