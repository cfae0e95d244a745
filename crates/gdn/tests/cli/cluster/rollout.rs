//! The bundle a cluster runs, distributed by digest: the first host's
//! bundle becomes the cluster's, a host started with another bundle runs
//! the cluster's, `gdn cluster deploy` rolls a new one out to every host
//! (the conversations carry on), and a bundle a host cannot run is
//! refused there, reported to the deployer, and changes nothing.

use super::{code, finish, run_with_deadline, stderr, stdout, user_texts, Cluster};
use crate::mock_llm::{ChatRequest, Reply};
use serde_json::Value;
use std::path::Path;
use std::process::Output;
use tempfile::TempDir;

/// `[<system prompt>] answer to <last user text>`: which bundle answered
/// shows in the answer.
fn answer_with_prompt(request: &ChatRequest) -> Reply {
    let system = request
        .messages()
        .iter()
        .find(|message| message["role"] == "system")
        .and_then(|message| message["content"].as_str())
        .unwrap_or_default()
        .to_string();
    Reply::text(format!("[{system}] answer to {}", request.last_user_text()))
}

/// A copy of the cluster's bundle with `from` replaced by `to`.
fn variant(cluster: &Cluster, from: &str, to: &str) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let yaml = std::fs::read_to_string(cluster.swarm.bundle.path().join("goondan.yaml")).unwrap();
    assert!(yaml.contains(from), "{from:?} is not in the bundle");
    std::fs::write(dir.path().join("goondan.yaml"), yaml.replace(from, to)).unwrap();
    dir
}

/// One input through the cluster; its answer.
fn ask(cluster: &Cluster, text: &str, key: &str) -> String {
    let (child, _client) = cluster.spawn_input(text, key);
    let output = finish(child, "gdn run --cluster --input");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    stdout(&output)
}

/// `gdn cluster deploy` of the bundle at `bundle`.
fn deploy(cluster: &Cluster, bundle: &Path) -> Output {
    let client = tempfile::tempdir().unwrap();
    run_with_deadline(cluster.command_in(
        bundle,
        client.path(),
        &["cluster", "deploy", "--wait", "30"],
    ))
}

fn hosts(status: &Value) -> Vec<Value> {
    status["hosts"].as_array().cloned().unwrap_or_default()
}

const KEYS: [&str; 4] = ["r-1", "r-2", "r-3", "r-4"];

#[test]
fn a_deploy_rolls_a_bundle_out_to_every_host_and_a_bad_one_changes_nothing() {
    let Some(mut cluster) = Cluster::start(answer_with_prompt) else {
        return;
    };
    // The first host's bundle becomes the cluster's.
    cluster.add_host("host-a");
    // A host started in a folder with another bundle runs the cluster's,
    // and says so.
    let local = variant(
        &cluster,
        "You are agent ALPHA.",
        "You are agent ALPHA, local edition.",
    );
    cluster.add_host_from("host-b", local.path());
    let status = cluster.wait_for_status("both hosts announcing a bundle", |status| {
        hosts(status).len() == 2 && hosts(status).iter().all(|host| host["bundle"].is_string())
    });
    let active = status["activeBundle"]["digest"].clone();
    assert!(active.as_str().unwrap().starts_with("sha256:"), "{status}");
    for host in hosts(&status) {
        assert_eq!(host["bundle"], active, "{status}");
    }
    let log = cluster.hosts[1].log();
    assert!(log.contains("differs and is not run here"), "{log}");
    for key in KEYS {
        let answer = ask(&cluster, &format!("hello {key}"), key);
        assert!(answer.contains("[You are agent ALPHA."), "{answer}");
        assert!(!answer.contains("local edition"), "{answer}");
    }

    // A new bundle for every host; conversations carry on.
    let v2 = variant(&cluster, "You are agent ALPHA.", "You are agent ALPHA v2.");
    let output = deploy(&cluster, v2.path());
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let printed = stdout(&output);
    assert!(printed.contains("deployed bundle sha256:"), "{printed}");
    assert!(printed.contains("host-a: runs it"), "{printed}");
    assert!(printed.contains("host-b: runs it"), "{printed}");
    for key in KEYS {
        let answer = ask(&cluster, &format!("again {key}"), key);
        assert!(answer.contains("[You are agent ALPHA v2."), "{answer}");
        let conversation = cluster.exported(key);
        assert_eq!(
            user_texts(&conversation),
            [format!("hello {key}"), format!("again {key}")]
        );
    }
    let v2_digest = cluster.status()["activeBundle"]["digest"].clone();
    // Deploying it again is a no-op.
    let output = deploy(&cluster, v2.path());
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(
        stdout(&output).contains("is already active"),
        "{}",
        stdout(&output)
    );

    // Another swarm is refused before it reaches any host.
    let other = variant(&cluster, "  name: default\n", "  name: other\n");
    let output = deploy(&cluster, other.path());
    assert_ne!(code(&output), 0);
    assert!(
        stderr(&output).contains("E_CLUSTER_WORKSPACE"),
        "{}",
        stderr(&output)
    );
    assert_eq!(cluster.status()["activeBundle"]["digest"], v2_digest);

    // A bundle the hosts cannot run (their Swarm/default is gone): each
    // refuses it, the deployer hears why, and the swarm runs on as it was.
    let renamed = variant(
        &cluster,
        "  name: default\nspec:\n",
        "  name: main\nspec:\n  instanceKey: default\n",
    );
    let output = deploy(&cluster, renamed.path());
    assert_ne!(code(&output), 0, "{}", stdout(&output));
    let printed = stdout(&output);
    assert!(printed.contains("host-a: refused it"), "{printed}");
    assert!(printed.contains("E_CONFIG_REF_NOT_FOUND"), "{printed}");
    assert!(
        stderr(&output).contains("E_CLUSTER_BUNDLE"),
        "{}",
        stderr(&output)
    );
    let status = cluster.status();
    for host in hosts(&status) {
        assert_eq!(host["bundle"], v2_digest, "{status}");
        assert_eq!(
            host["bundleRefused"]["digest"], status["activeBundle"]["digest"],
            "{status}"
        );
    }
    let answer = ask(&cluster, "still there?", KEYS[0]);
    assert!(answer.contains("[You are agent ALPHA v2."), "{answer}");

    // Deploying the running bundle again clears the refusals.
    let output = deploy(&cluster, v2.path());
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    cluster.wait_for_status("no refusal left", |status| {
        hosts(status)
            .iter()
            .all(|host| host["bundleRefused"].is_null() && host["bundle"] == v2_digest)
    });
    // `gdn cluster status` in text names the bundle of each host.
    let client = tempfile::tempdir().unwrap();
    let output = run_with_deadline(cluster.command(client.path(), &["cluster", "status"]));
    let text = stdout(&output);
    // `sha256:` and the first 12 hex digits.
    let short = &v2_digest.as_str().unwrap()[7..19];
    assert!(text.contains(&format!("bundle={short}")), "{text}");
}
