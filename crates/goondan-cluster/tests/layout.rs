//! The layout against a real three-server cluster: created once, found
//! again, refused when a stream was made with other settings.

use goondan_cluster::layout;
use goondan_cluster::testing::NatsCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_is_created_once_and_checked_after() {
    let Some(nats) = NatsCluster::start(3).await else {
        return;
    };
    let cluster = nats.connect().await;
    layout::ensure(&cluster).await.unwrap();
    // A second host finds everything in place.
    layout::ensure(&nats.connect().await).await.unwrap();
    let info = cluster
        .jetstream()
        .get_stream(layout::CONVERSATION_STREAM)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(info.config.num_replicas, 3);

    // A stream of the same name made by something else is refused, clearly.
    cluster
        .jetstream()
        .delete_stream(layout::OBSERVATION_STREAM)
        .await
        .unwrap();
    cluster
        .jetstream()
        .create_stream(async_nats::jetstream::stream::Config {
            name: layout::OBSERVATION_STREAM.to_string(),
            subjects: vec!["other.>".to_string()],
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .unwrap();
    let error = layout::ensure(&cluster).await.unwrap_err();
    assert_eq!(error.code(), "E_CLUSTER_LAYOUT");
    assert!(error.to_string().contains("GDN_OBS"), "{error}");
}
