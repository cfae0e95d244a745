//! Crash counters that move with an instance, on a real three-server
//! cluster: what one host writes, another reads without waiting, and a
//! host that joins later finds it at once.

use goondan_cluster::crashes::{CrashEntry, CrashRecords};
use goondan_cluster::layout;
use goondan_cluster::testing::NatsCluster;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_records_written_on_one_host_are_read_on_another() {
    let Some(nats) = NatsCluster::start(3).await else {
        return;
    };
    let cluster = nats.connect().await;
    layout::ensure(&cluster).await.unwrap();
    // No record anywhere yet: following starts at once.
    let host_a = CrashRecords::follow(&cluster, "ws-1").await.unwrap();
    let host_b = CrashRecords::follow(&nats.connect().await, "ws-1")
        .await
        .unwrap();
    assert_eq!(host_a.get("alpha", "k"), CrashEntry::default());

    let crashed = CrashEntry {
        consecutive_crashes: 3,
        backoff_until_ms: Some(1_900_000_000_000),
    };
    host_a.put("alpha", "k", crashed);
    assert_eq!(
        host_a.get("alpha", "k"),
        crashed,
        "the writer reads its own write"
    );
    let until = Instant::now() + Duration::from_secs(10);
    while host_b.get("alpha", "k") != crashed {
        assert!(Instant::now() < until, "host b never saw the record");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another workspace's instance of the same name is another record.
    let other = CrashRecords::follow(&cluster, "ws-2").await.unwrap();
    assert_eq!(other.get("alpha", "k"), CrashEntry::default());

    // A host that joins later has it before its first look.
    let late = CrashRecords::follow(&nats.connect().await, "ws-1")
        .await
        .unwrap();
    assert_eq!(late.get("alpha", "k"), crashed);

    // Running well again removes it everywhere.
    host_b.put("alpha", "k", CrashEntry::default());
    let until = Instant::now() + Duration::from_secs(10);
    while host_a.get("alpha", "k") != CrashEntry::default() {
        assert!(Instant::now() < until, "host a never saw the removal");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
