//! Acknowledged means durable (issue 35 #1 and #2): every post a webhook
//! Connection answered 200 is in its instance's durable inbox, so it is
//! answered exactly once after the orchestrator is stopped or killed with
//! SIGKILL and started again; a post answered 429 never runs; and a
//! platform's retry of a delivery the instance already holds runs no
//! second Turn, even across a restart.

use crate::connectors::{
    conversation_texts, hooks_with, post, post_signed_when_up, signed, start, wait_for_answer,
};
use crate::swarm::{sigkill, wait_until, Swarm};
use std::time::Duration;

/// Three signed posts to one instance whose queue holds two, while the
/// model takes `think` per answer: the first runs, the second waits, the
/// third is refused.
fn three_posts(swarm: &Swarm, port: u16) -> [u16; 3] {
    let warm = r#"{"text":"warm","instanceKey":"inbox"}"#;
    // The connector is up once it answers; `warm` is answered before the
    // three, so the instance's process is ready and idle.
    assert_eq!(post_signed_when_up(port, warm).0, 200);
    wait_for_answer(swarm, "alpha", "inbox", "warm");
    // Its answer leaves before its Turn is over (the fold follows): wait
    // until the orchestrator holds nothing for the instance.
    wait_until("alpha:inbox to be idle", || {
        swarm
            .instances()
            .iter()
            .any(|row| {
                row["agentName"] == "alpha"
                    && row["instanceKey"] == "inbox"
                    && row["process"] == "idle"
            })
            .then_some(())
    });
    ["one", "two", "three"].map(|text| {
        let body = format!(r#"{{"text":"{text}","instanceKey":"inbox"}}"#);
        post(port, &body, &signed(&body))
            .expect("the connector answers")
            .0
    })
}

/// How often `text` was stored as a user message and answered.
fn times(history: &[String], text: &str) -> (usize, usize) {
    let asked = history
        .iter()
        .filter(|content| **content == format!("\"{text}\""))
        .count();
    let answered = history
        .iter()
        .filter(|content| content.contains(&format!("got: {text}")))
        .count();
    (asked, answered)
}

/// After the restart, every accepted post is answered exactly once and
/// the refused one never ran.
fn each_accepted_post_answered_once(swarm: &Swarm) {
    wait_for_answer(swarm, "alpha", "inbox", "one");
    wait_for_answer(swarm, "alpha", "inbox", "two");
    let history = conversation_texts(swarm, "alpha", "inbox");
    assert_eq!(times(&history, "one"), (1, 1), "{history:?}");
    assert_eq!(times(&history, "two"), (1, 1), "{history:?}");
    assert_eq!(times(&history, "three"), (0, 0), "{history:?}");
}

#[test]
fn posts_that_got_200_are_answered_once_after_the_orchestrator_is_killed() {
    let (swarm, port) = hooks_with(2, Duration::from_millis(1500));
    let resident = start(&swarm);
    assert_eq!(three_posts(&swarm, port), [200, 200, 429]);
    // `one` is in its Turn, `two` waits in the orchestrator's queue.
    sigkill(resident.pid());
    drop(resident);
    let _again = start(&swarm);
    each_accepted_post_answered_once(&swarm);
}

#[test]
fn posts_that_got_200_are_answered_once_after_gdn_stop() {
    let (swarm, port) = hooks_with(2, Duration::from_millis(1500));
    let resident = start(&swarm);
    assert_eq!(three_posts(&swarm, port), [200, 200, 429]);
    // A graceful stop lets `one` finish; `two`, which no process took,
    // stays in the inbox for the next start.
    let stopped = swarm.run(&["stop"]);
    assert!(stopped.status.success(), "{stopped:?}");
    drop(resident);
    let _again = start(&swarm);
    each_accepted_post_answered_once(&swarm);
}

#[test]
fn a_delivery_retried_after_a_restart_runs_no_second_turn() {
    let (swarm, port) = hooks_with(8, Duration::ZERO);
    let resident = start(&swarm);
    let body = r#"{"text":"once","instanceKey":"retry","deliveryId":"d-42"}"#;
    assert_eq!(post_signed_when_up(port, body).0, 200);
    wait_for_answer(&swarm, "alpha", "retry", "once");
    // The connector's own memory of the delivery dies with it; the
    // instance's inbox remembers.
    sigkill(resident.pid());
    drop(resident);
    let _again = start(&swarm);
    assert_eq!(post_signed_when_up(port, body).0, 200);
    // A later input is answered after anything the retry would have
    // started, so its answer says the retry ran nothing.
    let after = r#"{"text":"after","instanceKey":"retry"}"#;
    assert_eq!(post_signed_when_up(port, after).0, 200);
    wait_for_answer(&swarm, "alpha", "retry", "after");
    let history = conversation_texts(&swarm, "alpha", "retry");
    assert_eq!(times(&history, "once"), (1, 1), "{history:?}");
}
