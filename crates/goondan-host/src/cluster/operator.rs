//! A person's commands on one instance of a cluster, served by the host
//! that owns the instance now: the decision on a pending approval (`gdn
//! approve|deny`), the cancel of the running Turn (`gdn instance
//! cancel`) and the rewind of its history (`gdn instance rewind`).
//! [`OperatorRequest`] and [`OperatorResponse`] are the JSON they travel
//! as; [`serve`] is each host's side, over [`goondan_cluster::owner`],
//! which finds the owner for the asker (`client::ask_operator`). A
//! request a host cannot read (from another version of `gdn`) is answered
//! `E_CLUSTER_BAD_REQUEST`.
//!
//! The owner does what its control socket does for a person on one host
//! (the same [`OrchestratorHandle`] calls), and only for an instance it
//! owns: a request for one it does not is refused with
//! [`goondan_cluster::owner::OwnerRequest::not_owner`], and the asker
//! looks for the owner again. Whatever it does still reaches the instance
//! through its log: a decision is recorded by the instance's process,
//! under its claim, at most once; a rewind holds the instance (its
//! process stopped, its inputs waiting, refused while a Turn runs), and
//! rewrites its log under the host's own claim
//! ([`goondan_cluster::history::rewind`]) before letting go of it.

use super::stop_requested;
use super::while_starting;
use goondan_cluster::history::RewoundLog;
use goondan_cluster::membership::Membership;
use goondan_cluster::owner::{OwnerRequest, OwnerRequests};
use goondan_cluster::subject::InstanceAddress;
use goondan_cluster::Cluster;
use goondan_ipc::RoutingKey;
use goondan_orchestrator::orchestrator::{CancelOutcome, CancelledTurn, Rewriter};
use goondan_orchestrator::OrchestratorHandle;
use goondan_store::TurnRef;
use goondan_types::{ApprovalDecision, ErrorBody};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What a person asks the owner of one instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum OperatorRequest {
    /// Hands `decision` to the instance holding the approval it decides,
    /// and answers once the instance recorded it.
    #[serde(rename_all = "camelCase")]
    Decide {
        /// The agent.
        agent: String,
        /// The instance key.
        instance_key: String,
        /// The decision.
        decision: ApprovalDecision,
    },
    /// Cancels the Turn the instance runs, for `by`, and answers once it
    /// is over (a few seconds at most).
    #[serde(rename_all = "camelCase")]
    Cancel {
        /// The agent.
        agent: String,
        /// The instance key.
        instance_key: String,
        /// Who asks, recorded with the cancelled Turn (`cli`).
        by: String,
    },
    /// Moves the instance back to the end of the Turn `to` (a position
    /// or a Turn id), for `by`; refused while a Turn runs unless `cancel`.
    #[serde(rename_all = "camelCase")]
    Rewind {
        /// The agent.
        agent: String,
        /// The instance key.
        instance_key: String,
        /// The Turn, as typed.
        to: String,
        /// Cancel a running Turn first instead of refusing.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        cancel: bool,
        /// Who asks (`cli`).
        by: String,
    },
}

impl OperatorRequest {
    /// The instance the request is about, in `workspace_id`.
    pub fn address(&self, workspace_id: &str) -> InstanceAddress {
        let (OperatorRequest::Decide {
            agent,
            instance_key,
            ..
        }
        | OperatorRequest::Cancel {
            agent,
            instance_key,
            ..
        }
        | OperatorRequest::Rewind {
            agent,
            instance_key,
            ..
        }) = self;
        InstanceAddress::new(workspace_id, agent, instance_key)
    }
}

/// The owner's answer to an [`OperatorRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "camelCase")]
pub enum OperatorResponse {
    /// The instance recorded the decision.
    Decided,
    /// What the cancel stopped.
    Cancelled(CancelOutcome),
    /// What the rewind did, and the Turns it cancelled first.
    #[serde(rename_all = "camelCase")]
    Rewound {
        /// The rewind.
        rewound: RewoundLog,
        /// The Turns cancelled first (with `cancel`).
        cancelled: Vec<CancelledTurn>,
    },
    /// Refused: the code, what happened and how to fix it.
    Failed(ErrorBody),
}

/// What answering needs.
struct Owner {
    cluster: Cluster,
    workspace_id: String,
    handle: OrchestratorHandle,
    membership: Arc<Membership>,
}

impl Owner {
    /// True when this host serves `address` now: it holds the lease of
    /// its shard and renewed it recently enough to start work on it.
    fn serves(&self, address: &InstanceAddress) -> bool {
        self.membership.is_fresh() && self.membership.owned().borrow().contains(&address.shard())
    }
}

/// Answers the requests addressed to this host until `stop`; the ones
/// being answered then are finished first (a person waits for each).
pub(super) async fn serve(
    cluster: Cluster,
    workspace_id: String,
    handle: OrchestratorHandle,
    membership: Arc<Membership>,
    mut stop: watch::Receiver<bool>,
) {
    let host_id = membership.host_id().to_string();
    let subscribed = while_starting(|| OwnerRequests::subscribe(&cluster, &workspace_id, &host_id));
    let mut requests = tokio::select! {
        subscribed = subscribed => match subscribed {
            Ok(requests) => requests,
            Err(error) => {
                tracing::error!(code = error.code(), "a person's requests cannot reach this host: {error}");
                return;
            }
        },
        _ = stop_requested(&mut stop) => return,
    };
    let owner = Arc::new(Owner {
        cluster,
        workspace_id,
        handle,
        membership,
    });
    let mut answering = JoinSet::new();
    loop {
        tokio::select! {
            request = requests.next() => match request {
                Some(request) => {
                    answering.spawn(answer(Arc::clone(&owner), request));
                }
                None => break,
            },
            _ = stop_requested(&mut stop) => break,
            Some(_) = answering.join_next(), if !answering.is_empty() => {}
        }
    }
    while answering.join_next().await.is_some() {}
}

/// Answers one request.
async fn answer(owner: Arc<Owner>, request: OwnerRequest) {
    let asked = match serde_json::from_slice::<OperatorRequest>(request.payload()) {
        Ok(asked) => asked,
        Err(error) => {
            let refused = OperatorResponse::Failed(ErrorBody::new(
                "E_CLUSTER_BAD_REQUEST",
                format!("not a request this host reads: {error}"),
            ));
            request.answer(encode(&refused)).await;
            return;
        }
    };
    let address = asked.address(&owner.workspace_id);
    if !owner.serves(&address) {
        request.not_owner().await;
        return;
    }
    let response = match asked {
        OperatorRequest::Decide {
            agent,
            instance_key,
            decision,
        } => owner
            .handle
            .decide(RoutingKey::new(agent, instance_key), decision)
            .await
            .map(|()| OperatorResponse::Decided),
        OperatorRequest::Cancel {
            agent,
            instance_key,
            by,
        } => owner
            .handle
            .cancel_running(
                goondan_types::RoutingKey::new(agent, instance_key).to_string(),
                by,
                goondan_orchestrator::control::CANCEL_SETTLE,
            )
            .await
            .map(OperatorResponse::Cancelled),
        OperatorRequest::Rewind { to, cancel, by, .. } => {
            let response = owner
                .rewind(&address, &TurnRef::parse(&to), cancel, by)
                .await;
            request.answer(encode(&response)).await;
            return;
        }
    };
    let response = response.unwrap_or_else(|error| OperatorResponse::Failed(error.to_body()));
    request.answer(encode(&response)).await;
}

impl Owner {
    /// Rewinds the instance at `address` to `to` for `by`: cancels its
    /// running Turn first when `cancel`, holds it, rewrites its log, and
    /// lets go of it, whatever came of the rewrite.
    async fn rewind(
        &self,
        address: &InstanceAddress,
        to: &TurnRef,
        cancel: bool,
        by: String,
    ) -> OperatorResponse {
        // Checked before the instance is held, so a wrong request stops
        // nothing (and makes no log for an instance that has none); the
        // rewind checks again under its claim.
        if let Err(error) = goondan_cluster::history::turn(&self.cluster, address, to).await {
            return OperatorResponse::Failed(cluster_body(&error));
        }
        let key = address.routing_key();
        let held = self
            .handle
            .cancel_and_hold(
                vec![key.clone()],
                cancel.then(|| by.clone()),
                goondan_orchestrator::control::CANCEL_SETTLE,
                Rewriter::ClusterHost,
            )
            .await;
        let held = match held {
            Ok(held) => held,
            Err(error) => return OperatorResponse::Failed(error.to_body()),
        };
        let rewound = goondan_cluster::history::rewind(
            &self.cluster,
            address,
            to,
            &by,
            self.membership.host_id(),
        )
        .await;
        if let Err(error) = self.handle.release(vec![key]).await {
            tracing::warn!(
                code = error.code(),
                "letting go of a rewound instance: {error}"
            );
        }
        match rewound {
            Ok(rewound) => {
                tracing::info!(instance = %address.routing_key(), by, to = rewound.to.turn_index, "rewound for an operator");
                OperatorResponse::Rewound {
                    rewound,
                    cancelled: held.cancelled,
                }
            }
            Err(error) => OperatorResponse::Failed(cluster_body(&error)),
        }
    }
}

/// A cluster's refusal as the asker reads it.
fn cluster_body(error: &goondan_cluster::ClusterError) -> ErrorBody {
    ErrorBody {
        code: error.code().to_string(),
        message: error.to_string(),
        suggestion: error.suggestion(),
    }
}

fn encode(response: &OperatorResponse) -> Vec<u8> {
    // Every field is a string, a number or a JSON value already.
    serde_json::to_vec(response).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    //! The owner's side against a real nats-server and an orchestrator
    //! whose agents echo: what it answers for an instance it owns, and
    //! for a request it cannot read.

    use super::*;
    use crate::cluster::client::ask_operator;
    use crate::cluster::testing::{address, EchoOrchestrator, TestCluster, WORKSPACE};
    use goondan_cluster::owner::ask_owner;
    use std::time::Duration;

    #[tokio::test]
    async fn the_owner_answers_a_persons_requests_for_its_instances_with_the_orchestrators_word() {
        let Some(test) = TestCluster::start().await else {
            return;
        };
        let membership = Arc::new(
            Membership::join(test.cluster.clone(), "host-a".to_string())
                .await
                .expect("joined"),
        );
        let instance = address("user-1");
        let mut owned = membership.owned();
        tokio::time::timeout(
            Duration::from_secs(20),
            owned.wait_for(|owned| owned.contains(&instance.shard())),
        )
        .await
        .expect("host-a owns the instance's shard")
        .unwrap();
        let orchestrator = EchoOrchestrator::start(None);
        let (stop, stopped) = watch::channel(false);
        let serving = tokio::spawn(serve(
            test.cluster.clone(),
            WORKSPACE.to_string(),
            orchestrator.handle.clone(),
            Arc::clone(&membership),
            stopped,
        ));

        // Nothing runs there: the orchestrator's refusal, as it gave it.
        let cancel = OperatorRequest::Cancel {
            agent: instance.agent_name.clone(),
            instance_key: instance.instance_key.clone(),
            by: "cli".to_string(),
        };
        let answer = ask_operator(&test.cluster, WORKSPACE, &cancel)
            .await
            .unwrap();
        let OperatorResponse::Failed(refused) = answer else {
            panic!("cancelled a Turn nobody ran: {answer:?}");
        };
        assert_eq!(refused.code, "E_NO_TURN_RUNNING", "{refused:?}");
        // A rewind of an instance with no log: its Turn is not found, and
        // nothing is held or written (no log is made for it).
        let rewind = OperatorRequest::Rewind {
            agent: instance.agent_name.clone(),
            instance_key: instance.instance_key.clone(),
            to: "1".to_string(),
            cancel: false,
            by: "cli".to_string(),
        };
        let answer = ask_operator(&test.cluster, WORKSPACE, &rewind)
            .await
            .unwrap();
        let OperatorResponse::Failed(refused) = answer else {
            panic!("rewound an instance with no Turn: {answer:?}");
        };
        assert_eq!(refused.code, "E_TURN_NOT_FOUND", "{refused:?}");
        assert!(
            goondan_cluster::directory::instances(&test.cluster, WORKSPACE)
                .await
                .unwrap()
                .is_empty(),
            "a refused rewind claimed a log"
        );
        // What it cannot read is answered, not dropped.
        let garbage = ask_owner(
            &test.cluster,
            &instance,
            b"{".to_vec(),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
        let answer: OperatorResponse = serde_json::from_slice(&garbage).unwrap();
        assert!(
            matches!(&answer, OperatorResponse::Failed(body) if body.code == "E_CLUSTER_BAD_REQUEST"),
            "{answer:?}"
        );

        let _ = stop.send(true);
        serving.await.unwrap();
    }
}
