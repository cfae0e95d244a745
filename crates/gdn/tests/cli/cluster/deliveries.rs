//! Push connectors run on every host behind a load balancer, so a
//! platform's retry of a delivery may reach another host than the first
//! attempt. The delivery's id names the event, the event goes through its
//! instance's inbox, and the inbox stores it once: one Turn, whichever
//! hosts the attempts reached.

use super::{user_texts, Cluster};
use crate::connectors::{free_port, post_signed_when_up, SECRET};
use crate::mock_llm::{MockLlm, Reply};
use crate::swarm::{fixture, Swarm};

#[test]
fn a_retried_delivery_that_reaches_another_host_is_one_turn() {
    let Some(mut cluster) = Cluster::with_swarm(|| {
        let mock =
            MockLlm::start(|request| Reply::text(format!("got: {}", request.last_user_text())));
        let bundle = fixture(
            "hooks",
            &[("@ENDPOINT@", mock.endpoint()), ("@QUEUE@", "64".into())],
        );
        // Each host listens on its own port (one machine here, one port
        // per machine behind a load balancer in production).
        let yaml = bundle.path().join("goondan.yaml");
        let text = std::fs::read_to_string(&yaml).unwrap();
        let per_host = text.replace(
            "      value: \"@PORT@\"",
            "      valueFrom:\n        env: HOOK_PORT",
        );
        assert_ne!(per_host, text);
        std::fs::write(&yaml, per_host).unwrap();
        Swarm {
            bundle,
            state: tempfile::tempdir().unwrap(),
            mock,
        }
    }) else {
        return;
    };
    let ports = [free_port(), free_port()];
    let bundle = cluster.swarm.bundle.path().to_path_buf();
    for (id, port) in ["host-a", "host-b"].into_iter().zip(ports) {
        let env = [
            ("HOOK_PORT", port.to_string()),
            ("HOOK_SECRET", SECRET.to_string()),
        ];
        cluster.add_host_with(id, &bundle, &env);
    }

    // The platform delivers to one host, and retries at the other (its
    // first attempt timed out on the way back, say).
    let delivery = r#"{"text":"deliver once","instanceKey":"once","deliveryId":"d-42"}"#;
    for port in ports {
        let (status, body) = post_signed_when_up(port, delivery);
        assert_eq!(status, 200, "{body}");
    }
    // A new delivery after it: once its Turn ran, a duplicate queued
    // before it would have run too.
    let next = r#"{"text":"another delivery","instanceKey":"once","deliveryId":"d-43"}"#;
    let (status, body) = post_signed_when_up(ports[1], next);
    assert_eq!(status, 200, "{body}");
    cluster
        .swarm
        .mock
        .wait_for("the second delivery's Turn", |request| {
            request.last_user_text() == "another delivery"
        });
    let turns = cluster
        .swarm
        .mock
        .requests()
        .iter()
        .filter(|request| request.last_user_text() == "deliver once")
        .count();
    assert_eq!(turns, 1, "the retried delivery ran once");
    assert_eq!(
        user_texts(&cluster.exported("once")),
        ["deliver once", "another delivery"]
    );
}
