//! Fork, rewind and edit asked over the control socket (`gdn instance
//! fork|rewind|edit` while a swarm runs, and the Studio's Fork, Rewind
//! and Edit): one path for every surface that reaches a running
//! orchestrator.
//!
//! Each runs in three steps: the store checks the request without the
//! lock (so a wrong Turn or a taken key stops no process), the
//! orchestrator holds the instances (cancelling their running Turns first
//! when asked; otherwise a running Turn refuses with `E_TURN_RUNNING`),
//! and the store rewrites them under their single-writer lock; the hold
//! is let go of, whatever the rewrite did. The orchestrator still does not
//! know what a Turn holds: the cutting is `goondan_store`'s
//! ([`InstanceStore::fork`], [`InstanceStore::rewind`],
//! [`InstanceStore::edit_message`]), run off the async threads.

use super::{ControlResponse, EditChange, CANCEL_SETTLE};
use crate::orchestrator::{CancelledTurn, Rewriter};
use crate::{OrchestratorError, OrchestratorHandle};
use goondan_ipc::RoutingKey;
use goondan_store::{InstanceStore, StoreError, TurnRef};

/// Whom a fork, a rewind or an edit was asked of, and how.
pub(super) struct Asked {
    /// The instance rewritten (or forked from).
    pub(super) key: RoutingKey,
    /// Who asks, recorded with what is done.
    pub(super) by: String,
    /// Cancel a running Turn first.
    pub(super) cancel: bool,
}

/// Serves a [`super::ControlRequest::Fork`]: `new_key`, or a made-up
/// key, becomes a copy of `asked.key` up to the end of Turn `turn` (a
/// position or an id, as typed).
pub(super) async fn fork(
    handle: &OrchestratorHandle,
    instances: &InstanceStore,
    asked: Asked,
    turn: &str,
    new_key: Option<String>,
) -> Result<ControlResponse, OrchestratorError> {
    let key = asked.key.clone();
    let new_key = new_key.unwrap_or_else(|| goondan_store::fork_key(&key.instance_key));
    OrchestratorError::check_instance_key(&new_key)?;
    let turn = TurnRef::parse(turn);
    let held = vec![
        key.to_string(),
        RoutingKey::new(key.agent_name.clone(), new_key.clone()).to_string(),
    ];
    let check = {
        let (key, turn, new_key) = (key.clone(), turn.clone(), new_key.clone());
        move |store: &InstanceStore| {
            store.check_rewrite(&key.agent_name, &key.instance_key, &turn, Some(&new_key))
        }
    };
    let by = asked.by.clone();
    let work = move |store: &InstanceStore| {
        store.fork(&key.agent_name, &key.instance_key, &turn, &new_key, &by)
    };
    let (report, cancelled) = rewrite(handle, instances, &asked, held, check, work).await?;
    Ok(ControlResponse::Forked { report, cancelled })
}

/// Serves a [`super::ControlRequest::Rewind`]: `asked.key` moves back to
/// the end of Turn `turn`.
pub(super) async fn rewind(
    handle: &OrchestratorHandle,
    instances: &InstanceStore,
    asked: Asked,
    turn: &str,
) -> Result<ControlResponse, OrchestratorError> {
    let key = asked.key.clone();
    let turn = TurnRef::parse(turn);
    let held = vec![key.to_string()];
    let check = {
        let (key, turn) = (key.clone(), turn.clone());
        move |store: &InstanceStore| {
            store.check_rewrite(&key.agent_name, &key.instance_key, &turn, None)
        }
    };
    let by = asked.by.clone();
    let work =
        move |store: &InstanceStore| store.rewind(&key.agent_name, &key.instance_key, &turn, &by);
    let (report, cancelled) = rewrite(handle, instances, &asked, held, check, work).await?;
    Ok(ControlResponse::Rewound { report, cancelled })
}

/// Serves a [`super::ControlRequest::Edit`]: one message or extension
/// state of `asked.key` changes ([`InstanceStore::edit_message`],
/// [`InstanceStore::edit_extension_state`]).
pub(super) async fn edit(
    handle: &OrchestratorHandle,
    instances: &InstanceStore,
    asked: Asked,
    change: EditChange,
) -> Result<ControlResponse, OrchestratorError> {
    let key = asked.key.clone();
    let held = vec![key.to_string()];
    let check = {
        let key = key.clone();
        move |store: &InstanceStore| store.check_edit(&key.agent_name, &key.instance_key)
    };
    let by = asked.by.clone();
    let work = move |store: &InstanceStore| match &change {
        EditChange::Message { message_id, text } => {
            store.edit_message(&key.agent_name, &key.instance_key, message_id, text, &by)
        }
        EditChange::ExtensionState { extension, state } => {
            store.edit_extension_state(&key.agent_name, &key.instance_key, extension, state, &by)
        }
    };
    let (report, cancelled) = rewrite(handle, instances, &asked, held, check, work).await?;
    Ok(ControlResponse::Edited { report, cancelled })
}

/// The three steps (see the module docs): `check` without the lock,
/// then `work` once `held` is held; the Turns cancelled for the hold come
/// back with its outcome.
async fn rewrite<T: Send + 'static>(
    handle: &OrchestratorHandle,
    instances: &InstanceStore,
    asked: &Asked,
    held: Vec<String>,
    check: impl FnOnce(&InstanceStore) -> Result<(), StoreError> + Send + 'static,
    work: impl FnOnce(&InstanceStore) -> Result<T, StoreError> + Send + 'static,
) -> Result<(T, Vec<CancelledTurn>), OrchestratorError> {
    let store = instances.clone();
    settle(tokio::task::spawn_blocking(move || check(&store)).await)?;
    let cancel_as = asked.cancel.then(|| asked.by.clone());
    let cancelled = handle
        .cancel_and_hold(held.clone(), cancel_as, CANCEL_SETTLE, Rewriter::HostFiles)
        .await?
        .cancelled;
    let store = instances.clone();
    let rewritten = tokio::task::spawn_blocking(move || work(&store)).await;
    // Let go of first, so a panic in the store leaves no instance held.
    let _ = handle.release(held).await;
    let report = settle(rewritten)?;
    Ok((report, cancelled))
}

/// The outcome of store work run on the blocking pool; a panic there is
/// a bug, and is raised again here.
fn settle<T>(
    outcome: Result<Result<T, StoreError>, tokio::task::JoinError>,
) -> Result<T, OrchestratorError> {
    match outcome {
        Ok(done) => done.map_err(OrchestratorError::Rewrite),
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_) => Err(OrchestratorError::Stopped),
    }
}

#[cfg(test)]
mod tests {
    //! Fork, rewind and deliver over a real control socket, in front of
    //! the main loop driven by the orchestrator's test [`Harness`], on a
    //! real store in a temporary folder.

    use super::super::{
        call, ControlIdentity, ControlRequest, ControlResponse, ControlServer, EditChange,
    };
    use crate::orchestrator::tests::{harness, Harness};
    use crate::orchestrator::CancelledTurn;
    use goondan_ipc::protocol::{self, Inbound};
    use goondan_ipc::RuntimeMessage;
    use goondan_store::{InstanceStore, StateRoot, TurnJournal, TurnRef};
    use goondan_types::{
        ConnectorEvent, ContentPart, EventSourceKind, Message, MessageEvent, MessageSource,
        ModelMessage,
    };
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    /// Commits `n_turns` Turns (`question N`, `answer N`) to `alpha:<key>`.
    fn seed(store: &InstanceStore, key: &str, n_turns: usize) {
        let mut instance = store.open("alpha", key).unwrap();
        for n in 1..=n_turns {
            let base = instance.journal_mut().load().unwrap().base;
            let turn_id = format!("turn_{n}");
            let mut input = Message::new(
                ModelMessage::user(format!("question {n}")),
                MessageSource::User,
            );
            for (name, value) in [
                ("__goondanInbound", serde_json::json!(true)),
                ("eventId", serde_json::json!(format!("evt_{n}"))),
                ("turnId", serde_json::json!(turn_id)),
            ] {
                input.metadata.insert(name.into(), value);
            }
            let answer = Message::new(
                ModelMessage::assistant(vec![ContentPart::text(format!("answer {n}"))]),
                MessageSource::Assistant {
                    step_id: "s".into(),
                },
            );
            let new = [input, answer];
            let events: Vec<MessageEvent> = new
                .iter()
                .map(|message| MessageEvent::Append {
                    message: message.clone(),
                })
                .collect();
            let next: Vec<Message> = base.into_iter().chain(new).collect();
            instance
                .journal_mut()
                .commit_turn(&turn_id, &events, &next, &Default::default())
                .unwrap();
        }
    }

    fn n_turns(store: &InstanceStore, key: &str) -> usize {
        store
            .history("alpha", key, Default::default())
            .unwrap()
            .turns
            .len()
    }

    /// Serves the control socket of `h`'s orchestrator over `store`; the
    /// socket's path.
    async fn serve(h: &Harness, dir: &Path, store: &InstanceStore) -> PathBuf {
        let socket = dir.join("control.sock");
        let server =
            ControlServer::bind(socket.clone(), ControlIdentity::default(), store.clone()).unwrap();
        tokio::spawn(server.run(h.handle.clone(), std::future::pending()));
        socket
    }

    fn fork(key: &str, at: &str, new_key: Option<&str>, cancel: bool) -> ControlRequest {
        ControlRequest::Fork {
            key: key.into(),
            at: at.into(),
            new_key: new_key.map(str::to_string),
            by: "tester".into(),
            cancel,
        }
    }

    fn rewind(key: &str, to: &str, cancel: bool) -> ControlRequest {
        ControlRequest::Rewind {
            key: key.into(),
            to: to.into(),
            by: "tester".into(),
            cancel,
        }
    }

    /// The code of a refusal, which must come with a suggestion.
    async fn refusal(socket: &Path, request: &ControlRequest) -> String {
        match call(socket, request).await.unwrap() {
            ControlResponse::Failed(body) => {
                assert!(body.suggestion.is_some(), "{body:?}");
                body.code
            }
            other => panic!("{request:?} was not refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_fork_and_a_rewind_over_the_socket_rewrite_the_store_and_record_who_asked() {
        let dir = tempfile::tempdir().unwrap();
        let store = InstanceStore::new(StateRoot::new(dir.path()).workspace("main"));
        seed(&store, "main", 3);
        let h = harness(8);
        let socket = serve(&h, dir.path(), &store).await;

        let answer = call(&socket, &fork("alpha:main", "1", Some("copy"), false))
            .await
            .unwrap();
        let ControlResponse::Forked { report, cancelled } = answer else {
            panic!("not forked: {answer:?}");
        };
        assert_eq!((report.at.turn_index, cancelled.len()), (1, 0));
        assert_eq!((n_turns(&store, "copy"), n_turns(&store, "main")), (1, 3));
        let metadata: serde_json::Value =
            serde_json::from_slice(&std::fs::read(report.dir.join("metadata.json")).unwrap())
                .unwrap();
        assert_eq!(metadata["forkedFrom"]["by"], "tester");
        // Without a new key, one is made up.
        let answer = call(&socket, &fork("alpha:main", "turn_2", None, false))
            .await
            .unwrap();
        let ControlResponse::Forked { report, .. } = answer else {
            panic!("not forked: {answer:?}");
        };
        assert!(report.instance_key.starts_with("main-fork-"), "{report:?}");
        assert_eq!(n_turns(&store, &report.instance_key), 2);

        let answer = call(&socket, &rewind("alpha:main", "1", false))
            .await
            .unwrap();
        let ControlResponse::Rewound { report, .. } = answer else {
            panic!("not rewound: {answer:?}");
        };
        assert_eq!(report.archive.map(|archive| archive.n_turns), Some(2));
        assert_eq!(n_turns(&store, "main"), 1);
        let archived = store.archived_history("alpha", "main").unwrap();
        assert_eq!(archived[0].manifest.by, "tester");

        // Bad requests are refused with codes, and change nothing.
        for (request, code) in [
            (
                fork("alpha:main", "9", Some("other"), false),
                "E_TURN_NOT_FOUND",
            ),
            (
                fork("alpha:main", "1", Some("copy"), false),
                "E_INSTANCE_EXISTS",
            ),
            (
                rewind("alpha:ghost", "1", false),
                "E_STORE_INSTANCE_NOT_FOUND",
            ),
        ] {
            assert_eq!(refusal(&socket, &request).await, code, "{request:?}");
        }
        let answer = call(&socket, &rewind("main", "1", false)).await.unwrap();
        assert!(
            matches!(&answer, ControlResponse::Failed(body) if body.code == "E_IPC_ROUTING_KEY"),
            "{answer:?}"
        );
        assert_eq!(n_turns(&store, "main"), 1);
        assert!(!store.workspace().instance("alpha", "other").dir().exists());
    }

    #[tokio::test]
    async fn a_running_turn_refuses_a_rewrite_unless_cancelled_first_and_a_wrong_turn_stops_nothing(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = InstanceStore::new(StateRoot::new(dir.path()).workspace("main"));
        seed(&store, "main", 2);
        let mut h = harness(8);
        let socket = serve(&h, dir.path(), &store).await;
        let asked = h.ask("third");
        let link = h.next_ready_process().await;
        let (_, event) = h.next_event().await;

        // Checked before anything is held: the process is not stopped.
        let request = fork("alpha:main", "9", Some("new"), false);
        assert_eq!(refusal(&socket, &request).await, "E_TURN_NOT_FOUND");
        // The Turn runs: refused without `cancel`.
        for request in [
            rewind("alpha:main", "1", false),
            fork("alpha:main", "1", Some("new"), false),
        ] {
            assert_eq!(refusal(&socket, &request).await, "E_TURN_RUNNING");
        }
        while let Ok((to, message)) = h.sent.try_recv() {
            assert!(
                !(to == link && matches!(protocol::decode(&message), Ok(Inbound::Shutdown(_)))),
                "a refused rewrite stopped the process"
            );
        }
        assert_eq!(n_turns(&store, "main"), 2);
        assert!(!store.workspace().instance("alpha", "new").dir().exists());

        // With `cancel`: the Turn is cancelled in the asker's name, the
        // process stopped once it is over, then the instance rewound.
        let rewinding = tokio::spawn({
            let socket = socket.clone();
            async move { call(&socket, &rewind("alpha:main", "1", true)).await }
        });
        let (to, cancel) = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let (to, message) = h.sent.recv().await.unwrap();
                if let Ok(Inbound::Runtime(RuntimeMessage::Cancel(cancel))) =
                    protocol::decode(&message)
                {
                    return (to, cancel);
                }
            }
        })
        .await
        .expect("no runtime.cancel reached the process");
        assert_eq!((to, cancel.event_id), (link.clone(), event.id.clone()));
        assert_eq!(cancel.cancelled_by.as_deref(), Some("tester"));
        h.answer(&link, &event, "stopped").await;
        h.next_shutdown_to(&link).await;
        h.end_process(0, &link, Some(0)).await;
        let answer = rewinding.await.unwrap().unwrap();
        let ControlResponse::Rewound { report, cancelled } = answer else {
            panic!("not rewound: {answer:?}");
        };
        assert_eq!(
            cancelled,
            [CancelledTurn {
                key: "alpha:main".into(),
                event_id: event.id.clone(),
            }]
        );
        assert_eq!(report.to.turn_index, 1);
        assert_eq!(n_turns(&store, "main"), 1);
        assert!(asked.await.unwrap().is_ok());
        assert!(store
            .check_rewrite("alpha", "main", &TurnRef::parse("1"), None)
            .is_ok());
    }

    fn edit(key: &str, change: EditChange) -> ControlRequest {
        ControlRequest::Edit {
            key: key.into(),
            change,
            by: "tester".into(),
            cancel: false,
        }
    }

    #[tokio::test]
    async fn an_edit_over_the_socket_changes_one_message_or_state_and_records_who_asked() {
        let dir = tempfile::tempdir().unwrap();
        let store = InstanceStore::new(StateRoot::new(dir.path()).workspace("main"));
        seed(&store, "main", 2);
        let h = harness(8);
        let socket = serve(&h, dir.path(), &store).await;
        let base = || {
            store
                .open("alpha", "main")
                .unwrap()
                .journal_mut()
                .load()
                .unwrap()
                .base
        };
        let question = base()[2].id.clone();

        let change = EditChange::Message {
            message_id: question.clone(),
            text: "question two, edited".into(),
        };
        let answer = call(&socket, &edit("alpha:main", change)).await.unwrap();
        let ControlResponse::Edited { report, cancelled } = answer else {
            panic!("not edited: {answer:?}");
        };
        assert!(cancelled.is_empty());
        assert_eq!(report.record.by, "tester");
        let messages = base();
        assert_eq!(messages[2].id, question);
        assert_eq!(messages[2].data.text(), "question two, edited");
        assert_eq!(n_turns(&store, "main"), 2);

        let change = EditChange::ExtensionState {
            extension: "memory".into(),
            state: serde_json::json!({"facts": ["edited"]}),
        };
        let answer = call(&socket, &edit("alpha:main", change)).await.unwrap();
        assert!(
            matches!(answer, ControlResponse::Edited { .. }),
            "{answer:?}"
        );
        let paths = store.workspace().instance("alpha", "main");
        let state: serde_json::Value =
            serde_json::from_slice(&std::fs::read(paths.extension_state_file("memory")).unwrap())
                .unwrap();
        assert_eq!(state["facts"][0], "edited");

        for (request, code) in [
            (
                edit(
                    "alpha:main",
                    EditChange::Message {
                        message_id: "msg_unknown".into(),
                        text: "x".into(),
                    },
                ),
                "E_MESSAGE_NOT_FOUND",
            ),
            (
                edit(
                    "alpha:ghost",
                    EditChange::Message {
                        message_id: question.clone(),
                        text: "x".into(),
                    },
                ),
                "E_STORE_INSTANCE_NOT_FOUND",
            ),
            (
                edit(
                    "alpha:main",
                    EditChange::ExtensionState {
                        extension: "../../escape".into(),
                        state: serde_json::json!({}),
                    },
                ),
                "E_INSTANCE_EDIT_REFUSED",
            ),
        ] {
            assert_eq!(refusal(&socket, &request).await, code, "{request:?}");
        }
        assert_eq!(store.edits("alpha", "main").unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_delivered_input_reaches_exactly_its_instance_as_its_senders() {
        let dir = tempfile::tempdir().unwrap();
        let store = InstanceStore::new(StateRoot::new(dir.path()).workspace("main"));
        let mut h = harness(8);
        let socket = serve(&h, dir.path(), &store).await;
        let delivering = tokio::spawn({
            let socket = socket.clone();
            async move {
                let request = ControlRequest::Deliver {
                    key: "beta:side".into(),
                    event: ConnectorEvent::text("stdin_message", "hi"),
                    source: "studio".into(),
                };
                call(&socket, &request).await
            }
        });
        let link = h.next_ready_process().await;
        let (_, event) = h.next_event().await;
        assert_eq!(link.key.to_string(), "beta:side");
        assert_eq!(event.instance_key.as_deref(), Some("side"));
        assert_eq!(
            (event.source.kind, event.source.name.as_str()),
            (EventSourceKind::Connector, "studio")
        );
        assert_eq!(event.input.as_deref(), Some("hi"));
        h.answer(&link, &event, "hello").await;
        let answer = tokio::time::timeout(Duration::from_secs(5), delivering)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            matches!(answer, ControlResponse::Answer { .. }),
            "{answer:?}"
        );
    }
}
