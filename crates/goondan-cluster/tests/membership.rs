//! Hosts and shard leases against a real three-server cluster: one host
//! owns everything, a second splits the shards by rendezvous without two
//! owners at once, a host that stops renewing fences itself and loses its
//! shards, `leave` hands them over at once, and a person's request finds
//! the host that owns an instance (`owner::ask_owner`).

use async_nats::jetstream::kv::Operation;
use futures_util::StreamExt;
use goondan_cluster::membership::{self, Membership, MembershipTimings};
use goondan_cluster::testing::NatsCluster;
use goondan_cluster::{inbox, layout, Cluster};
use goondan_types::placement::{rendezvous_owner, SHARD_COUNT};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

async fn start() -> Option<(NatsCluster, Cluster)> {
    let nats = NatsCluster::start(3).await?;
    let cluster = nats.connect().await;
    layout::ensure(&cluster).await.unwrap();
    Some((nats, cluster))
}

async fn join(nats: &NatsCluster, host: &str) -> Arc<Membership> {
    Arc::new(
        Membership::join(nats.connect().await, host.to_string())
            .await
            .unwrap(),
    )
}

fn owned(host: &Membership) -> BTreeSet<u16> {
    host.owned().borrow().clone()
}

/// Waits until `done` holds, checking every 20 ms, and returns how long it
/// took; panics after `limit`.
async fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "not within {limit:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

/// The caller's side of a handover: every shard to drain is released (a
/// host would stop pulling, finish its Turns and ack first).
fn drain_when_asked(host: &Arc<Membership>) -> tokio::task::JoinHandle<()> {
    let host = Arc::clone(host);
    tokio::spawn(async move {
        let mut to_drain = host.to_drain();
        loop {
            let shards: Vec<u16> = to_drain.borrow_and_update().iter().copied().collect();
            for shard in shards {
                host.release(shard).await.unwrap();
            }
            if to_drain.changed().await.is_err() {
                return;
            }
        }
    })
}

/// What [`watch_leases`] saw.
#[derive(Debug, Default)]
struct LeaseHistory {
    /// Leases that passed from one host to another without being released
    /// or expiring in between: two owners at once, as the cluster saw it.
    double_owners: Vec<String>,
    /// Leases taken by a host after another's was released or expired.
    handovers: usize,
}

/// Follows every write to `gdn-shards` from now on.
async fn watch_leases(cluster: &Cluster) -> Arc<Mutex<LeaseHistory>> {
    let bucket = cluster
        .jetstream()
        .get_key_value(layout::SHARDS_BUCKET)
        .await
        .unwrap();
    let mut entries = bucket.watch_with_history(">").await.unwrap();
    let history = Arc::new(Mutex::new(LeaseHistory::default()));
    let seen = Arc::clone(&history);
    tokio::spawn(async move {
        // Per key: the current holder, and the one before a removal.
        let mut holders: HashMap<String, (Option<String>, Option<String>)> = HashMap::new();
        while let Some(Ok(entry)) = entries.next().await {
            let (holder, removed) = holders.entry(entry.key.clone()).or_default();
            match entry.operation {
                Operation::Put => {
                    let lease: membership::Lease = serde_json::from_slice(&entry.value).unwrap();
                    let mut seen = seen.lock().unwrap();
                    match (holder.as_ref(), removed.take()) {
                        (Some(before), _) if *before != lease.host => {
                            seen.double_owners.push(format!(
                                "{}: {before} -> {} at revision {}",
                                entry.key, lease.host, entry.revision
                            ));
                        }
                        (None, Some(before)) if before != lease.host => seen.handovers += 1,
                        _ => {}
                    }
                    *holder = Some(lease.host);
                }
                Operation::Delete | Operation::Purge => *removed = holder.take(),
            }
        }
    });
    history
}

fn rendezvous(hosts: &[&str]) -> Vec<BTreeSet<u16>> {
    hosts
        .iter()
        .map(|host| {
            (0..SHARD_COUNT)
                .filter(|shard| rendezvous_owner(*shard, hosts.iter().copied()) == Some(host))
                .collect()
        })
        .collect()
}

async fn assert_leases(cluster: &Cluster, hosts: &[&str]) {
    let status = membership::cluster_status(cluster).await.unwrap();
    let live: Vec<&str> = status.hosts.iter().map(|h| h.host.as_str()).collect();
    assert_eq!(live, hosts);
    for shard in &status.shards {
        let lease = shard.lease.as_ref().expect("every shard is leased");
        assert_eq!(
            Some(lease.host.as_str()),
            rendezvous_owner(shard.shard, hosts.iter().copied()),
            "shard {}",
            shard.shard
        );
        assert!(lease.epoch > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_host_owns_every_shard_and_a_second_splits_them_without_overlap() {
    let Some((nats, cluster)) = start().await else {
        return;
    };
    let host_a = join(&nats, "host-a").await;
    assert_eq!(owned(&host_a).len(), usize::from(SHARD_COUNT));
    assert!(host_a.is_fresh());
    assert_leases(&cluster, &["host-a"]).await;
    let epoch_before = host_a.epoch(5).await.unwrap();

    let leases = watch_leases(&cluster).await;
    let _drain_a = drain_when_asked(&host_a);
    let host_b = join(&nats, "host-b").await;
    let _drain_b = drain_when_asked(&host_b);
    let expected = rendezvous(&["host-a", "host-b"]);
    let started = Instant::now();
    let mut samples = 0;
    loop {
        let (a, b) = (owned(&host_a), owned(&host_b));
        assert!(a.is_disjoint(&b), "two owners: {:?}", a.intersection(&b));
        samples += 1;
        if a == expected[0] && b == expected[1] {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "no split in 5 s: a {} b {}",
            a.len(),
            b.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!("split after {:?} ({samples} samples)", started.elapsed());
    assert_leases(&cluster, &["host-a", "host-b"]).await;
    wait_until(
        Duration::from_secs(2),
        "the watch sees every handover",
        || leases.lock().unwrap().handovers >= expected[1].len(),
    )
    .await;
    {
        let history = leases.lock().unwrap();
        assert_eq!(history.double_owners, Vec::<String>::new());
        assert_eq!(history.handovers, expected[1].len());
    }
    // A shard that moved has a new, larger epoch; one that stayed keeps it.
    for shard in expected[1].iter().take(3) {
        assert!(host_b.epoch(*shard).await.unwrap() > epoch_before);
    }
    if expected[0].contains(&5) {
        assert_eq!(host_a.epoch(5).await, Some(epoch_before));
    }

    // Status also shows each shard's inbox backlog once it has a consumer.
    let address = goondan_cluster::subject::InstanceAddress::new("ws", "assistant", "k");
    let mut event = goondan_types::AgentEvent::new(
        "user_message",
        goondan_types::EventSource::new(goondan_types::EventSourceKind::Connector, "cli"),
    );
    event.input = Some("hi".to_string());
    let sent = inbox::Envelope {
        id: event.id.clone(),
        address: address.clone(),
        event,
        reply_to: None,
    };
    inbox::send(&cluster, &sent).await.unwrap();
    let mut shard_inbox = inbox::ShardInbox::open(&cluster, address.shard())
        .await
        .unwrap();
    let delivery = shard_inbox.next().await.unwrap().unwrap();
    let status = membership::cluster_status(&cluster).await.unwrap();
    let shard = &status.shards[usize::from(address.shard())];
    assert_eq!((shard.pending, shard.ack_pending), (Some(0), Some(1)));
    assert_eq!(
        status.shards[usize::from(address.shard() + 1) % 128].pending,
        None
    );
    delivery.ack().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_stops_renewing_fences_itself_and_loses_its_shards() {
    let Some((nats, cluster)) = start().await else {
        return;
    };
    let timings = MembershipTimings::default();
    let host_a = join(&nats, "host-a").await;
    let _drain_a = drain_when_asked(&host_a);
    let host_b = join(&nats, "host-b").await;
    let expected = rendezvous(&["host-a", "host-b"]);
    wait_until(Duration::from_secs(5), "the split", || {
        owned(&host_a) == expected[0] && owned(&host_b) == expected[1]
    })
    .await;

    // host-a is paused: no more heartbeats or renewals, nothing released.
    let leases = watch_leases(&cluster).await;
    let paused_at = Instant::now();
    host_a.stop_renewing();
    let fenced_after = wait_until(timings.ttl, "host-a fences itself", || !host_a.is_fresh()).await;
    assert!(fenced_after < timings.ttl - Duration::from_millis(900));
    let everything: BTreeSet<u16> = (0..SHARD_COUNT).collect();
    wait_until(
        timings.ttl + Duration::from_secs(2),
        "host-b takes host-a's shards",
        || owned(&host_b) == everything,
    )
    .await;
    let takeover = paused_at.elapsed();
    eprintln!(
        "stale host: not fresh after {fenced_after:?}, its shards taken after {takeover:?} (TTL {:?})",
        timings.ttl
    );
    assert!(
        takeover >= timings.ttl - Duration::from_secs(1),
        "{takeover:?}"
    );
    assert_leases(&cluster, &["host-b"]).await;
    // Every lease went through its expiry marker before host-b took it.
    wait_until(
        Duration::from_secs(2),
        "the watch sees every handover",
        || leases.lock().unwrap().handovers >= expected[0].len(),
    )
    .await;
    let history = leases.lock().unwrap();
    assert_eq!(history.double_owners, Vec::<String>::new());
    assert_eq!(history.handovers, expected[0].len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_hands_every_shard_over_at_once() {
    let Some((nats, cluster)) = start().await else {
        return;
    };
    // A host id that is no plain subject token (its heartbeat key is hashed).
    const B: &str = "node b.example.com";
    let host_a = join(&nats, "host-a").await;
    let drain_a = drain_when_asked(&host_a);
    let host_b = join(&nats, B).await;
    let expected = rendezvous(&["host-a", B]);
    wait_until(Duration::from_secs(5), "the split", || {
        owned(&host_a) == expected[0] && owned(&host_b) == expected[1]
    })
    .await;

    drain_a.abort();
    let _ = drain_a.await;
    let host_a = Arc::try_unwrap(host_a).expect("only the test holds host-a");
    let left_at = Instant::now();
    host_a.leave().await.unwrap();
    let everything: BTreeSet<u16> = (0..SHARD_COUNT).collect();
    let handover = wait_until(Duration::from_secs(2), "host-b takes everything", || {
        owned(&host_b) == everything
    })
    .await;
    eprintln!(
        "leave: handed over after {:?}",
        left_at.elapsed().max(handover)
    );
    assert_leases(&cluster, &[B]).await;
}

/// A person's request goes to the host whose lease covers the instance;
/// a host that answers it does not own the instance (any more) is asked
/// again, so the request ends at the owner; a lease is read without
/// joining.
#[tokio::test]
async fn a_request_to_an_owner_is_asked_again_when_the_host_says_it_is_not_the_owner() {
    use goondan_cluster::owner::{ask_owner, OwnerRequests};
    use goondan_cluster::subject::InstanceAddress;
    let Some((nats, cluster)) = start().await else {
        return;
    };
    let address = InstanceAddress::new("ws-1", "coder", "user:owner");
    assert_eq!(
        membership::shard_lease(&cluster, address.shard())
            .await
            .unwrap(),
        None
    );
    let host = join(&nats, "host-a").await;
    wait_until(Duration::from_secs(20), "host-a owns the shard", || {
        owned(&host).contains(&address.shard())
    })
    .await;
    let lease = membership::shard_lease(&cluster, address.shard())
        .await
        .unwrap()
        .expect("a lease");
    assert_eq!(lease.host, "host-a");

    // host-a's side: the first request is refused as not its own, the
    // next one answered with what it was asked.
    let mut requests = OwnerRequests::subscribe(&cluster, "ws-1", "host-a")
        .await
        .unwrap();
    let served = tokio::spawn(async move {
        let first = requests.next().await.expect("a first request");
        first.not_owner().await;
        let second = requests.next().await.expect("the request asked again");
        let mut answer = b"answered: ".to_vec();
        answer.extend_from_slice(second.payload());
        second.answer(answer).await;
    });
    let answer = ask_owner(
        &cluster,
        &address,
        b"ping".to_vec(),
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    assert_eq!(answer, b"answered: ping");
    served.await.unwrap();
}
