//! The streams, key-value buckets and object stores a cluster uses, and
//! [`ensure`], which creates what is missing and refuses what does not fit.
//!
//! | name | kind | holds |
//! |---|---|---|
//! | `GDN_IN` | work-queue stream, `gdn.in.<shard>.<ws>.<agent>.<key>` | every instance's inbox |
//! | `GDN_CONV` | limits stream, `gdn.conv.<ws>.<agent>.<key>.<record>` | the conversation logs |
//! | `GDN_OBS` | limits stream (7 days), `gdn.obs.<ws>.<agent>.<key>` | runtime events |
//! | `gdn-hosts`, `gdn-shards` | KV with per-message TTL | liveness and shard leases |
//! | `gdn-instances` | KV | instance metadata that moves with the instance |
//! | `gdn-config` | KV | `active`: the bundle the swarm runs (see [`crate::bundle`]) |
//! | `gdn-bundle`, `gdn-snap`, `gdn-blob` | object stores | bundle archives by digest, snapshots, payloads over 256 KiB |

use crate::connect::Cluster;
use crate::error::{request_error, ClusterError};
use async_nats::jetstream::{kv, object_store, stream};
use std::time::Duration;

/// The inbox stream.
pub const INBOX_STREAM: &str = "GDN_IN";
/// The conversation-log stream.
pub const CONVERSATION_STREAM: &str = "GDN_CONV";
/// The runtime-event stream.
pub const OBSERVATION_STREAM: &str = "GDN_OBS";
/// Host heartbeats.
pub const HOSTS_BUCKET: &str = "gdn-hosts";
/// Shard leases.
pub const SHARDS_BUCKET: &str = "gdn-shards";
/// Instance metadata.
pub const INSTANCES_BUCKET: &str = "gdn-instances";
/// The active bundle's record.
pub const CONFIG_BUCKET: &str = "gdn-config";
/// Bundle archives by digest.
pub const BUNDLE_STORE: &str = "gdn-bundle";
/// Conversation snapshots.
pub const SNAPSHOT_STORE: &str = "gdn-snap";
/// Payloads too large for one message.
pub const BLOB_STORE: &str = "gdn-blob";

/// How long the inbox remembers a `Nats-Msg-Id` to drop a duplicate send.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// The largest message this crate publishes; bigger content goes to the
/// blob store (the server's default `max_payload` is 1 MiB).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// How long runtime events are kept.
pub const OBSERVATION_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Creates every stream, bucket and object store that does not exist yet,
/// with `cluster.options().replicas` replicas, and checks that the ones
/// that do exist are shaped as this version needs.
pub async fn ensure(cluster: &Cluster) -> Result<(), ClusterError> {
    let replicas = cluster.options().replicas;
    let retained = stream::RetentionPolicy::Limits;
    ensure_stream(
        cluster,
        stream_config(
            INBOX_STREAM,
            "gdn.in.>",
            stream::RetentionPolicy::WorkQueue,
            replicas,
        ),
    )
    .await?;
    ensure_stream(
        cluster,
        stream_config(CONVERSATION_STREAM, "gdn.conv.>", retained, replicas),
    )
    .await?;
    ensure_stream(
        cluster,
        stream::Config {
            max_age: OBSERVATION_MAX_AGE,
            ..stream_config(OBSERVATION_STREAM, "gdn.obs.>", retained, replicas)
        },
    )
    .await?;
    for (bucket, ttl_markers) in [
        (HOSTS_BUCKET, true),
        (SHARDS_BUCKET, true),
        (INSTANCES_BUCKET, false),
    ] {
        ensure_bucket(
            cluster,
            kv::Config {
                bucket: bucket.to_string(),
                history: 1,
                num_replicas: replicas,
                storage: stream::StorageType::File,
                // Leases carry a per-message TTL; when one runs out the
                // server leaves a delete marker that watchers see.
                limit_markers: ttl_markers.then_some(Duration::from_secs(1)),
                ..Default::default()
            },
        )
        .await?;
    }
    ensure_bucket(
        cluster,
        kv::Config {
            bucket: CONFIG_BUCKET.to_string(),
            // The last few rollouts, for `kv history` when something went
            // wrong.
            history: 16,
            num_replicas: replicas,
            storage: stream::StorageType::File,
            ..Default::default()
        },
    )
    .await?;
    // The blob store stays last: `require` looks for it.
    for store in [BUNDLE_STORE, SNAPSHOT_STORE, BLOB_STORE] {
        ensure_object_store(
            cluster,
            object_store::Config {
                bucket: store.to_string(),
                num_replicas: replicas,
                storage: stream::StorageType::File,
                ..Default::default()
            },
        )
        .await?;
    }
    Ok(())
}

/// Fails with [`ClusterError::NotStarted`] when no host has made the
/// layout yet, for commands that only use it (`--input`, status, export).
pub async fn require(cluster: &Cluster) -> Result<(), ClusterError> {
    // The blob store is the last thing `ensure` creates: with it, all is
    // there.
    let last = format!("OBJ_{BLOB_STORE}");
    match cluster.jetstream().get_stream(&last).await {
        Ok(_) => Ok(()),
        Err(error) if is_stream_not_found(&error) => Err(ClusterError::NotStarted {
            missing: format!("object store {BLOB_STORE}"),
        }),
        Err(error) => Err(layout_error(&last, error)),
    }
}

/// A stream of this layout: file storage, direct gets, the duplicate
/// window, messages of at most 1 MiB (the servers' default payload).
fn stream_config(
    name: &str,
    subjects: &str,
    retention: stream::RetentionPolicy,
    replicas: usize,
) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        subjects: vec![subjects.to_string()],
        retention,
        allow_direct: true,
        duplicate_window: DUPLICATE_WINDOW,
        num_replicas: replicas,
        storage: stream::StorageType::File,
        max_message_size: 1024 * 1024,
        ..Default::default()
    }
}

fn layout_error(what: &str, reason: impl std::fmt::Display) -> ClusterError {
    ClusterError::Layout {
        what: what.to_string(),
        reason: reason.to_string(),
    }
}

/// Whether the servers refused to create a stream for a reason no retry
/// changes (more replicas than a single server has, JetStream off, a
/// configuration they reject). A timeout, or a refusal while servers elect
/// a leader, is worth retrying; these are not, and are reported at once
/// as [`ClusterError::Layout`].
fn refused_for_good(error: &async_nats::jetstream::context::CreateStreamError) -> bool {
    use async_nats::jetstream::context::CreateStreamErrorKind;
    use async_nats::jetstream::ErrorCode;
    const PERMANENT: [ErrorCode; 6] = [
        ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED,
        ErrorCode::STREAM_SUBJECT_OVERLAP,
        ErrorCode::STREAM_INVALID_CONFIG,
        ErrorCode::STREAM_MAX_BYTES_REQUIRED,
        ErrorCode::JETSTREAM_NOT_ENABLED,
        ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT,
    ];
    matches!(error.kind(), CreateStreamErrorKind::JetStream(e) if PERMANENT.contains(&e.error_code()))
}

async fn ensure_stream(cluster: &Cluster, wanted: stream::Config) -> Result<(), ClusterError> {
    let jetstream = cluster.jetstream();
    match jetstream.get_stream(&wanted.name).await {
        Ok(mut existing) => {
            let info = existing
                .info()
                .await
                .map_err(|e| request_error(&wanted.name, e))?;
            let have = &info.config;
            if have.retention != wanted.retention || have.subjects != wanted.subjects {
                return Err(layout_error(
                    &wanted.name,
                    format!(
                        "exists with retention {:?} and subjects {:?}, this version needs {:?} and {:?}",
                        have.retention, have.subjects, wanted.retention, wanted.subjects
                    ),
                ));
            }
            Ok(())
        }
        Err(error) if is_stream_not_found(&error) => {
            let name = wanted.name.clone();
            match jetstream.create_stream(wanted).await {
                Ok(_) => Ok(()),
                Err(error) if refused_for_good(&error) => Err(layout_error(&name, error)),
                Err(error) => Err(request_error(&name, error)),
            }
        }
        Err(error) => Err(request_error(&wanted.name, error)),
    }
}

async fn ensure_bucket(cluster: &Cluster, wanted: kv::Config) -> Result<(), ClusterError> {
    let jetstream = cluster.jetstream();
    if jetstream.get_key_value(&wanted.bucket).await.is_ok() {
        return Ok(());
    }
    let bucket = wanted.bucket.clone();
    match jetstream.create_key_value(wanted).await {
        Ok(_) => Ok(()),
        // A server older than 2.11 has no per-message TTL: no retry helps.
        Err(error)
            if matches!(
                error.kind(),
                async_nats::jetstream::context::CreateKeyValueErrorKind::LimitMarkersNotSupported
            ) =>
        {
            Err(layout_error(&bucket, error))
        }
        Err(error) => Err(request_error(&bucket, error)),
    }
}

async fn ensure_object_store(
    cluster: &Cluster,
    wanted: object_store::Config,
) -> Result<(), ClusterError> {
    let jetstream = cluster.jetstream();
    if jetstream.get_object_store(&wanted.bucket).await.is_ok() {
        return Ok(());
    }
    let bucket = wanted.bucket.clone();
    jetstream
        .create_object_store(wanted)
        .await
        .map(drop)
        .map_err(|e| request_error(&bucket, e))
}

/// Hands each entry of a watch's history to `apply`, up to the current
/// one (delta 0), within the request timeout: what a watcher must know
/// before it acts (the live hosts, the crash records). `what` names it in
/// the timeout error. Call it only when the history is not empty: a watch
/// of keys never written says nothing.
pub(crate) async fn catch_up(
    cluster: &Cluster,
    entries: &mut kv::Watch,
    bucket: &str,
    what: &str,
    mut apply: impl FnMut(kv::Entry),
) -> Result<(), ClusterError> {
    let after = cluster.options().request_timeout;
    let caught_up = tokio::time::timeout(after, async {
        while let Some(entry) = futures_util::StreamExt::next(entries).await {
            let entry =
                entry.map_err(|e| crate::error::request_error(&format!("watch {bucket}"), e))?;
            let current = entry.delta == 0;
            apply(entry);
            if current {
                return Ok(());
            }
        }
        Err(crate::error::request_error(
            &format!("watch {bucket}"),
            "ended",
        ))
    });
    match caught_up.await {
        Ok(result) => result,
        Err(_) => Err(ClusterError::Timeout {
            what: what.to_string(),
            after,
        }),
    }
}

pub(crate) fn is_stream_not_found(error: &async_nats::jetstream::context::GetStreamError) -> bool {
    use async_nats::jetstream::context::GetStreamErrorKind;
    use async_nats::jetstream::ErrorCode;
    matches!(error.kind(), GetStreamErrorKind::JetStream(e) if e.error_code() == ErrorCode::STREAM_NOT_FOUND)
}
