//! The bundle by digest against a real three-server cluster: stored once,
//! read back only when it hashes to its name, made active by exactly one
//! of two racing deployers, and followed by watchers.

use goondan_cluster::bundle::{self, ActiveBundle};
use goondan_cluster::layout;
use goondan_cluster::testing::NatsCluster;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_is_stored_by_digest_activated_once_and_followed() {
    let Some(nats) = NatsCluster::start(3).await else {
        return;
    };
    let cluster = nats.connect().await;
    layout::ensure(&cluster).await.unwrap();
    assert_eq!(bundle::active(&cluster).await.unwrap(), None);
    let mut followed = bundle::follow_active(&cluster).await.unwrap();

    let first = b"first archive".to_vec();
    let digest = bundle::upload(&cluster, &first).await.unwrap();
    assert_eq!(digest, bundle::digest_of(&first));
    assert!(digest.starts_with("sha256:") && digest.len() == 7 + 64);
    // Stored once: a second upload of the same bytes is the same object.
    assert_eq!(bundle::upload(&cluster, &first).await.unwrap(), digest);
    assert_eq!(bundle::download(&cluster, &digest).await.unwrap(), first);

    // Two deployers race to make the first bundle active: one wins.
    let record = |digest: &str, by: &str| {
        ActiveBundle::new(digest.to_string(), 13, "ws".into(), by.to_string())
    };
    let won = bundle::activate(&cluster, &record(&digest, "a"), None)
        .await
        .unwrap()
        .expect("the first create wins");
    assert!(won.revision > 0);
    let lost = bundle::activate(&cluster, &record(&digest, "b"), None)
        .await
        .unwrap();
    assert_eq!(lost, None, "a second create is refused, not overwritten");
    let active = bundle::active(&cluster).await.unwrap().unwrap();
    assert_eq!(active.deployed_by, "a");
    assert_eq!(active.revision, won.revision);

    // A rollout compares against the revision it read.
    let second = b"second archive".to_vec();
    let next = bundle::upload(&cluster, &second).await.unwrap();
    let stale = bundle::activate(&cluster, &record(&next, "c"), Some(won.revision + 7))
        .await
        .unwrap();
    assert_eq!(stale, None);
    let rolled = bundle::activate(&cluster, &record(&next, "c"), Some(won.revision))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rolled.digest, next);

    // Watchers see the latest record.
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(active) = followed.borrow_and_update().clone() {
                if active.digest == next {
                    return active;
                }
            }
            followed.changed().await.unwrap();
        }
    })
    .await
    .expect("the watcher sees the rollout");
    assert_eq!(seen.deployed_by, "c");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_that_does_not_hash_to_its_name_is_refused() {
    let Some(nats) = NatsCluster::start(3).await else {
        return;
    };
    let cluster = nats.connect().await;
    layout::ensure(&cluster).await.unwrap();
    let genuine = b"the real bundle".to_vec();
    let digest = bundle::digest_of(&genuine);
    // Someone with write access to the servers puts other bytes under
    // that name.
    let store = cluster
        .jetstream()
        .get_object_store(layout::BUNDLE_STORE)
        .await
        .unwrap();
    store
        .put(digest.as_str(), &mut &b"a substituted bundle"[..])
        .await
        .unwrap();
    let error = bundle::download(&cluster, &digest).await.unwrap_err();
    assert_eq!(error.code(), "E_CLUSTER_CORRUPT");
    assert!(error.to_string().contains("hashes to"), "{error}");

    // A digest with no archive is an error, not an empty bundle.
    let missing = bundle::digest_of(b"never uploaded");
    let started = std::time::Instant::now();
    let error = bundle::download(&cluster, &missing).await.unwrap_err();
    assert_eq!(error.code(), "E_CLUSTER_MISSING");
    assert!(started.elapsed() < Duration::from_secs(5), "not retried");

    // Too large is refused before anything is sent.
    let huge = vec![0u8; bundle::MAX_BUNDLE_BYTES + 1];
    let error = bundle::upload(&cluster, &huge).await.unwrap_err();
    assert_eq!(error.code(), "E_CLUSTER_TOO_LARGE");
}
