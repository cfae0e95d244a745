//! Retries of the `/v1` routes that find their first request's Turn
//! instead of starting another.
//!
//! A request carrying `Idempotency-Key` claims the key for its route
//! ([`Retries::claim`]): the first claim starts the Turn and keeps what it
//! reports ([`SharedTurn`]); a claim with the same key and the same body
//! within [`Retries`]' window follows that Turn: its answer at once when
//! it ended, or its text so far and then the rest while it runs. A client
//! that leaves such a request does not cancel its Turn, since its retry
//! is expected. The same key with another body is refused
//! (`E_SERVE_IDEMPOTENCY_KEY_REUSED`), and a first request the swarm
//! refused (a full queue) forgets its key, so the retry tries again.
//!
//! Without the header, a non-streamed request whose client left before
//! the answer cancels its Turn ([`CancelOnLeave`]): a retry by a client
//! that timed out (the `openai` packages retry twice by default) then
//! never leaves a second Turn running beside the first.
//!
//! What is kept lives in the server's memory: a restarted `gdn serve`
//! forgets every key.

use super::error::ApiError;
use crate::recent::Recent;
use crate::swarm::{TurnAnswer, TurnFailure, TurnUpdate};
use crate::turn::Canceller;
use aws_lc_rs::digest::{digest, SHA256};
use axum::http::HeaderMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// The header a client names a request's retries by (Stripe's and
/// OpenAI's spelling; header names are case-insensitive).
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// The longest key taken.
const MAX_KEY_CHARS: usize = 255;

/// How many reports wait for a slow follower.
const BUFFERED_UPDATES: usize = 64;

/// The key the request's `Idempotency-Key` header names, if it has one:
/// 1 to [`MAX_KEY_CHARS`] visible ASCII characters.
pub(crate) fn key_of(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_HEADER) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key)
            if !key.is_empty()
                && key.len() <= MAX_KEY_CHARS
                && key.bytes().all(|byte| byte.is_ascii_graphic()) =>
        {
            Ok(Some(key.to_string()))
        }
        _ => Err(ApiError::BadIdempotencyKey { max: MAX_KEY_CHARS }),
    }
}

/// The keys of recent requests and their Turns.
pub(crate) struct Retries {
    turns: Recent<(&'static str, String), Arc<SharedTurn>>,
    window: Duration,
}

/// What a claim of a key found.
pub(crate) enum Claim {
    /// Nobody had claimed it (within the window): this request starts the
    /// Turn, and reports it through [`SharedTurn::pump`] or
    /// [`SharedTurn::refused`].
    First(Arc<SharedTurn>),
    /// A request with the same key and body claimed it: follow its Turn.
    Retry(Arc<SharedTurn>),
}

impl Retries {
    /// Remembers at most `max` keys, each for `window`.
    pub(crate) fn new(max: usize, window: Duration) -> Retries {
        Retries {
            turns: Recent::new(max),
            window,
        }
    }

    /// Claims `key` on `route` for a request whose body is `body`; a new
    /// claim's Turn answers with the object id `id`.
    pub(crate) fn claim(
        &self,
        route: &'static str,
        key: String,
        body: &[u8],
        id: String,
    ) -> Result<Claim, ApiError> {
        let fingerprint = digest(&SHA256, body).as_ref().to_vec();
        let fresh = Arc::new(SharedTurn {
            route,
            key: key.clone(),
            fingerprint,
            id,
            claimed: Instant::now(),
            progress: watch::Sender::new(Progress::default()),
        });
        let window = self.window;
        let (held, claimed) = self.turns.recall_or_remember(
            (route, key),
            || fresh.clone(),
            |held| held.claimed.elapsed() < window,
        );
        if claimed {
            return Ok(Claim::First(held));
        }
        if held.fingerprint != fresh.fingerprint {
            return Err(ApiError::IdempotencyKeyReused(fresh.key.clone()));
        }
        Ok(Claim::Retry(held))
    }

    /// Forgets the claim of `turn`, whose first request was refused.
    fn forget(&self, turn: &SharedTurn) {
        let key = (turn.route, turn.key.clone());
        if let Some(held) = self.turns.take(&key) {
            if !std::ptr::eq(Arc::as_ptr(&held), turn) {
                // Claimed again since: not ours to forget.
                self.turns.remember(key, held);
            }
        }
    }
}

/// One request's Turn, as its retries see it.
pub(crate) struct SharedTurn {
    route: &'static str,
    key: String,
    /// SHA-256 of the first request's body.
    fingerprint: Vec<u8>,
    /// The object id the first request's answer carries, so every retry's
    /// answer is the same object.
    pub(crate) id: String,
    claimed: Instant,
    progress: watch::Sender<Progress>,
}

/// What the Turn reported so far.
#[derive(Debug, Default)]
struct Progress {
    text: String,
    end: Option<Result<TurnAnswer, TurnFailure>>,
}

impl SharedTurn {
    /// Keeps what `updates` (the Turn the first request started) reports,
    /// in a task of its own, until it ends.
    pub(crate) fn pump(self: &Arc<Self>, mut updates: mpsc::Receiver<TurnUpdate>) {
        let turn = Arc::clone(self);
        tokio::spawn(async move {
            while let Some(update) = updates.recv().await {
                match update {
                    TurnUpdate::Text(delta) => turn
                        .progress
                        .send_modify(|progress| progress.text.push_str(&delta)),
                    TurnUpdate::Finished(end) => {
                        turn.progress
                            .send_modify(|progress| progress.end = Some(end));
                        return;
                    }
                }
            }
            turn.progress
                .send_modify(|progress| progress.end = Some(Err(super::stream::lost())));
        });
    }

    /// The first request was refused with `failure` (nothing started):
    /// the key is forgotten, so a retry tries again, and whoever followed
    /// meanwhile is told.
    pub(crate) fn refused(&self, retries: &Retries, failure: TurnFailure) {
        retries.forget(self);
        self.progress
            .send_modify(|progress| progress.end = Some(Err(failure)));
    }

    /// The Turn's reports from the start: its text so far as one piece,
    /// then each new piece, then its end.
    pub(crate) fn follow(&self) -> mpsc::Receiver<TurnUpdate> {
        let (to_reader, updates) = mpsc::channel(BUFFERED_UPDATES);
        let mut progress = self.progress.subscribe();
        tokio::spawn(async move {
            let mut sent = 0;
            loop {
                let (delta, end) = {
                    let now = progress.borrow_and_update();
                    (now.text[sent..].to_string(), now.end.clone())
                };
                if !delta.is_empty() {
                    sent += delta.len();
                    if to_reader.send(TurnUpdate::Text(delta)).await.is_err() {
                        return;
                    }
                }
                if let Some(end) = end {
                    let _ = to_reader.send(TurnUpdate::Finished(end)).await;
                    return;
                }
                if progress.changed().await.is_err() {
                    let _ = to_reader
                        .send(TurnUpdate::Finished(Err(super::stream::lost())))
                        .await;
                    return;
                }
            }
        });
        updates
    }
}

/// Cancels a Turn when dropped: held by a request that no retry would
/// find, for as long as its client waits for the answer. Dropped after
/// the answer, it stops nothing.
pub(crate) struct CancelOnLeave(pub(crate) Option<Canceller>);

impl CancelOnLeave {
    /// The Turn runs to its end whether or not the client stays (a
    /// stream's client, which may read the Task elsewhere).
    pub(crate) fn stay(mut self) {
        self.0 = None;
    }
}

impl Drop for CancelOnLeave {
    fn drop(&mut self) {
        if let Some(canceller) = self.0.take() {
            canceller.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(text: &str) -> TurnUpdate {
        TurnUpdate::Finished(Ok(TurnAnswer {
            text: text.into(),
            ..TurnAnswer::default()
        }))
    }

    async fn all(mut updates: mpsc::Receiver<TurnUpdate>) -> Vec<TurnUpdate> {
        let mut seen = Vec::new();
        while let Some(update) = updates.recv().await {
            seen.push(update);
        }
        seen
    }

    #[tokio::test]
    async fn a_retry_follows_the_first_turn_and_another_body_is_refused() {
        let retries = Retries::new(8, Duration::from_secs(60));
        let claim = |body: &[u8]| retries.claim("chat", "k1".into(), body, "id-new".into());
        let Ok(Claim::First(first)) = claim(b"{}") else {
            panic!("not first");
        };
        let (report, updates) = mpsc::channel(8);
        first.pump(updates);
        report.send(TurnUpdate::Text("hel".into())).await.unwrap();
        let Ok(Claim::Retry(retry)) = claim(b"{}") else {
            panic!("not a retry");
        };
        assert_eq!(retry.id, first.id);
        let following = retry.follow();
        report.send(TurnUpdate::Text("lo".into())).await.unwrap();
        report.send(answer("hello")).await.unwrap();
        let seen = all(following).await;
        let text: String = seen
            .iter()
            .filter_map(|update| match update {
                TurnUpdate::Text(text) => Some(text.as_str()),
                TurnUpdate::Finished(_) => None,
            })
            .collect();
        assert_eq!(text, "hello");
        assert_eq!(seen.last(), Some(&answer("hello")));
        // Ended: a later retry gets the answer at once.
        let late = all(first.follow()).await;
        assert_eq!(late.last(), Some(&answer("hello")));
        assert!(matches!(
            claim(b"{\"other\": 1}"),
            Err(ApiError::IdempotencyKeyReused(_))
        ));
        // Another route's key is another key.
        assert!(matches!(
            retries.claim("responses", "k1".into(), b"{}", "x".into()),
            Ok(Claim::First(_))
        ));
    }

    #[tokio::test]
    async fn a_refused_first_request_lets_the_retry_start_again() {
        let retries = Retries::new(8, Duration::from_secs(60));
        let Ok(Claim::First(first)) = retries.claim("chat", "k".into(), b"{}", "a".into()) else {
            panic!("not first");
        };
        let Ok(Claim::Retry(joined)) = retries.claim("chat", "k".into(), b"{}", "b".into()) else {
            panic!("not a retry");
        };
        first.refused(&retries, TurnFailure::new("E_QUEUE_FULL", "full"));
        let told = all(joined.follow()).await;
        assert!(
            matches!(told.as_slice(), [TurnUpdate::Finished(Err(failure))] if failure.code == "E_QUEUE_FULL")
        );
        assert!(matches!(
            retries.claim("chat", "k".into(), b"{}", "c".into()),
            Ok(Claim::First(_))
        ));
    }

    #[tokio::test]
    async fn a_key_older_than_the_window_is_claimed_anew() {
        let retries = Retries::new(8, Duration::ZERO);
        assert!(matches!(
            retries.claim("chat", "k".into(), b"{}", "a".into()),
            Ok(Claim::First(_))
        ));
        assert!(matches!(
            retries.claim("chat", "k".into(), b"{\"x\": 2}", "b".into()),
            Ok(Claim::First(_))
        ));
    }

    #[test]
    fn a_key_must_be_visible_ascii_of_a_bounded_length() {
        let headers = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(IDEMPOTENCY_HEADER, value.parse().unwrap());
            headers
        };
        assert_eq!(key_of(&HeaderMap::new()).unwrap(), None);
        assert_eq!(key_of(&headers("abc-1")).unwrap().as_deref(), Some("abc-1"));
        for bad in ["", "a b", &"k".repeat(MAX_KEY_CHARS + 1)] {
            assert!(key_of(&headers(bad)).is_err(), "{bad:?}");
        }
    }
}
