//! Issue 49, item 7: `gdn serve --no-start` beside a cluster host, on the
//! host's System Root, as `deploy/kubernetes/30-gdn.yaml` and the Helm
//! chart run it in the host's pod: it reaches the host through its control
//! socket, and a chat completion sent to it runs its Turn through the
//! cluster on whichever host owns the instance, this one or another.

use super::{assistant_count, owner_of, user_texts, Cluster};
use crate::serve::{http, TOKEN};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::Stdio;

#[test]
fn gdn_serve_beside_a_cluster_host_runs_turns_on_whichever_host_owns_the_instance() {
    let Some(mut cluster) = Cluster::start(super::answer) else {
        return;
    };
    let hosts = ["host-a", "host-b"];
    cluster.add_host(hosts[0]);
    cluster.add_host(hosts[1]);
    let host_a = &cluster.hosts[0];
    let log_path = host_a.state.path().join("serve.stderr");
    let mut serve = cluster
        .command(
            host_a.state.path(),
            &[
                "--json",
                "serve",
                "--no-start",
                "--addr",
                "127.0.0.1:0",
                "--token-env",
                "SERVE_TOKEN",
            ],
        )
        .env("SERVE_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let serving: Value = serde_json::from_str(&line).unwrap_or_else(|error| {
        panic!(
            "no `serving` line ({error}): {line:?}\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        )
    });
    let port: u16 = serving["address"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();

    // One instance this host owns and one the other host owns.
    let key_owned_by = |host: &str| {
        (0..)
            .map(|n| format!("side-{n}"))
            .find(|key| owner_of("alpha", key, hosts) == host)
            .unwrap()
    };
    for owner in hosts {
        let key = key_owned_by(owner);
        let text = format!("hello through {owner}");
        let body = json!({
            "model": "alpha",
            "messages": [{"role": "user", "content": text}],
        })
        .to_string();
        let authorization = format!("Bearer {TOKEN}");
        let (status, _head, answer) = http(
            port,
            "POST",
            "/v1/chat/completions",
            body.as_bytes(),
            &[
                ("Authorization", &authorization),
                ("X-Goondan-Instance", &key),
            ],
        )
        .expect("gdn serve answers");
        assert_eq!(
            status,
            200,
            "{answer}\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(
            answer["choices"][0]["message"]["content"],
            format!("answer to {text}"),
            "{answer}"
        );
        let conversation = cluster.exported(&key);
        assert_eq!(user_texts(&conversation), [text]);
        assert_eq!(assistant_count(&conversation), 1);
    }
    let _ = serve.kill();
    let _ = serve.wait();
}
