//! The registry server under attack, over real HTTP on 127.0.0.1: every
//! write needs a token, hostile tarballs (paths out of `package/`,
//! symlinks, hardlinks), wrong integrity, oversized bodies, reserved and
//! malformed names, a restricted package without a token, and a client
//! that never finishes its request head. After each refusal nothing is
//! stored.

use base64::Engine;
use goondan_package::metadata::PublishBody;
use goondan_package::registry::server::{self, RegistryConfig};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "registry-test-token-0123456789";

struct Running {
    url: String,
    dir: PathBuf,
    _home: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn start(tokens: &[&str], max_body_bytes: u64) -> Running {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("store");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let config = RegistryConfig {
        dir: dir.clone(),
        tokens: tokens.iter().map(|t| t.to_string()).collect(),
        public_url: url::Url::parse(&url).unwrap(),
        max_body_bytes,
        body_timeout: Duration::from_secs(5),
        limits: goondan_http::AcceptLimits::new(16, Duration::from_millis(500)),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve(listener, config, async {
        let _ = stopped.await;
    }));
    Running {
        url,
        dir,
        _home: home,
        _stop: stop,
    }
}

fn manifest(name: &str, version: &str) -> String {
    format!(
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: \"{name}\"\nspec:\n  version: \"{version}\"\n"
    )
}

/// A clean package tarball.
fn good_tarball(name: &str, version: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("goondan.yaml"), manifest(name, version)).unwrap();
    goondan_package::tarball::pack(dir.path()).unwrap()
}

/// A tarball holding a valid manifest plus one raw entry, written past
/// the tar crate's own checks.
fn hostile_tarball(path: &str, entry_type: tar::EntryType, link: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut append = |path: &str, entry_type: tar::EntryType, link: &str, data: &[u8]| {
        let mut header = tar::Header::new_old();
        header.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
        header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        header.set_entry_type(entry_type);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    };
    let text = manifest("@acme/evil", "1.0.0");
    append(
        "package/goondan.yaml",
        tar::EntryType::Regular,
        "",
        text.as_bytes(),
    );
    let data: &[u8] = if entry_type == tar::EntryType::Regular {
        b"pwned"
    } else {
        b""
    };
    append(path, entry_type, link, data);
    out.extend_from_slice(&[0u8; 1024]);
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&out).unwrap();
    encoder.finish().unwrap()
}

fn body(name: &str, version: &str, tarball: &[u8], integrity: Option<&str>) -> PublishBody {
    serde_json::from_value(serde_json::json!({
        "name": name,
        "version": version,
        "dist": {
            "integrity": integrity.map(str::to_string)
                .unwrap_or_else(|| goondan_package::integrity::integrity_of(tarball)),
        },
        "_attachments": {
            "x.tgz": {
                "data": base64::engine::general_purpose::STANDARD.encode(tarball),
                "length": tarball.len(),
            }
        }
    }))
    .unwrap()
}

async fn put(
    registry: &Running,
    path: &str,
    token: Option<&str>,
    body: &PublishBody,
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .put(format!("{}{path}", registry.url))
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

fn stored(dir: &Path) -> bool {
    dir.join("@acme").exists()
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_need_a_valid_token_and_a_read_only_registry_takes_none() {
    let registry = start(&[TOKEN], 1 << 20).await;
    let tarball = good_tarball("@acme/tools", "1.0.0");
    let upload = body("@acme/tools", "1.0.0", &tarball, None);
    for token in [None, Some("wrong-token-0123456789"), Some("")] {
        let (status, answer) = put(&registry, "/@acme/tools", token, &upload).await;
        assert_eq!(status, 401, "{token:?}");
        assert_eq!(answer["code"], "E_PKG_AUTH_REQUIRED");
    }
    assert!(!stored(&registry.dir));
    let client = reqwest::Client::new();
    for (method, path) in [
        (reqwest::Method::DELETE, "/@acme/tools"),
        (reqwest::Method::DELETE, "/@acme/tools/1.0.0"),
    ] {
        let status = client
            .request(method, format!("{}{path}", registry.url))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 401, "{path}");
    }
    let (status, _) = put(&registry, "/@acme/tools", Some(TOKEN), &upload).await;
    assert_eq!(status, 201);
    let deprecate = client
        .put(format!("{}/@acme/tools/1.0.0/deprecate", registry.url))
        .json(&serde_json::json!({"message": "no"}))
        .send()
        .await
        .unwrap();
    assert_eq!(deprecate.status(), 401);

    let read_only = start(&[], 1 << 20).await;
    let (status, answer) = put(&read_only, "/@acme/tools", Some(TOKEN), &upload).await;
    assert_eq!(status, 401);
    assert!(answer["message"].as_str().unwrap().contains("read-only"));
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_tarballs_are_refused_and_nothing_is_written() {
    let registry = start(&[TOKEN], 1 << 20).await;
    let outside = registry.dir.parent().unwrap().join("pwned");
    let cases = [
        ("package/../../pwned", tar::EntryType::Regular, ""),
        ("/tmp/pwned-absolute", tar::EntryType::Regular, ""),
        ("elsewhere/pwned", tar::EntryType::Regular, ""),
        ("package/link", tar::EntryType::Symlink, "../../pwned"),
        ("package/hard", tar::EntryType::Link, "/etc/passwd"),
        ("package/dev", tar::EntryType::Char, ""),
    ];
    for (path, entry_type, link) in cases {
        let tarball = hostile_tarball(path, entry_type, link);
        let upload = body("@acme/evil", "1.0.0", &tarball, None);
        let (status, answer) = put(&registry, "/@acme/evil", Some(TOKEN), &upload).await;
        assert_eq!(status, 400, "{path}: {answer}");
        assert_eq!(answer["code"], "E_PKG_PATH_TRAVERSAL", "{path}: {answer}");
        assert!(!stored(&registry.dir), "{path}");
        assert!(!outside.exists(), "{path}");
    }
    assert!(!Path::new("/tmp/pwned-absolute").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_integrity_names_and_sizes_are_refused() {
    let registry = start(&[TOKEN], 64 * 1024).await;
    let tarball = good_tarball("@acme/tools", "1.0.0");
    let other = goondan_package::integrity::integrity_of(b"something else");
    let (status, answer) = put(
        &registry,
        "/@acme/tools",
        Some(TOKEN),
        &body("@acme/tools", "1.0.0", &tarball, Some(&other)),
    )
    .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("E_PKG_INTEGRITY_FAIL"))
    );

    // The manifest inside must name the same package and version.
    let (status, answer) = put(
        &registry,
        "/@acme/other",
        Some(TOKEN),
        &body("@acme/other", "1.0.0", &tarball, None),
    )
    .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("E_PKG_SCHEMA_INVALID"))
    );

    let base = good_tarball("@goondan/base", "9.0.0");
    let (status, answer) = put(
        &registry,
        "/@goondan/base",
        Some(TOKEN),
        &body("@goondan/base", "9.0.0", &base, None),
    )
    .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (400, Some("E_PKG_NAME_INVALID"))
    );

    for path in [
        "/..%2F..%2Fetc",
        "/@ACME/tools",
        "/@acme/../x",
        "/@acme%2f..%2f..",
    ] {
        let status = reqwest::Client::new()
            .put(format!("{}{path}", registry.url))
            .bearer_auth(TOKEN)
            .json(&body("@acme/tools", "1.0.0", &tarball, None))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        assert!(status == 400 || status == 404, "{path}: {status}");
    }

    // Random bytes well over the 64 KiB limit.
    let big: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let (status, answer) = put(
        &registry,
        "/@acme/tools",
        Some(TOKEN),
        &body("@acme/tools", "1.0.0", &big, None),
    )
    .await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (413, Some("E_PKG_TOO_LARGE"))
    );
    assert!(!stored(&registry.dir));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restricted_package_is_invisible_without_a_token() {
    let registry = start(&[TOKEN], 1 << 20).await;
    let tarball = good_tarball("@acme/secret", "1.0.0");
    let mut upload = body("@acme/secret", "1.0.0", &tarball, None);
    upload.access = "restricted".into();
    let (status, _) = put(&registry, "/@acme/secret", Some(TOKEN), &upload).await;
    assert_eq!(status, 201);
    let client = reqwest::Client::new();
    let tarball_path = format!("{}/@acme/secret/-/secret-1.0.0.tgz", registry.url);
    for path in [
        format!("{}/@acme/secret", registry.url),
        tarball_path.clone(),
    ] {
        assert_eq!(
            client.get(&path).send().await.unwrap().status(),
            404,
            "{path}"
        );
        assert_eq!(
            client
                .get(&path)
                .bearer_auth(TOKEN)
                .send()
                .await
                .unwrap()
                .status(),
            200,
            "{path}"
        );
    }
    let bytes = client
        .get(&tarball_path)
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(bytes.as_ref(), tarball.as_slice());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_never_finishes_its_request_head_is_cut_off() {
    let registry = start(&[TOKEN], 1 << 20).await;
    let address = registry.url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /@acme/tools HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 256];
    // The header timeout is 0.5 s; the server must close well before 5 s.
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
        .await
        .expect("the server kept a silent connection open");
    // A reset (an error) is a closed connection too.
    if let Ok(n) = read {
        let answer = String::from_utf8_lossy(&buffer[..n]);
        assert!(n == 0 || answer.starts_with("HTTP/1.1 408"), "{answer}");
    }
}
