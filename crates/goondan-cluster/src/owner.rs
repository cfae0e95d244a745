//! A person's request to whichever host owns an instance now: [`ask_owner`]
//! from anywhere, [`OwnerRequests`] on each host. This module owns how a
//! request finds the owner (the shard's lease, then the host's subject
//! `gdn.ctl.<ws>.<host>`, see [`crate::subject::owner_subject`]), how
//! long it looks for one, and the one refusal every owner can give
//! ([`OwnerRequest::not_owner`]); what a request asks and what the owner
//! does about it are the host's.
//!
//! Requests travel as core NATS request and reply: nothing about them is
//! durable, so only what is safe to ask again goes this way (a decision,
//! which the instance records at most once; a cancel of the Turn running
//! now). Whatever the owner does to the instance still goes through the
//! instance's log and its claims, so a request that reached a host that
//! just lost the instance changes nothing there: the log refuses that
//! host's writes.
//!
//! The lease can name a host that is gone (it expires 5 s after its last
//! renewal) or none at all (no host took the shard yet), and a host that
//! holds it may be handing the shard over. [`ask_owner`] looks again
//! every [`LOOK_AGAIN`] until [`FIND_OWNER_DEADLINE`]: a crash is taken
//! over within about 10 s.

use crate::error::{request_error, ClusterError};
use crate::membership::shard_lease;
use crate::subject::{owner_subject, InstanceAddress};
use crate::Cluster;
use async_nats::header::HeaderMap;
use async_nats::{Request, RequestErrorKind};
use futures_util::StreamExt;
use std::time::Duration;

/// The header of an owner's refusal: this host does not own the instance
/// (any more, or not yet).
const NOT_OWNER_HEADER: &str = "Gdn-Not-Owner";

/// How long [`ask_owner`] looks for a host that owns the instance.
pub const FIND_OWNER_DEADLINE: Duration = Duration::from_secs(30);

/// The pause between two looks.
const LOOK_AGAIN: Duration = Duration::from_millis(250);

/// Sends `payload` to the host that owns `address` now and returns its
/// answer, waiting at most `answer_within` for it once a host took the
/// request. No host owning the instance within [`FIND_OWNER_DEADLINE`] is
/// [`ClusterError::NoOwner`]; an owner that took the request and did not
/// answer in time is [`ClusterError::OwnerSilent`] (it may still act on
/// it).
pub async fn ask_owner(
    cluster: &Cluster,
    address: &InstanceAddress,
    payload: Vec<u8>,
    answer_within: Duration,
) -> Result<Vec<u8>, ClusterError> {
    let started = tokio::time::Instant::now();
    let shard = address.shard();
    let mut last_seen = None;
    loop {
        if let Some(lease) = shard_lease(cluster, shard).await? {
            let subject = owner_subject(&address.workspace_id, &lease.host);
            let request = Request::new()
                .payload(payload.clone().into())
                .timeout(Some(answer_within));
            match cluster.client().send_request(subject, request).await {
                Ok(answer) if is_not_owner(answer.headers.as_ref()) => {
                    tracing::debug!(host = %lease.host, "not the owner of {}; looking again", address.routing_key());
                }
                Ok(answer) => return Ok(answer.payload.to_vec()),
                // The lease names a host that is gone: its lease runs out
                // and another host takes the shard.
                Err(error) if error.kind() == RequestErrorKind::NoResponders => {}
                Err(error) if error.kind() == RequestErrorKind::TimedOut => {
                    return Err(ClusterError::OwnerSilent {
                        instance: address.routing_key(),
                        host: lease.host,
                        after: answer_within,
                    });
                }
                Err(error) => return Err(request_error(&address.routing_key(), error)),
            }
            last_seen = Some(lease.host);
        }
        if started.elapsed() >= FIND_OWNER_DEADLINE {
            return Err(ClusterError::NoOwner {
                instance: address.routing_key(),
                shard,
                last_seen,
                waited: FIND_OWNER_DEADLINE,
            });
        }
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

fn is_not_owner(headers: Option<&HeaderMap>) -> bool {
    headers.is_some_and(|headers| headers.get(NOT_OWNER_HEADER).is_some())
}

/// The requests addressed to one host as an owner of instances.
#[derive(Debug)]
pub struct OwnerRequests {
    cluster: Cluster,
    subscription: async_nats::Subscriber,
}

impl OwnerRequests {
    /// Starts taking the requests for `host_id` in `workspace_id`.
    pub async fn subscribe(
        cluster: &Cluster,
        workspace_id: &str,
        host_id: &str,
    ) -> Result<OwnerRequests, ClusterError> {
        let subject = owner_subject(workspace_id, host_id);
        let subscription = cluster
            .client()
            .subscribe(subject.clone())
            .await
            .map_err(|error| request_error(&format!("subscribe {subject}"), error))?;
        Ok(OwnerRequests {
            cluster: cluster.clone(),
            subscription,
        })
    }

    /// The next request; `None` once the connection is closed. A message
    /// without a reply subject is not a request and is skipped.
    pub async fn next(&mut self) -> Option<OwnerRequest> {
        loop {
            let message = self.subscription.next().await?;
            let Some(reply) = message.reply else {
                tracing::warn!(subject = %message.subject, "an owner request without a reply subject; dropped");
                continue;
            };
            return Some(OwnerRequest {
                cluster: self.cluster.clone(),
                payload: message.payload.to_vec(),
                reply: reply.to_string(),
            });
        }
    }
}

/// One request to this host, to answer once.
#[derive(Debug)]
pub struct OwnerRequest {
    cluster: Cluster,
    payload: Vec<u8>,
    reply: String,
}

impl OwnerRequest {
    /// What was asked.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Sends `answer`. A failed publish is logged: the asker's own wait
    /// runs out.
    pub async fn answer(self, answer: Vec<u8>) {
        if let Err(error) = self
            .cluster
            .client()
            .publish(self.reply, answer.into())
            .await
        {
            tracing::warn!("an owner's answer was not sent: {error}");
        }
    }

    /// Tells the asker that this host does not own the instance, so it
    /// looks for the owner again.
    pub async fn not_owner(self) {
        let mut headers = HeaderMap::new();
        headers.insert(NOT_OWNER_HEADER, "1");
        if let Err(error) = self
            .cluster
            .client()
            .publish_with_headers(self.reply, headers, Vec::new().into())
            .await
        {
            tracing::warn!("an owner's refusal was not sent: {error}");
        }
    }
}
