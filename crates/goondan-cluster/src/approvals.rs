//! The requests for a person's decision that wait in a workspace, read
//! from anywhere without joining: what `gdn approvals` lists in a cluster
//! and where `gdn approve ID` finds the instance that holds `ID`.
//!
//! Each request is the subject `<prefix>.apv.<id>` of its instance's log
//! in `GDN_CONV`, and every record on it carries the request's whole state
//! (see [`crate::record`]), so one pass of an ordered consumer that
//! delivers the last record per subject of `gdn.conv.<ws>.*.*.apv.*`
//! answers for every instance at once. Only the instance's owner writes
//! those records ([`crate::ClusterApprovals`]); this module only reads.

use crate::error::{request_error, ClusterError};
use crate::layout::{BLOB_STORE, CONVERSATION_STREAM};
use crate::object;
use crate::record::{blob_of, Record, RecordKind};
use crate::retry::retrying;
use crate::subject::token;
use crate::Cluster;
use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use async_nats::jetstream::stream::Stream;
use futures_util::StreamExt;
use goondan_types::ApprovalRequest;
use std::time::Duration;

/// How long one record may take to arrive once the read has begun.
const READ_WAIT: Duration = Duration::from_secs(5);

/// Every request of the instances of `workspace_id` that waits for a
/// decision (asked, not decided, not closed), oldest first. A read that
/// fails midway (a leader election, a consumer not made in time) is
/// started again until [`crate::retry::RETRY_DEADLINE`].
pub async fn waiting(
    cluster: &Cluster,
    workspace_id: &str,
) -> Result<Vec<ApprovalRequest>, ClusterError> {
    let filter = format!("gdn.conv.{}.*.*.apv.*", token(workspace_id));
    let jetstream = cluster.jetstream();
    let stream = retrying(CONVERSATION_STREAM, || async move {
        jetstream
            .get_stream(CONVERSATION_STREAM)
            .await
            .map_err(|e| request_error(CONVERSATION_STREAM, e))
    })
    .await?;
    let (stream, filter) = (&stream, filter.as_str());
    let mut waiting = retrying(filter, || read_once(cluster, stream, filter)).await?;
    waiting.sort_by(|a, b| a.requested_at.cmp(&b.requested_at));
    Ok(waiting)
}

/// One pass over the last approval record of every subject under
/// `filter`.
async fn read_once(
    cluster: &Cluster,
    stream: &Stream,
    filter: &str,
) -> Result<Vec<ApprovalRequest>, ClusterError> {
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: filter.to_string(),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..Default::default()
        })
        .await
        .map_err(|e| request_error(filter, e))?;
    let mut pending = consumer.cached_info().num_pending;
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| request_error(filter, e))?;
    let mut waiting = Vec::new();
    while pending > 0 {
        let Ok(Some(message)) = tokio::time::timeout(READ_WAIT, messages.next()).await else {
            return Err(ClusterError::Timeout {
                what: format!("the approval records under {filter}"),
                after: READ_WAIT,
            });
        };
        let message = message.map_err(|e| request_error(filter, e))?;
        let info = message.info().map_err(|e| request_error(filter, e))?;
        pending = info.pending;
        let body = match blob_of(&message.payload) {
            Some(reference) => object::read(cluster, BLOB_STORE, &reference.blob).await?,
            None => message.payload.to_vec(),
        };
        match RecordKind::Approval.decode(&body) {
            Ok(Record::Approval(approval)) if approval.decision.is_none() && !approval.closed => {
                waiting.push(approval.request);
            }
            Ok(_) => {}
            // One unreadable record hides one request, not every other.
            Err(reason) => tracing::warn!(
                subject = %message.subject,
                seq = info.stream_sequence,
                "an unreadable approval record: {reason}"
            ),
        }
    }
    Ok(waiting)
}
