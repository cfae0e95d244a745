//! [`OperatorDesk`]: the agent's side of asking a person
//! ([`goondan_runtime::operator`]). A question is written to the
//! instance's [`ApprovalLog`] (its `approvals.jsonl` on one host, its log
//! in a cluster) before its Turn waits; a decision arrives from the
//! orchestrator ([`goondan_ipc::protocol::Decide`]), is written there too,
//! and only then wakes the Turn and is answered as recorded.
//! A deadline is a wall-clock time in the request, so a timeout that
//! passed while no process ran applies as soon as the Turn resumes.
//!
//! Each request first asked here and each decision recorded here is also
//! told to the orchestrator ([`RuntimeMessage::ApprovalAsked`],
//! [`RuntimeMessage::ApprovalDecided`]), which passes it to the chat
//! connectors that post requests with buttons. Telling is best effort:
//! the file is the truth, and a connector that missed a notice is given
//! every undecided request when it starts.

use futures_util::future::BoxFuture;
use goondan_ipc::protocol::{ApprovalAsked, ApprovalDecided, Failure};
use goondan_ipc::{RuntimeMessage, ORCHESTRATOR};
use goondan_runtime::{AskError, Operators, Question};
use goondan_store::{ApprovalLog, Decided, OpenApproval, CANCELLED_BY};
use goondan_types::trace::random_hex;
use goondan_types::{ApprovalDecision, ApprovalRequest, IpcMessage, Verdict};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Who may decide a request asked here: whoever reaches the swarm's
/// control surfaces (the control socket, and what is built on it).
const DECIDERS: &str = "operator";

/// The code of a decision on a request the instance does not hold open.
pub const APPROVAL_NOT_FOUND: &str = "E_APPROVAL_NOT_FOUND";

/// The approvals of one instance, shared by its Turns and its IPC reader.
#[derive(Debug, Clone)]
pub struct OperatorDesk {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    agent: String,
    instance_key: String,
    store: Box<dyn ApprovalLog>,
    /// Turns waiting, by request id.
    waiting: Mutex<HashMap<String, oneshot::Sender<ApprovalDecision>>>,
    /// How many Turns wait now (the size of `waiting`), for the process
    /// loop: a Turn that only waits for a person may stop at a shutdown.
    parked: watch::Sender<usize>,
    /// The orchestrator, told of requests and decisions as they are
    /// recorded; `None` tells nobody.
    notices: Option<mpsc::Sender<IpcMessage>>,
}

impl OperatorDesk {
    /// The desk of `agent:instance_key` over its approvals, telling
    /// what it records through `notices` (the process's IPC sender).
    pub fn new(
        agent: &str,
        instance_key: &str,
        store: Box<dyn ApprovalLog>,
        notices: Option<mpsc::Sender<IpcMessage>>,
    ) -> OperatorDesk {
        OperatorDesk {
            inner: Arc::new(Inner {
                agent: agent.to_string(),
                instance_key: instance_key.to_string(),
                store,
                waiting: Mutex::new(HashMap::new()),
                parked: watch::Sender::new(0),
                notices,
            }),
        }
    }

    /// How many Turns of this instance wait for a person's decision now,
    /// and word of every change. Such a Turn holds nothing a process must
    /// finish (its question is recorded, the model's answer that asked for
    /// the call too), so the process may stop while it waits: the next one
    /// resumes the Turn at the same question.
    pub fn parked(&self) -> watch::Receiver<usize> {
        self.inner.parked.subscribe()
    }

    /// Records `decision` and wakes the Turn waiting on it; a failure
    /// (no open request has its id, or it was decided already, or the
    /// store failed) is what the decider is told.
    pub fn decide(&self, decision: ApprovalDecision) -> Result<(), Failure> {
        match self.inner.store.decide(&decision) {
            Ok(Decided::Recorded) => {
                tracing::info!(approval = %decision.id, verdict = decision.verdict.as_str(), by = %decision.by, "approval decided");
                self.inner.tell_decided(&decision);
                if let Some(waiter) = self.inner.stop_waiting(&decision.id) {
                    let _ = waiter.send(decision);
                }
                Ok(())
            }
            Ok(Decided::NotWaiting) => Err(Failure {
                code: APPROVAL_NOT_FOUND.into(),
                message: format!(
                    "{}:{} holds no undecided approval {}",
                    self.inner.agent, self.inner.instance_key, decision.id
                ),
                suggestion: None,
            }),
            Ok(Decided::Cancelled) => Err(closed_by_cancel(&decision.id)),
            Err(error) => Err(Failure {
                code: error.code().into(),
                message: error.to_string(),
                suggestion: None,
            }),
        }
    }

    /// Closes every open request asked while consuming `event_id`, whose
    /// Turn was cancelled (by `by`, when a person did): each is refused by
    /// [`CANCELLED_BY`] and closed, durably, and told as decided, so no
    /// list shows it and a decision on it is `E_APPROVAL_CLOSED`. A store
    /// that fails is logged: the request then stays listed, and deciding
    /// it wakes nothing.
    pub fn cancel_event(&self, event_id: &str, by: Option<&str>) {
        let open = match self.inner.store.of_event(event_id) {
            Ok(open) => open,
            Err(error) => {
                tracing::warn!(
                    code = error.code(),
                    event_id,
                    "the approvals of a cancelled Turn were not closed: {error}"
                );
                return;
            }
        };
        for open in open {
            let id = open.request.id;
            if open.decision.is_none() {
                let decision = ApprovalDecision {
                    id: id.clone(),
                    verdict: Verdict::Deny,
                    arguments: None,
                    reason: Some(match by {
                        Some(by) => format!("its Turn was cancelled by {by}"),
                        None => "its Turn was cancelled".into(),
                    }),
                    by: CANCELLED_BY.into(),
                    decided_at: goondan_types::now_iso(),
                };
                match self.inner.store.decide(&decision) {
                    Ok(Decided::Recorded) => self.inner.tell_decided(&decision),
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(code = error.code(), approval = %id, "a cancelled Turn's approval was not closed: {error}");
                        continue;
                    }
                }
            }
            match self.inner.store.close(&id) {
                Ok(()) => {
                    tracing::info!(approval = %id, event_id, "approval closed: its Turn was cancelled")
                }
                Err(error) => {
                    tracing::warn!(code = error.code(), approval = %id, "a cancelled Turn's approval was not closed: {error}")
                }
            }
            self.inner.stop_waiting(&id);
        }
    }
}

/// The refusal of a decision on `id`, closed when its Turn was
/// cancelled.
fn closed_by_cancel(id: &str) -> Failure {
    let body = goondan_store::closed_by_cancel(id);
    Failure {
        code: body.code,
        message: body.message,
        suggestion: body.suggestion,
    }
}

impl Inner {
    /// Tells the orchestrator `message`, without waiting: a full channel
    /// hands it to a task, so neither a Turn nor the IPC reader (which
    /// records decisions) blocks on it.
    fn tell(&self, message: RuntimeMessage) {
        let Some(sender) = &self.notices else {
            return;
        };
        let from = goondan_types::RoutingKey::new(&self.agent, &self.instance_key).to_string();
        let wire = message.to_message(&from, ORCHESTRATOR);
        if let Err(mpsc::error::TrySendError::Full(wire)) = sender.try_send(wire) {
            let sender = sender.clone();
            tokio::spawn(async move {
                let _ = sender.send(wire).await;
            });
        }
    }

    fn tell_decided(&self, decision: &ApprovalDecision) {
        self.tell(RuntimeMessage::ApprovalDecided(ApprovalDecided {
            decision: decision.clone(),
        }));
    }

    /// The open request about `key`.
    fn by_key(&self, key: &str) -> Result<Option<OpenApproval>, AskError> {
        self.store
            .by_key(key)
            .map_err(|error| AskError::Store(error.to_string()))
    }

    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, oneshot::Sender<ApprovalDecision>>> {
        // Only inserts and removes happen under it; a panic cannot leave
        // the map half-changed.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A Turn waits for the decision of `id`, woken through `wake`.
    fn start_waiting(&self, id: &str, wake: oneshot::Sender<ApprovalDecision>) {
        let mut waiting = self.waiting();
        waiting.insert(id.to_string(), wake);
        // Told under the lock, so the count never lags a change of the
        // map a decider made since.
        self.parked.send_replace(waiting.len());
    }

    /// The Turn waiting for `id` waits no more; its waker, if it was
    /// still there. The count drops before the decision is sent through
    /// the waker, so a Turn the loop sees parked has not been woken.
    fn stop_waiting(&self, id: &str) -> Option<oneshot::Sender<ApprovalDecision>> {
        let mut waiting = self.waiting();
        let waker = waiting.remove(id);
        self.parked.send_replace(waiting.len());
        waker
    }

    /// The open request about `question.key`, asked now if there is none.
    fn open_or_ask(
        &self,
        turn_id: &str,
        event_id: &str,
        question: &Question,
    ) -> Result<OpenApproval, AskError> {
        if let Some(open) = self.by_key(&question.key)? {
            return Ok(open);
        }
        let now = chrono::Utc::now();
        let deadline = question.timeout.map(|timeout| {
            (now + chrono::Duration::from_std(timeout).unwrap_or(chrono::Duration::MAX))
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        });
        let request = ApprovalRequest {
            id: format!("apv_{}", random_hex(8)),
            key: question.key.clone(),
            agent: self.agent.clone(),
            instance_key: self.instance_key.clone(),
            tool: question.tool.clone(),
            arguments: question.arguments.clone(),
            question: question.question.clone(),
            turn_id: turn_id.to_string(),
            event_id: event_id.to_string(),
            requested_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            deadline,
            on_timeout: question.on_timeout,
            deciders: vec![DECIDERS.to_string()],
        };
        self.store
            .request(&request)
            .map_err(|error| AskError::Store(error.to_string()))?;
        tracing::info!(approval = %request.id, tool = ?request.tool, "waiting for a person's decision");
        self.tell(RuntimeMessage::ApprovalAsked(ApprovalAsked {
            request: Box::new(request.clone()),
        }));
        Ok(OpenApproval {
            request,
            decision: None,
        })
    }

    /// The deadline's decision, recorded; a person's decision that won
    /// the race instead, if one did.
    fn time_out(&self, request: &ApprovalRequest) -> Result<ApprovalDecision, AskError> {
        let decision = ApprovalDecision {
            id: request.id.clone(),
            verdict: request.on_timeout,
            arguments: None,
            reason: Some(match request.on_timeout {
                Verdict::Approve => "approved by default: nobody decided in time".into(),
                Verdict::Deny => "nobody decided in time".into(),
            }),
            by: "timeout".into(),
            decided_at: goondan_types::now_iso(),
        };
        match self.store.decide(&decision) {
            Ok(Decided::Recorded) => {
                self.tell_decided(&decision);
                Ok(decision)
            }
            Ok(Decided::NotWaiting | Decided::Cancelled) => self
                .by_key(&request.key)?
                .and_then(|open| open.decision)
                .ok_or_else(|| AskError::Store(format!("approval {} vanished", request.id))),
            Err(error) => Err(AskError::Store(error.to_string())),
        }
    }
}

/// How long until `deadline` (RFC 3339); zero when it passed, `None` for
/// no deadline (or one that does not parse, which never came from here).
fn remaining(deadline: Option<&str>) -> Option<Duration> {
    let deadline = chrono::DateTime::parse_from_rfc3339(deadline?).ok()?;
    let left = deadline.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(left.to_std().unwrap_or(Duration::ZERO))
}

/// A Turn waiting for the decision of `id`, until dropped.
struct Waiting {
    inner: Arc<Inner>,
    id: String,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.inner.stop_waiting(&self.id);
    }
}

impl Operators for OperatorDesk {
    fn ask(
        &self,
        turn_id: &str,
        event_id: &str,
        question: Question,
    ) -> BoxFuture<'static, Result<ApprovalDecision, AskError>> {
        let inner = Arc::clone(&self.inner);
        let opened = inner.open_or_ask(turn_id, event_id, &question);
        Box::pin(async move {
            let open = opened?;
            if let Some(decision) = open.decision {
                return Ok(decision);
            }
            let (wake, decided) = oneshot::channel();
            inner.start_waiting(&open.request.id, wake);
            // However this future ends (answered, or dropped with its Turn
            // by a cancel), the Turn waits no more.
            let _waiting = Waiting {
                inner: Arc::clone(&inner),
                id: open.request.id.clone(),
            };
            // Decided between the read above and the insert: the reader
            // found no waiter, so look again.
            let meanwhile = inner
                .by_key(&question.key)
                .map(|open| open.and_then(|open| open.decision));
            match meanwhile {
                Ok(None) => {}
                Ok(Some(decision)) => return Ok(decision),
                Err(error) => return Err(error),
            }
            let outcome = match remaining(open.request.deadline.as_deref()) {
                Some(left) => match tokio::time::timeout(left, decided).await {
                    Ok(Ok(decision)) => Ok(decision),
                    Ok(Err(_)) => Err(AskError::Store("the decision was lost".into())),
                    Err(_elapsed) => inner.time_out(&open.request),
                },
                None => decided
                    .await
                    .map_err(|_| AskError::Store("the decision was lost".into())),
            };
            outcome
        })
    }

    fn holds(&self, call_id: &str) -> bool {
        match self.inner.store.about_call(call_id) {
            Ok(held) => held,
            // The store is gone (a cluster log taken over by another
            // host): this process can record nothing, so the call it
            // would resume cannot run here either.
            Err(error) => {
                tracing::warn!(code = error.code(), "approvals unreadable: {error}");
                false
            }
        }
    }

    fn settle(&self, key: &str) -> Result<(), AskError> {
        let Some(open) = self.inner.by_key(key)? else {
            return Ok(());
        };
        self.inner
            .store
            .close(&open.request.id)
            .map_err(|error| AskError::Store(error.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_store::{ApprovalStore, InstancePaths, SyncPolicy};
    use serde_json::json;

    fn desk(dir: &std::path::Path) -> OperatorDesk {
        let store =
            ApprovalStore::open(&InstancePaths::from_dir(dir), SyncPolicy::ProcessCrash).unwrap();
        OperatorDesk::new("coder", "default", Box::new(store), None)
    }

    /// What a desk told the orchestrator so far.
    fn notices_of(notices: &mut mpsc::Receiver<IpcMessage>) -> Vec<RuntimeMessage> {
        let mut told = Vec::new();
        while let Ok(message) = notices.try_recv() {
            assert_eq!(message.from, "coder:default");
            assert_eq!(message.to, ORCHESTRATOR);
            match goondan_ipc::protocol::decode(&message).unwrap() {
                goondan_ipc::Inbound::Runtime(runtime) => told.push(runtime),
                other => panic!("not a runtime message: {other:?}"),
            }
        }
        told
    }

    #[tokio::test]
    async fn a_request_is_told_once_and_each_recorded_decision_once() {
        let dir = tempfile::tempdir().unwrap();
        let (sender, mut notices) = mpsc::channel(16);
        let store = ApprovalStore::open(
            &InstancePaths::from_dir(dir.path()),
            SyncPolicy::ProcessCrash,
        )
        .unwrap();
        let telling = OperatorDesk::new("coder", "default", Box::new(store), Some(sender));
        let waiting = tokio::spawn(telling.ask("turn_1", "evt_1", question("call_1", None)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        let told = notices_of(&mut notices);
        let [RuntimeMessage::ApprovalAsked(asked)] = told.as_slice() else {
            panic!("told {told:?}");
        };
        assert_eq!(asked.request.tool.as_deref(), Some("bash__exec"));
        let id = asked.request.id.clone();
        telling.decide(approve(&id)).unwrap();
        assert!(telling.decide(approve(&id)).is_err());
        waiting.await.unwrap().unwrap();
        let told = notices_of(&mut notices);
        let [RuntimeMessage::ApprovalDecided(decided)] = told.as_slice() else {
            panic!("told {told:?}");
        };
        assert_eq!(decided.decision.by, "cli:test");
        // Asked again by a resumed Turn: found, not told again.
        telling
            .ask("turn_1", "evt_1", question("call_1", None))
            .await
            .unwrap();
        assert!(notices_of(&mut notices).is_empty());
        // A deadline's decision is told too.
        let timed_out = telling
            .ask(
                "turn_2",
                "evt_2",
                question("call_2", Some(Duration::from_millis(20))),
            )
            .await
            .unwrap();
        let told = notices_of(&mut notices);
        assert!(
            matches!(told.as_slice(), [RuntimeMessage::ApprovalAsked(_), RuntimeMessage::ApprovalDecided(d)] if d.decision == timed_out),
            "{told:?}"
        );
    }

    fn question(key: &str, timeout: Option<Duration>) -> Question {
        Question {
            key: key.into(),
            tool: Some("bash__exec".into()),
            arguments: json!({"command": "ls"}),
            question: None,
            timeout,
            on_timeout: Verdict::Deny,
        }
    }

    fn approve(id: &str) -> ApprovalDecision {
        ApprovalDecision {
            id: id.into(),
            verdict: Verdict::Approve,
            arguments: Some(json!({"command": "ls -l"})),
            reason: None,
            by: "cli:test".into(),
            decided_at: goondan_types::now_iso(),
        }
    }

    #[tokio::test]
    async fn a_decision_wakes_the_turn_and_a_second_desk_finds_the_question() {
        let dir = tempfile::tempdir().unwrap();
        let first = desk(dir.path());
        let waiting = tokio::spawn(first.ask("turn_1", "evt_1", question("call_1", None)));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(first.holds("call_1"));
        // A process started after a crash sees the same request.
        let second = desk(dir.path());
        let id = second
            .inner
            .store
            .by_key("call_1")
            .unwrap()
            .unwrap()
            .request
            .id;
        assert_eq!(
            second.decide(approve("apv_nope")).unwrap_err().code,
            APPROVAL_NOT_FOUND
        );
        first.decide(approve(&id)).unwrap();
        let decision = waiting.await.unwrap().unwrap();
        assert_eq!(decision.arguments, Some(json!({"command": "ls -l"})));
        // Decided once only.
        assert_eq!(
            first.decide(approve(&id)).unwrap_err().code,
            APPROVAL_NOT_FOUND
        );
        // Asked again (a resumed Turn): the decision, at once.
        let again = desk(dir.path())
            .ask("turn_1", "evt_1", question("call_1", None))
            .await
            .unwrap();
        assert_eq!(again.verdict, Verdict::Approve);
        first.settle("call_1").unwrap();
        assert!(!desk(dir.path()).holds("call_1"));
    }

    #[tokio::test]
    async fn a_cancelled_turns_requests_are_refused_closed_and_told() {
        let dir = tempfile::tempdir().unwrap();
        let (sender, mut notices) = mpsc::channel(16);
        let store = ApprovalStore::open(
            &InstancePaths::from_dir(dir.path()),
            SyncPolicy::ProcessCrash,
        )
        .unwrap();
        let desk = OperatorDesk::new("coder", "default", Box::new(store), Some(sender));
        let cancelled = tokio::spawn(desk.ask("turn_1", "evt_1", question("call_1", None)));
        let other = tokio::spawn(desk.ask("turn_2", "evt_2", question("call_2", None)));
        let mut parked = desk.parked();
        parked.wait_for(|count| *count == 2).await.unwrap();
        let id = |key| desk.inner.store.by_key(key).unwrap().unwrap().request.id;
        let (first, second) = (id("call_1"), id("call_2"));
        cancelled.abort();
        notices_of(&mut notices);

        desk.cancel_event("evt_1", Some("cli:ana"));
        let told = notices_of(&mut notices);
        let [RuntimeMessage::ApprovalDecided(decided)] = told.as_slice() else {
            panic!("told {told:?}");
        };
        assert_eq!(decided.decision.by, CANCELLED_BY);
        assert_eq!(decided.decision.verdict, Verdict::Deny);
        assert_eq!(
            decided.decision.reason.as_deref(),
            Some("its Turn was cancelled by cli:ana")
        );
        assert!(!desk.holds("call_1"), "the request stayed open");
        let late = desk.decide(approve(&first)).unwrap_err();
        assert_eq!(late.code, "E_APPROVAL_CLOSED");
        assert!(late.suggestion.is_some());
        // So does a process started afterwards.
        assert_eq!(
            self::desk(dir.path())
                .decide(approve(&first))
                .unwrap_err()
                .code,
            "E_APPROVAL_CLOSED"
        );
        // Another input's request still waits, and its decision wakes it.
        desk.decide(approve(&second)).unwrap();
        assert_eq!(other.await.unwrap().unwrap().verdict, Verdict::Approve);
        notices_of(&mut notices);
        // Nothing open: a cancel closes nothing and tells nothing.
        desk.cancel_event("evt_9", None);
        assert!(notices_of(&mut notices).is_empty());
    }

    #[tokio::test]
    async fn the_parked_count_follows_waiting_turns_however_they_end() {
        let dir = tempfile::tempdir().unwrap();
        let desk = desk(dir.path());
        let mut parked = desk.parked();
        assert_eq!(*parked.borrow_and_update(), 0);
        // Decided: parked while it waits, not once woken.
        let waiting = tokio::spawn(desk.ask("turn_1", "evt_1", question("call_1", None)));
        parked.wait_for(|count| *count == 1).await.unwrap();
        let id = desk
            .inner
            .store
            .by_key("call_1")
            .unwrap()
            .unwrap()
            .request
            .id;
        desk.decide(approve(&id)).unwrap();
        assert_eq!(*parked.borrow(), 0);
        waiting.await.unwrap().unwrap();
        // Dropped with its Turn (a cancel): not parked any more either.
        let waiting = tokio::spawn(desk.ask("turn_2", "evt_2", question("call_2", None)));
        parked.wait_for(|count| *count == 1).await.unwrap();
        waiting.abort();
        parked.wait_for(|count| *count == 0).await.unwrap();
    }

    #[tokio::test]
    async fn the_deadline_decides_and_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let decision = desk(dir.path())
            .ask(
                "turn_1",
                "evt_1",
                question("call_1", Some(Duration::from_millis(50))),
            )
            .await
            .unwrap();
        assert_eq!(decision.verdict, Verdict::Deny);
        assert_eq!(decision.by, "timeout");
        let recorded = desk(dir.path())
            .inner
            .store
            .by_key("call_1")
            .unwrap()
            .unwrap();
        assert_eq!(recorded.decision, Some(decision));
    }
}
