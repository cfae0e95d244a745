//! [`OrchestratorLink`]: a ConnectorProcess's questions to the
//! orchestrator (`runtime.query`) and the wait for their answers.
//!
//! Two things ask: the emitter, handing the swarm an event
//! ([`Query::Ingest`]), and the approval desk, handing it a decision
//! pressed in a chat ([`Query::Decide`](goondan_ipc::protocol::Query)).
//! The process's IPC reader hands every answer to [`OrchestratorLink::answered`].

use goondan_ipc::protocol::{self, Query, QueryAnswer, QueryRequest};
use goondan_ipc::{RuntimeMessage, ORCHESTRATOR};
use goondan_types::IpcMessage;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The orchestrator is gone (its end of the pipe closed).
    #[error("the orchestrator is gone")]
    Gone,
    /// No answer came in time; the orchestrator may still act on it.
    #[error("the orchestrator did not answer within {} s", .0.as_secs())]
    TimedOut(Duration),
}

/// Answers waiting for their questions, by correlation id.
type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<QueryAnswer>>>>;

/// The asking side of one ConnectorProcess's pipe to the orchestrator.
#[derive(Debug, Clone)]
pub struct OrchestratorLink {
    me: String,
    sender: mpsc::Sender<IpcMessage>,
    pending: Pending,
}

impl OrchestratorLink {
    /// Questions from `me` (the Connection's routing key) through `sender`.
    pub fn new(me: String, sender: mpsc::Sender<IpcMessage>) -> OrchestratorLink {
        OrchestratorLink {
            me,
            sender,
            pending: Arc::default(),
        }
    }

    /// Asks `query` and waits at most `timeout` for its answer.
    pub async fn ask(&self, query: Query, timeout: Duration) -> Result<QueryAnswer, LinkError> {
        let correlation_id = protocol::new_correlation_id();
        let (answer_tx, answer_rx) = oneshot::channel();
        self.waiting().insert(correlation_id.clone(), answer_tx);
        let message = RuntimeMessage::Query(QueryRequest {
            correlation_id: correlation_id.clone(),
            query,
        });
        if self
            .sender
            .send(message.to_message(&self.me, ORCHESTRATOR))
            .await
            .is_err()
        {
            self.waiting().remove(&correlation_id);
            return Err(LinkError::Gone);
        }
        match tokio::time::timeout(timeout, answer_rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(LinkError::Gone),
            Err(_) => {
                self.waiting().remove(&correlation_id);
                Err(LinkError::TimedOut(timeout))
            }
        }
    }

    /// Hands an answer to the question waiting for it; false when none
    /// waits (it timed out).
    pub fn answered(&self, in_reply_to: &str, answer: QueryAnswer) -> bool {
        match self.waiting().remove(in_reply_to) {
            Some(waiting) => waiting.send(answer).is_ok(),
            None => false,
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<QueryAnswer>>> {
        // Only inserts and removes happen under it; a panic cannot leave
        // the map half-changed.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_ipc::Inbound;

    #[tokio::test]
    async fn an_answer_finds_its_question_and_a_late_one_finds_none() {
        let (sender, mut wire) = mpsc::channel(4);
        let link = OrchestratorLink::new("@connection:tg".into(), sender);
        let asking = tokio::spawn({
            let link = link.clone();
            async move { link.ask(Query::List, Duration::from_secs(5)).await }
        });
        let message = wire.recv().await.unwrap();
        let Ok(Inbound::Runtime(RuntimeMessage::Query(request))) = protocol::decode(&message)
        else {
            panic!("not a query: {message:?}");
        };
        assert!(link.answered(&request.correlation_id, QueryAnswer::Decided));
        assert_eq!(asking.await.unwrap(), Ok(QueryAnswer::Decided));
        assert!(!link.answered(&request.correlation_id, QueryAnswer::Decided));

        let timed_out = link.ask(Query::List, Duration::from_millis(10)).await;
        assert_eq!(
            timed_out,
            Err(LinkError::TimedOut(Duration::from_millis(10)))
        );
        drop(wire);
        assert_eq!(
            link.ask(Query::List, Duration::from_secs(5)).await,
            Err(LinkError::Gone)
        );
    }
}
