//! A Turn's reports as a server-sent event stream, or gathered into one
//! answer. Each route says how its reports look on the wire ([`Frames`]);
//! this module owns reading them. The reports come from a
//! [`DetachedTurn`](crate::turn::DetachedTurn), so a client that drops
//! the stream leaves the Turn to finish.

use crate::swarm::{TurnAnswer, TurnFailure, TurnUpdate};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::VecDeque;
use std::convert::Infallible;
use tokio::sync::mpsc;

/// How one route writes a Turn's reports as events.
pub(crate) trait Frames: Send + 'static {
    /// What goes first, before the Turn reports anything.
    fn opening(&mut self) -> Vec<Event>;
    /// More of the answer.
    fn text(&mut self, delta: &str) -> Vec<Event>;
    /// The end, an answer or a failure; nothing follows.
    fn finished(&mut self, result: Result<TurnAnswer, TurnFailure>) -> Vec<Event>;
}

/// The failure of a Turn whose reports stopped without an end.
pub(crate) fn lost() -> TurnFailure {
    TurnFailure::new(
        "E_SERVE_TURN_LOST",
        "the swarm stopped reporting before the Turn ended",
    )
    .with_suggestion("see `gdn logs` for the agent; the Turn may still have committed")
}

/// The Turn's end, its text deltas skipped.
pub(crate) async fn gather(
    mut updates: mpsc::Receiver<TurnUpdate>,
) -> Result<TurnAnswer, TurnFailure> {
    while let Some(update) = updates.recv().await {
        if let TurnUpdate::Finished(result) = update {
            return result;
        }
    }
    Err(lost())
}

/// The Turn's reports as an event stream written by `frames`.
pub(crate) fn respond(updates: mpsc::Receiver<TurnUpdate>, mut frames: impl Frames) -> Response {
    struct Reading<F> {
        updates: mpsc::Receiver<TurnUpdate>,
        frames: F,
        ready: VecDeque<Event>,
        ended: bool,
    }
    let ready = frames.opening().into();
    let reading = Reading {
        updates,
        frames,
        ready,
        ended: false,
    };
    let events = futures_util::stream::unfold(reading, |mut reading| async move {
        loop {
            if let Some(event) = reading.ready.pop_front() {
                return Some((Ok::<Event, Infallible>(event), reading));
            }
            if reading.ended {
                return None;
            }
            let events = match reading.updates.recv().await {
                Some(TurnUpdate::Text(delta)) => reading.frames.text(&delta),
                Some(TurnUpdate::Finished(result)) => {
                    reading.ended = true;
                    reading.frames.finished(result)
                }
                None => {
                    reading.ended = true;
                    reading.frames.finished(Err(lost()))
                }
            };
            reading.ready.extend(events);
        }
    });
    // Comments keep a proxy from closing a stream while a long Turn runs
    // a tool; clients skip them.
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
