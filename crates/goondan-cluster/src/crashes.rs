//! Crash counters that move with an instance: `consecutiveCrashes` and
//! `backoffUntil` of every instance of a workspace, kept in `gdn-instances`
//! under `crashes.<ws>.<agent>.<key>`, so that an instance crashing on one
//! host does not start its backoff over when it moves to another.
//!
//! A host's orchestrator reads a crash record whenever it first meets an
//! instance and must not wait for the network then, so [`CrashRecords`]
//! keeps a mirror of the workspace's records, filled and kept current by a
//! watch of their keys: only instances that crashed have one, and a record
//! is removed when its instance runs well again, so the mirror stays small.
//! Writes go to the mirror at once and to the bucket in the background, in
//! order.

use crate::error::{request_error, ClusterError};
use crate::layout::INSTANCES_BUCKET;
use crate::subject::{token, InstanceAddress};
use crate::Cluster;
use async_nats::jetstream::kv;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// One instance's crash record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CrashEntry {
    /// Crashes since the instance last ran well.
    pub consecutive_crashes: u32,
    /// Until when it must not be started again (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_until_ms: Option<u64>,
}

/// The crash records of one workspace: a mirror read without waiting,
/// written through to `gdn-instances`.
#[derive(Clone)]
pub struct CrashRecords {
    workspace_id: String,
    mirror: Arc<Mutex<HashMap<String, CrashEntry>>>,
    writes: mpsc::UnboundedSender<(String, Option<CrashEntry>)>,
}

impl std::fmt::Debug for CrashRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashRecords")
            .field("workspace_id", &self.workspace_id)
            .finish_non_exhaustive()
    }
}

fn prefix(workspace_id: &str) -> String {
    format!("crashes.{}.", token(workspace_id))
}

fn key_of(address: &InstanceAddress) -> String {
    format!("crashes.{}", address.metadata_key())
}

impl CrashRecords {
    /// Loads the workspace's records and follows them; the background
    /// tasks run on the current runtime until the connection closes.
    pub async fn follow(
        cluster: &Cluster,
        workspace_id: &str,
    ) -> Result<CrashRecords, ClusterError> {
        let bucket = cluster
            .jetstream()
            .get_key_value(INSTANCES_BUCKET)
            .await
            .map_err(|e| request_error(INSTANCES_BUCKET, e))?;
        let filter = format!("{}>", prefix(workspace_id));
        let mut entries = bucket
            .watch_with_history(&filter)
            .await
            .map_err(|e| request_error(&format!("watch {INSTANCES_BUCKET}/{filter}"), e))?;
        let mirror: Arc<Mutex<HashMap<String, CrashEntry>>> = Arc::default();
        // The history first, so a record written before this host joined
        // is there when its instance first comes. A watch of keys that
        // were never written says nothing at all, so ask first whether
        // there are any.
        let any = bucket
            .stream
            .info_with_subjects(format!("$KV.{INSTANCES_BUCKET}.{filter}"))
            .await
            .map_err(|e| request_error(&format!("list {INSTANCES_BUCKET}/{filter}"), e))?
            .next()
            .await
            .is_some();
        if any {
            crate::layout::catch_up(
                cluster,
                &mut entries,
                INSTANCES_BUCKET,
                &format!("the crash records of {workspace_id}"),
                |entry| apply(&mirror, entry),
            )
            .await?;
        }
        tokio::spawn({
            let mirror = Arc::clone(&mirror);
            async move {
                while let Some(entry) = entries.next().await {
                    match entry {
                        Ok(entry) => apply(&mirror, entry),
                        Err(error) => tracing::warn!("watching crash records: {error}"),
                    }
                }
            }
        });
        let (writes, mut pending) = mpsc::unbounded_channel::<(String, Option<CrashEntry>)>();
        tokio::spawn(async move {
            while let Some((key, entry)) = pending.recv().await {
                let written = match entry {
                    Some(entry) => {
                        let body = serde_json::to_vec(&entry).expect("a crash record encodes");
                        bucket
                            .put(&key, body.into())
                            .await
                            .map(drop)
                            .map_err(|e| e.to_string())
                    }
                    None => bucket.delete(&key).await.map_err(|e| e.to_string()),
                };
                if let Err(error) = written {
                    tracing::warn!(
                        key,
                        "writing a crash record: {error}; other hosts see the last one written"
                    );
                }
            }
        });
        Ok(CrashRecords {
            workspace_id: workspace_id.to_string(),
            mirror,
            writes,
        })
    }

    /// The record of `agent:instance_key`, as last written by any host.
    pub fn get(&self, agent_name: &str, instance_key: &str) -> CrashEntry {
        let key = key_of(&InstanceAddress::new(
            &self.workspace_id,
            agent_name,
            instance_key,
        ));
        self.mirror
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&key)
            .copied()
            .unwrap_or_default()
    }

    /// Records `entry` for `agent:instance_key` (a zero record removes it).
    pub fn put(&self, agent_name: &str, instance_key: &str, entry: CrashEntry) {
        let key = key_of(&InstanceAddress::new(
            &self.workspace_id,
            agent_name,
            instance_key,
        ));
        let entry = (entry != CrashEntry::default()).then_some(entry);
        {
            let mut mirror = self
                .mirror
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match entry {
                Some(entry) => mirror.insert(key.clone(), entry),
                None => mirror.remove(&key),
            };
        }
        // The writer lives as long as the connection's runtime.
        let _ = self.writes.send((key, entry));
    }
}

fn apply(mirror: &Mutex<HashMap<String, CrashEntry>>, entry: kv::Entry) {
    let mut mirror = mirror
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match entry.operation {
        kv::Operation::Put => match serde_json::from_slice::<CrashEntry>(&entry.value) {
            Ok(record) => {
                mirror.insert(entry.key, record);
            }
            Err(error) => tracing::warn!(key = entry.key, "unreadable crash record: {error}"),
        },
        kv::Operation::Delete | kv::Operation::Purge => {
            mirror.remove(&entry.key);
        }
    }
}
