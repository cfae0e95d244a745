//! The bundle every host runs, distributed by digest.
//!
//! A bundle travels as one archive (the caller packs it; this crate only
//! stores bytes) in the object store `gdn-bundle`, named by its
//! [`digest_of`]. The key `active` of the bucket `gdn-config` names the
//! archive the swarm runs ([`ActiveBundle`]). Hosts follow that key: a
//! host that starts with another bundle runs the active one, and a new
//! `active` is a rollout every host applies. So no host runs what another
//! could not fetch, and "which bundle runs where" is one read
//! (`gdn cluster status`: each heartbeat names its host's digest).
//!
//! Integrity rests on the digest: [`download`] hashes what it read and
//! refuses an archive whose digest is not its name, so a damaged or
//! substituted object never reaches a host's disk.

use crate::connect::Cluster;
use crate::error::{request_error, ClusterError};
use crate::layout::{BUNDLE_STORE, CONFIG_BUCKET};
use crate::object;
use async_nats::jetstream::kv;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use tokio::sync::watch;

/// The key of `gdn-config` naming the running bundle.
pub const ACTIVE_KEY: &str = "active";
/// The largest archive the cluster stores (compressed).
pub const MAX_BUNDLE_BYTES: usize = 64 * 1024 * 1024;

/// The bundle the swarm runs: the value of `gdn-config/active`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActiveBundle {
    /// `sha256:<hex>` of the archive in `gdn-bundle`.
    pub digest: String,
    /// The archive's size in bytes.
    pub size: u64,
    /// The cluster workspace the bundle's Swarm runs as; a bundle for
    /// another one is refused (one swarm per cluster).
    pub workspace_id: String,
    /// Who made it active: a host id, or `gdn cluster deploy` and the
    /// machine it ran on.
    pub deployed_by: String,
    /// When (ISO 8601, the deployer's clock; for display only).
    pub deployed_at: String,
    /// The `gdn-config` revision of this record; 0 in a record not read
    /// from the bucket.
    #[serde(skip)]
    pub revision: u64,
}

impl ActiveBundle {
    /// The record for the archive `digest` of `size` bytes, made active
    /// now by `deployed_by`.
    pub fn new(digest: String, size: u64, workspace_id: String, deployed_by: String) -> Self {
        ActiveBundle {
            digest,
            size,
            workspace_id,
            deployed_by,
            deployed_at: goondan_types::now_iso(),
            revision: 0,
        }
    }
}

/// A host's refusal of an active bundle, in its heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// The bundle refused.
    pub digest: String,
    /// Why, with its code (`[E_…] …`).
    pub problem: String,
}

/// `sha256:` and the hex SHA-256 of `archive`.
pub fn digest_of(archive: &[u8]) -> String {
    let hash = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, archive);
    let hex: String = hash
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// The first 12 hex digits of `digest`, as people read it.
pub fn short_digest(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

/// Stores `archive` under its digest (once: an archive already there is
/// not sent again) and returns the digest.
pub async fn upload(cluster: &Cluster, archive: &[u8]) -> Result<String, ClusterError> {
    if archive.len() > MAX_BUNDLE_BYTES {
        return Err(ClusterError::TooLarge {
            what: "the bundle archive".into(),
            bytes: archive.len(),
            limit: MAX_BUNDLE_BYTES,
        });
    }
    let digest = digest_of(archive);
    let store = cluster
        .jetstream()
        .get_object_store(BUNDLE_STORE)
        .await
        .map_err(|e| request_error(BUNDLE_STORE, e))?;
    if store.info(&digest).await.is_ok() {
        return Ok(digest);
    }
    object::put(cluster, BUNDLE_STORE, &digest, HashMap::new(), archive).await?;
    Ok(digest)
}

/// The archive `digest`, checked against its digest.
pub async fn download(cluster: &Cluster, digest: &str) -> Result<Vec<u8>, ClusterError> {
    let archive = object::read(cluster, BUNDLE_STORE, digest).await?;
    let actual = digest_of(&archive);
    if actual != digest {
        return Err(ClusterError::Corrupt {
            what: format!("{BUNDLE_STORE}/{digest}"),
            reason: format!("its content hashes to {actual}"),
        });
    }
    Ok(archive)
}

async fn config_bucket(cluster: &Cluster) -> Result<kv::Store, ClusterError> {
    cluster
        .jetstream()
        .get_key_value(CONFIG_BUCKET)
        .await
        .map_err(|e| request_error(&format!("open {CONFIG_BUCKET}"), e))
}

fn decode_active(value: &[u8], revision: u64) -> Result<ActiveBundle, ClusterError> {
    let mut active: ActiveBundle =
        serde_json::from_slice(value).map_err(|e| ClusterError::Corrupt {
            what: format!("{CONFIG_BUCKET}/{ACTIVE_KEY}"),
            reason: e.to_string(),
        })?;
    active.revision = revision;
    Ok(active)
}

/// The bundle the swarm runs, when one was made active.
pub async fn active(cluster: &Cluster) -> Result<Option<ActiveBundle>, ClusterError> {
    let bucket = config_bucket(cluster).await?;
    let entry = bucket
        .entry(ACTIVE_KEY)
        .await
        .map_err(|e| request_error(&format!("read {CONFIG_BUCKET}/{ACTIVE_KEY}"), e))?;
    match entry {
        Some(entry) if entry.operation == kv::Operation::Put => {
            decode_active(&entry.value, entry.revision).map(Some)
        }
        _ => Ok(None),
    }
}

/// Makes `wanted` active. With `after: Some(revision)` only if `active` is
/// still at that revision, with `None` only if no bundle was active yet:
/// of two deployers racing, one wins and the other gets `Ok(None)` and
/// reads again. The archive must be uploaded first.
pub async fn activate(
    cluster: &Cluster,
    wanted: &ActiveBundle,
    after: Option<u64>,
) -> Result<Option<ActiveBundle>, ClusterError> {
    let bucket = config_bucket(cluster).await?;
    let value = serde_json::to_vec(wanted).expect("an active bundle record encodes");
    let what = format!("write {CONFIG_BUCKET}/{ACTIVE_KEY}");
    let written = match after {
        Some(revision) => bucket
            .update(ACTIVE_KEY, value.into(), revision)
            .await
            .map_err(|e| match e.kind() {
                kv::UpdateErrorKind::WrongLastRevision => None,
                _ => Some(request_error(&what, e)),
            }),
        None => bucket
            .create(ACTIVE_KEY, value.into())
            .await
            .map_err(|e| match e.kind() {
                kv::CreateErrorKind::AlreadyExists => None,
                _ => Some(request_error(&what, e)),
            }),
    };
    match written {
        Ok(revision) => Ok(Some(ActiveBundle {
            revision,
            ..wanted.clone()
        })),
        Err(None) => Ok(None),
        Err(Some(error)) => Err(error),
    }
}

/// Follows `gdn-config/active`: the receiver holds the latest record
/// (`None` until one exists) until the watch ends with the connection.
pub async fn follow_active(
    cluster: &Cluster,
) -> Result<watch::Receiver<Option<ActiveBundle>>, ClusterError> {
    let bucket = config_bucket(cluster).await?;
    let mut entries = bucket
        .watch_with_history(ACTIVE_KEY)
        .await
        .map_err(|e| request_error(&format!("watch {CONFIG_BUCKET}/{ACTIVE_KEY}"), e))?;
    let (sender, receiver) = watch::channel(None);
    tokio::spawn(async move {
        while let Some(entry) = entries.next().await {
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) => {
                    tracing::warn!("watching {CONFIG_BUCKET}/{ACTIVE_KEY}: {error}");
                    continue;
                }
            };
            if entry.operation != kv::Operation::Put {
                continue;
            }
            match decode_active(&entry.value, entry.revision) {
                Ok(active) => {
                    if sender.send(Some(active)).is_err() {
                        return;
                    }
                }
                Err(error) => tracing::warn!(code = error.code(), "{error}"),
            }
        }
    });
    Ok(receiver)
}
