//! [`ClusterReply`]: what a host publishes to an [`Envelope`]'s reply
//! subject (the answer side of the envelope a caller outside the cluster,
//! such as `gdn run --cluster … --input`, sent), and [`send`], which
//! publishes one.

use crate::connect::Cluster;
use crate::error::ClusterError;
use crate::inbox::Envelope;
use goondan_types::{AgentEvent, ErrorBody};
use serde::{Deserialize, Serialize};

/// The answer to an envelope with a reply subject: the answer event, or
/// why there is none.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReply {
    /// The answer event, when the Turn answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Box<AgentEvent>>,
    /// Why there is no answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl ClusterReply {
    /// The reply carrying `answer`.
    pub fn answered(answer: AgentEvent) -> ClusterReply {
        ClusterReply {
            answer: Some(Box::new(answer)),
            error: None,
        }
    }

    /// The reply saying why there is no answer.
    pub fn refused(
        code: impl Into<String>,
        message: impl Into<String>,
        suggestion: Option<String>,
    ) -> ClusterReply {
        ClusterReply {
            answer: None,
            error: Some(ErrorBody {
                code: code.into(),
                message: message.into(),
                suggestion,
            }),
        }
    }
}

/// Publishes `reply` to `envelope`'s reply subject (nothing when it has
/// none). A reply travels as one core-NATS message: one the servers would
/// refuse becomes an error the caller reads, not a wait for nothing. A
/// failed publish is logged: the caller's own wait runs out.
pub async fn send(cluster: &Cluster, envelope: &Envelope, reply: &ClusterReply) {
    let Some(subject) = &envelope.reply_to else {
        return;
    };
    let mut body = match serde_json::to_vec(reply) {
        Ok(body) => body,
        Err(error) => {
            tracing::error!("cannot encode a reply: {error}");
            return;
        }
    };
    let limit = cluster.client().server_info().max_payload;
    if body.len() > limit {
        let error = ClusterError::TooLarge {
            what: "the answer".to_string(),
            bytes: body.len(),
            limit,
        };
        let refused = ClusterReply::refused(
            error.code(),
            error.to_string(),
            Some("ask for a shorter answer, or read it from the conversation (`gdn instance export --cluster`)".into()),
        );
        body = serde_json::to_vec(&refused).unwrap_or_default();
    }
    if let Err(error) = cluster.client().publish(subject.clone(), body.into()).await {
        tracing::warn!(subject, "cannot publish a reply: {error}");
    }
}
