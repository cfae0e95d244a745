//! What the whole cluster knows about its instances without asking their
//! hosts: which instances exist and who claimed each last (`gdn-instances`,
//! written at every claim), and their runtime events (`GDN_OBS`, published
//! by the agents as they happen). `gdn instance list --cluster` and `gdn
//! logs --cluster` read them.

use crate::error::{request_error, ClusterError};
use crate::layout::{INSTANCES_BUCKET, OBSERVATION_STREAM};
use crate::subject::{token, InstanceAddress};
use crate::Cluster;
use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use futures_util::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One instance as `gdn-instances` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceRecord {
    /// The workspace.
    pub workspace_id: String,
    /// The agent.
    pub agent_name: String,
    /// The instance key.
    pub instance_key: String,
    /// The host whose process claimed its log last.
    pub host: String,
    /// When (ISO 8601, that host's clock; for display only).
    pub claimed_at: String,
}

/// Records that `host` claimed `address`'s log now.
pub(crate) async fn record_claim(
    cluster: &Cluster,
    address: &InstanceAddress,
    host: &str,
) -> Result<(), ClusterError> {
    let record = InstanceRecord {
        workspace_id: address.workspace_id.clone(),
        agent_name: address.agent_name.clone(),
        instance_key: address.instance_key.clone(),
        host: host.to_string(),
        claimed_at: goondan_types::now_iso(),
    };
    let bucket = cluster
        .jetstream()
        .get_key_value(INSTANCES_BUCKET)
        .await
        .map_err(|e| request_error(INSTANCES_BUCKET, e))?;
    let body = serde_json::to_vec(&record).map_err(|e| request_error("an instance record", e))?;
    bucket
        .put(address.metadata_key(), body.into())
        .await
        .map(drop)
        .map_err(|e| request_error(&format!("{INSTANCES_BUCKET}/{}", address.metadata_key()), e))
}

/// Every instance of `workspace_id` some host ever claimed, by agent and
/// key.
pub async fn instances(
    cluster: &Cluster,
    workspace_id: &str,
) -> Result<Vec<InstanceRecord>, ClusterError> {
    let bucket = cluster
        .jetstream()
        .get_key_value(INSTANCES_BUCKET)
        .await
        .map_err(|e| request_error(INSTANCES_BUCKET, e))?;
    let prefix = format!("{}.", token(workspace_id));
    let keys: Vec<String> = bucket
        .keys()
        .await
        .map_err(|e| request_error(INSTANCES_BUCKET, e))?
        .try_collect()
        .await
        .map_err(|e| request_error(INSTANCES_BUCKET, e))?;
    let mut records = Vec::new();
    for key in keys.into_iter().filter(|key| key.starts_with(&prefix)) {
        let Some(value) = bucket
            .get(&key)
            .await
            .map_err(|e| request_error(&format!("{INSTANCES_BUCKET}/{key}"), e))?
        else {
            continue;
        };
        match serde_json::from_slice::<InstanceRecord>(&value) {
            Ok(record) => records.push(record),
            Err(error) => tracing::warn!(key, "unreadable instance record: {error}"),
        }
    }
    records.sort_by(|a, b| (&a.agent_name, &a.instance_key).cmp(&(&b.agent_name, &b.instance_key)));
    Ok(records)
}

/// Every runtime event the agents of `workspace_id` published that the
/// stream still holds (7 days), oldest first, as the JSON lines they were.
pub async fn observations(
    cluster: &Cluster,
    workspace_id: &str,
) -> Result<Vec<Vec<u8>>, ClusterError> {
    let filter = format!("gdn.obs.{}.>", token(workspace_id));
    let stream = cluster
        .jetstream()
        .get_stream(OBSERVATION_STREAM)
        .await
        .map_err(|e| request_error(OBSERVATION_STREAM, e))?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: filter.clone(),
            deliver_policy: DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .map_err(|e| request_error(&filter, e))?;
    let mut pending = consumer.cached_info().num_pending;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| request_error(&filter, e))?;
    let mut lines = Vec::new();
    while pending > 0 {
        let next = tokio::time::timeout(Duration::from_secs(5), messages.next()).await;
        let Ok(Some(message)) = next else {
            return Err(ClusterError::Timeout {
                what: format!("the runtime events of {workspace_id}"),
                after: Duration::from_secs(5),
            });
        };
        let message = message.map_err(|e| request_error(&filter, e))?;
        pending = message.info().map(|info| info.pending).unwrap_or(0);
        lines.push(message.payload.to_vec());
    }
    Ok(lines)
}
