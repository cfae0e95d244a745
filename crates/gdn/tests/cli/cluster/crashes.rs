//! Crash counters move with an instance: an instance whose agent keeps
//! crashing mid-Turn on one host goes on counting (and backing off) on the
//! next, instead of starting over there.

use super::Cluster;
use crate::mock_llm::Reply;
use goondan_cluster::crashes::CrashRecords;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// Waits until the crash record of `alpha:KEY` counts `expected`.
fn wait_for_crashes(cluster: &Cluster, records: &CrashRecords, key: &str, expected: u32) {
    cluster._runtime.block_on(async {
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = records.get("alpha", key).consecutive_crashes;
            if seen == expected {
                return;
            }
            assert!(
                Instant::now() < until,
                "alpha:{key} counts {seen} crashes, not {expected}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[test]
fn an_instance_keeps_its_crash_count_when_it_moves_to_another_host() {
    // Every attempt hangs, so every Turn is cut short by a crash.
    let Some(mut cluster) = Cluster::start(|_| Reply::Hang) else {
        return;
    };
    cluster.add_host("host-a");
    // Read as any host reads them (the first host made the bucket).
    let workspace = goondan_store::paths::workspace_id("default");
    let records = cluster._runtime.block_on(async {
        let connection = cluster.nats.connect().await;
        CrashRecords::follow(&connection, &workspace).await.unwrap()
    });
    let (mut client, _state) = cluster.spawn_input("crash me", "crashy");
    cluster.swarm.mock.wait_for("the first attempt", |request| {
        request.last_user_text() == "crash me"
    });
    let agent = cluster.hosts[0].agents()[0];
    let _ = kill(Pid::from_raw(agent), Signal::SIGKILL);
    wait_for_crashes(&cluster, &records, "crashy", 1);

    // host-a goes away; host-b takes the instance and its Turn.
    cluster.add_host("host-b");
    let attempts = cluster.swarm.mock.requests().len();
    cluster.hosts[0].signal(Signal::SIGKILL);
    crate::swarm::wait_until("host-b to run the Turn again", || {
        (cluster.swarm.mock.requests().len() > attempts && !cluster.hosts[1].agents().is_empty())
            .then_some(())
    });
    let agent = cluster.hosts[1].agents()[0];
    let _ = kill(Pid::from_raw(agent), Signal::SIGKILL);
    // The crash on host-b counts on top of the one on host-a.
    wait_for_crashes(&cluster, &records, "crashy", 2);
    let _ = client.kill();
    let _ = client.wait();
}
