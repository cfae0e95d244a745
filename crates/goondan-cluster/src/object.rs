//! The object stores' three operations as this crate uses them (snapshots,
//! large bodies, bundles): put, read (retried while the servers are busy;
//! a missing object is [`ClusterError::Missing`] at once), and delete
//! (best effort: what is left behind is unreferenced).

use crate::error::{request_error, ClusterError};
use crate::retry::retrying;
use crate::Cluster;
use async_nats::jetstream::object_store::{GetErrorKind, ObjectMetadata};
use std::collections::HashMap;
use tokio::io::AsyncReadExt;

/// Stores `bytes` as the object `name` of `store`.
pub(crate) async fn put(
    cluster: &Cluster,
    store: &str,
    name: &str,
    metadata: HashMap<String, String>,
    bytes: &[u8],
) -> Result<(), ClusterError> {
    let objects = cluster
        .jetstream()
        .get_object_store(store)
        .await
        .map_err(|e| request_error(store, e))?;
    let meta = ObjectMetadata {
        name: name.to_string(),
        metadata,
        ..Default::default()
    };
    objects
        .put(meta, &mut &bytes[..])
        .await
        .map_err(|e| request_error(&format!("{store}/{name}"), e))?;
    Ok(())
}

/// The content of the object `name` of `store`, retried like every read.
pub(crate) async fn read(
    cluster: &Cluster,
    store: &str,
    name: &str,
) -> Result<Vec<u8>, ClusterError> {
    let what = format!("{store}/{name}");
    let what = what.as_str();
    retrying(what, || async move {
        let objects = cluster
            .jetstream()
            .get_object_store(store)
            .await
            .map_err(|e| request_error(store, e))?;
        let mut object = objects.get(name).await.map_err(|e| match e.kind() {
            GetErrorKind::NotFound => ClusterError::Missing {
                what: what.to_string(),
            },
            _ => request_error(what, e),
        })?;
        let mut bytes = Vec::new();
        object
            .read_to_end(&mut bytes)
            .await
            .map_err(|e| request_error(what, e))?;
        Ok(bytes)
    })
    .await
}

/// Deletes the object `name` of `store`; a failure is logged, not returned.
pub(crate) async fn delete(cluster: &Cluster, store: &str, name: &str) {
    let deleted = async {
        let objects = cluster.jetstream().get_object_store(store).await?;
        objects.delete(name).await?;
        Ok::<(), async_nats::Error>(())
    };
    if let Err(error) = deleted.await {
        tracing::warn!(%error, "could not delete {store}/{name}; it is unreferenced and can be removed");
    }
}
