//! A swarm in the test's own process, served by the real router on
//! 127.0.0.1: it streams an echo of each input word by word, fails or
//! refuses on demand, and records what it was asked and how each Turn
//! ended (committed, or cancelled because its reports were dropped).
//!
//! What an input says picks what happens:
//! * `QUEUE_FULL`, `NOT_RUNNING`: refused at start (`E_QUEUE_FULL`,
//!   `E_ORCHESTRATOR_NOT_RUNNING`);
//! * `FAIL`: one delta, then the Turn fails (`E_MODEL_HTTP`);
//! * `SLOW`: ten deltas 100 ms apart;
//! * anything else: `echo: <input>` in word deltas, 2 ms apart.

use futures_util::future::BoxFuture;
use goondan_http::access::HttpAccess;
use goondan_http::AcceptLimits;
use goondan_serve::{
    AgentInfo, Limits, RunningTurn, Swarm, TurnAnswer, TurnFailure, TurnRequest, TurnUpdate,
};
use goondan_types::TokenUsage;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How a Turn of the double ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// It sent its last report: the Turn committed.
    Committed,
    /// Its reports were dropped before the end: the swarm would cancel.
    Cancelled,
}

/// What the double saw.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) requests: Vec<TurnRequest>,
    pub(crate) endings: Vec<(String, Ending)>,
}

pub(crate) struct Double {
    agents: Vec<AgentInfo>,
    seen: Arc<Mutex<Seen>>,
}

fn agent(name: &str, entry: bool) -> AgentInfo {
    AgentInfo {
        name: name.into(),
        description: Some(format!("the {name}")),
        entry,
        tools: Vec::new(),
    }
}

/// The usage the double reports: ten prompt tokens per message given,
/// one completion token per delta.
pub(crate) fn usage_of(request: &TurnRequest, deltas: usize) -> TokenUsage {
    let prompt_tokens = 10 * (request.history.len() as u64 + 1);
    let completion_tokens = deltas as u64;
    TokenUsage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}

impl Swarm for Double {
    fn name(&self) -> &str {
        "double"
    }

    fn agents(&self) -> &[AgentInfo] {
        &self.agents
    }

    fn start(&self, request: TurnRequest) -> BoxFuture<'static, Result<RunningTurn, TurnFailure>> {
        let seen = self.seen.clone();
        Box::pin(async move {
            seen.lock().unwrap().requests.push(request.clone());
            if request.text.contains("QUEUE_FULL") {
                return Err(TurnFailure::new("E_QUEUE_FULL", "the inbox is full")
                    .with_suggestion("retry later"));
            }
            if request.text.contains("NOT_RUNNING") {
                return Err(TurnFailure::new(
                    "E_ORCHESTRATOR_NOT_RUNNING",
                    "no swarm runs",
                ));
            }
            let event_id = format!("evt-{}", seen.lock().unwrap().requests.len());
            let (to_server, updates) = mpsc::channel(4);
            let id = event_id.clone();
            tokio::spawn(async move {
                let ending = run_turn(&request, &to_server).await;
                seen.lock().unwrap().endings.push((id, ending));
            });
            Ok(RunningTurn { event_id, updates })
        })
    }

    fn waiting_for(&self, _agent: &str, _instance_key: &str) -> Option<String> {
        None
    }
}

async fn run_turn(request: &TurnRequest, to_server: &mpsc::Sender<TurnUpdate>) -> Ending {
    let (deltas, pause, failure): (Vec<String>, u64, Option<TurnFailure>) =
        if request.text.contains("FAIL") {
            let failure = TurnFailure::new("E_MODEL_HTTP", "the model answered 500");
            (vec!["partial ".into()], 2, Some(failure))
        } else if request.text.contains("SLOW") {
            ((0..10).map(|n| format!("part{n} ")).collect(), 100, None)
        } else {
            let answer = format!("echo: {}", request.text);
            let words = answer.split_inclusive(' ').map(str::to_string).collect();
            (words, 2, None)
        };
    for delta in &deltas {
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if to_server
            .send(TurnUpdate::Text(delta.clone()))
            .await
            .is_err()
        {
            return Ending::Cancelled;
        }
    }
    let result = match failure {
        Some(failure) => Err(failure),
        None => Ok(TurnAnswer {
            text: deltas.concat(),
            turn_id: Some("turn-1".into()),
            usage: Some(usage_of(request, deltas.len())),
        }),
    };
    if to_server.send(TurnUpdate::Finished(result)).await.is_err() {
        return Ending::Cancelled;
    }
    Ending::Committed
}

/// The router over a fresh double, served on 127.0.0.1:0.
pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) token: String,
    pub(crate) seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    pub(crate) async fn start() -> Server {
        Server::with_limits(Limits::default()).await
    }

    pub(crate) async fn with_limits(limits: Limits) -> Server {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let double = Double {
            agents: vec![agent("helper", true), agent("writer", false)],
            seen: seen.clone(),
        };
        let token = goondan_http::token::generate();
        let access = HttpAccess {
            bearer_token: Some(token.clone()),
            ..HttpAccess::default()
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let router = goondan_serve::router(Arc::new(double), access, base.clone(), limits);
        let accept = AcceptLimits::new(64, Duration::from_secs(5));
        let task = tokio::spawn(async move {
            let _ = goondan_http::serve(listener, router, accept, std::future::pending()).await;
        });
        Server {
            base,
            token,
            seen,
            task,
        }
    }

    /// The requests the double was asked to start.
    pub(crate) fn requests(&self) -> Vec<TurnRequest> {
        self.seen.lock().unwrap().requests.clone()
    }

    /// How the Turn of the `nth` request (from 1) ended, once it has,
    /// waiting for it at most ten seconds.
    pub(crate) async fn ending(&self, nth: usize) -> Ending {
        let id = format!("evt-{nth}");
        for _ in 0..1000 {
            let found = self
                .seen
                .lock()
                .unwrap()
                .endings
                .iter()
                .find(|(event, _)| *event == id)
                .map(|(_, ending)| *ending);
            if let Some(ending) = found {
                return ending;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the Turn of request {nth} never ended");
    }

    /// How many Turns ended, and how.
    pub(crate) fn endings(&self) -> Vec<(String, Ending)> {
        self.seen.lock().unwrap().endings.clone()
    }

    /// A POST of `body` (JSON text, sent as is) to `path` with the token.
    pub(crate) fn post(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body)
    }

    /// A GET of `path` with the token.
    pub(crate) fn get(&self, path: &str) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }
}
