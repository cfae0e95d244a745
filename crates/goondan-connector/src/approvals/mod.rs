//! Approval requests as chat messages with buttons, and the presses that
//! decide them: the [`ApprovalDesk`] of a Connection with
//! `spec.approvals` (Telegram or Slack).
//!
//! The desk is told of requests and decisions by the orchestrator
//! ([`DeskHandle::asked`], [`DeskHandle::decided`]). It posts each request
//! once to the configured chat (the agent, its instance, the tool and its
//! arguments, the question, the deadline; an Approve and a Deny button)
//! and remembers what it posted under the System Root
//! ([`goondan_store::ApprovalMessages`]), so a restarted connector posts
//! nothing twice and still knows which instance an old button is for. A
//! post that fails is tried again later, with a growing wait.
//!
//! A press arrives from the platform's own verified path (the Telegram
//! long poll or webhook, the signed Slack interactivity post) as a
//! [`Press`], never as an event for an agent. The desk checks the presser
//! against `deciders` and the press against the message it posted for
//! the request (the same chat and message id, both named by the
//! platform, as recorded under the System Root: a press carrying the
//! request's id on any other message, or on none, decides nothing and is
//! logged with its [`PressMismatch`] code), hands the decision to the orchestrator
//! ([`Query::Decide`], the control socket's path) addressed to the
//! instance that holds the request, and answers the press: the message
//! then says who decided and loses its buttons. A press the desk refuses,
//! or one on a request already decided, gets a visible answer (Telegram's
//! callback answer, a Slack ephemeral message) and decides nothing.

pub mod slack;
pub mod telegram;

pub use crate::press::{Press, PressMismatch};

use crate::chat_api::slack::{SlackApi, SlackError};
use crate::chat_api::telegram::{TelegramApi, TelegramError};
use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::link::OrchestratorLink;
use crate::source::Shutdown;
use crate::EmitError;
use goondan_config::spec::ApprovalPlatform;
use goondan_ipc::protocol::{Query, QueryAnswer};
use goondan_store::{ApprovalMessages, PostedApproval};
use goondan_types::{ApprovalDecision, ApprovalRequest, Verdict};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a press waits for its instance to record the decision: a
/// little over the orchestrator's own wait, so its answer (even a
/// timeout) is what the presser hears.
const DECIDE_TIMEOUT: Duration = Duration::from_secs(35);
/// How long one call of the chat's API may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// The first wait before posting again after a failed post; it doubles
/// up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_secs(2);
/// The longest wait between two tries of a post.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);
/// How many presses may wait for the desk; one more is answered as a
/// full queue (the platform retries, or the person presses again).
const PRESS_CAPACITY: usize = 256;
/// The most characters of a request's arguments a message shows.
const MAX_ARGUMENTS_CHARS: usize = 1500;
/// The most characters of a request's question a message shows.
const MAX_QUESTION_CHARS: usize = 500;
/// The most characters of an agent, instance or tool name a message shows.
const MAX_NAME_CHARS: usize = 100;
/// The code of a decision on a request its instance no longer holds open.
const APPROVAL_NOT_FOUND: &str = "E_APPROVAL_NOT_FOUND";

/// Where a Connection posts requests and who may decide them
/// (`spec.approvals`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatApprovals {
    /// The platform the connector speaks to.
    pub platform: ApprovalPlatform,
    /// The chat (Telegram) or channel (Slack) id.
    pub chat: String,
    /// The user ids whose presses decide; empty: anyone in the chat.
    pub deciders: Vec<String>,
}

impl ChatApprovals {
    /// Whether a press by `user_id` decides.
    pub fn may_decide(&self, user_id: &str) -> bool {
        self.deciders.is_empty() || self.deciders.iter().any(|decider| decider == user_id)
    }
}

/// What came of a request, as its message says once it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It was decided.
    Decided {
        /// Approve or deny.
        verdict: Verdict,
        /// Who, as the decision records it (`telegram:42`, `cli:ana`,
        /// `timeout`).
        by: String,
        /// How the presser is shown, for a press made here.
        name: Option<String>,
        /// Why, when the decision says.
        reason: Option<String>,
    },
    /// It waits no more, and this connector does not know how it ended.
    Gone,
}

impl Outcome {
    fn of(decision: &ApprovalDecision) -> Outcome {
        Outcome::Decided {
            verdict: decision.verdict,
            by: decision.by.clone(),
            name: None,
            reason: decision.reason.clone(),
        }
    }
}

/// What a press is answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The decision is recorded (the message says so too).
    Recorded(Verdict),
    /// Nothing was decided, and why.
    Refused(String),
}

/// `text` with `&`, `<` and `>` escaped: all that Telegram's HTML and
/// Slack's mrkdwn both need, so a request's text cannot become markup.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A request as its message shows it: names, arguments and question cut
/// to length, not yet escaped (each platform escapes its own way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The request's id.
    pub id: String,
    /// The agent.
    pub agent: String,
    /// Its instance.
    pub instance_key: String,
    /// The gated tool.
    pub tool: Option<String>,
    /// The arguments, pretty-printed.
    pub arguments: String,
    /// The question, when there is one.
    pub question: Option<String>,
    /// The deadline and what it decides.
    pub deadline: Option<(String, Verdict)>,
}

impl Shown {
    /// How `request` is shown.
    pub fn of(request: &ApprovalRequest) -> Shown {
        let arguments = match &request.arguments {
            goondan_types::JsonValue::Null => String::new(),
            value => serde_json::to_string_pretty(value).unwrap_or_default(),
        };
        Shown {
            id: request.id.clone(),
            agent: cut(&request.agent, MAX_NAME_CHARS),
            instance_key: cut(&request.instance_key, MAX_NAME_CHARS),
            tool: request
                .tool
                .as_deref()
                .map(|tool| cut(tool, MAX_NAME_CHARS)),
            arguments: cut(&arguments, MAX_ARGUMENTS_CHARS),
            question: request
                .question
                .as_deref()
                .map(|question| cut(question, MAX_QUESTION_CHARS)),
            deadline: request
                .deadline
                .clone()
                .map(|deadline| (deadline, request.on_timeout)),
        }
    }
}

/// `text` cut to `limit` characters, with a mark saying so.
fn cut(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((at, _)) => format!("{}… (truncated)", &text[..at]),
        None => text.to_string(),
    }
}

/// What the deadline's verdict does, in words.
fn deadline_words(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Approve => "approved",
        Verdict::Deny => "denied",
    }
}

/// A failed call of a chat's API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    /// Telegram's.
    #[error(transparent)]
    Telegram(#[from] TelegramError),
    /// Slack's.
    #[error(transparent)]
    Slack(#[from] SlackError),
    /// The platform answered without what a posted message needs (its
    /// id).
    #[error("E_CHAT_ANSWER: {0}")]
    Answer(String),
}

impl ChatError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ChatError::Telegram(error) => error.code(),
            ChatError::Slack(error) => error.code(),
            ChatError::Answer(_) => "E_CHAT_ANSWER",
        }
    }

    /// How long the platform asked to wait, when it did.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            ChatError::Telegram(TelegramError::RateLimited {
                retry_after_seconds,
                ..
            })
            | ChatError::Slack(SlackError::RateLimited {
                retry_after_seconds,
                ..
            }) => retry_after_seconds.map(Duration::from_secs),
            _ => None,
        }
    }
}

/// A message the desk posted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Message {
    /// The chat it is in, as the platform names it in a press: a chat
    /// configured by its `@username` comes back as its numeric id.
    chat: String,
    /// Its id in that chat.
    id: String,
    /// What it says.
    text: String,
}

/// The chat API a desk posts through.
#[derive(Debug)]
pub enum ChatClient {
    /// The Telegram Bot API.
    Telegram(TelegramApi),
    /// The Slack Web API.
    Slack(SlackApi),
}

impl ChatClient {
    /// The client `platform` needs, from the Connection's config.
    pub fn from_config(
        platform: ApprovalPlatform,
        config: &ConnectorConfig,
    ) -> Result<ChatClient, ConnectorConfigError> {
        Ok(match platform {
            ApprovalPlatform::Telegram => ChatClient::Telegram(TelegramApi::from_config(
                config,
                "posting approval requests",
            )?),
            ApprovalPlatform::Slack => ChatClient::Slack(SlackApi::from_config(config)?),
        })
    }

    /// Posts `shown` to `chat`.
    async fn post(&self, chat: &str, shown: &Shown) -> Result<Message, ChatError> {
        match self {
            ChatClient::Telegram(api) => telegram::post(api, chat, shown).await,
            ChatClient::Slack(api) => slack::post(api, chat, shown).await,
        }
    }

    /// Edits `posted` to say how it ended, without buttons.
    async fn settle(&self, posted: &PostedApproval, outcome: &Outcome) -> Result<(), ChatError> {
        match self {
            ChatClient::Telegram(api) => telegram::settle(api, posted, outcome).await,
            ChatClient::Slack(api) => slack::settle(api, posted, outcome).await,
        }
    }

    /// Answers `press`; `chat` is where a platform that answers in the
    /// chat (Slack) does so when the press named none.
    async fn reply(&self, press: &Press, reply: &Reply, chat: &str) -> Result<(), ChatError> {
        match self {
            ChatClient::Telegram(api) => telegram::reply(api, press, reply).await,
            ChatClient::Slack(api) => {
                let channel = press.chat.as_deref().unwrap_or(chat);
                slack::reply(api, channel, press, reply).await
            }
        }
    }
}

/// What the orchestrator tells the desk.
#[derive(Debug)]
enum Notice {
    Asked(Box<ApprovalRequest>),
    Decided(Box<ApprovalDecision>),
}

/// How the rest of the ConnectorProcess reaches its desk.
///
/// Notices are never refused: the IPC reader must not wait on the desk
/// (it also answers the orchestrator's pings), and there are at most as
/// many as there are approvals. Presses come from outside and are
/// bounded.
#[derive(Debug, Clone)]
pub struct DeskHandle {
    notices: mpsc::UnboundedSender<Notice>,
    presses: mpsc::Sender<Press>,
}

impl DeskHandle {
    /// A request was asked (or still waits): post it unless it was.
    pub fn asked(&self, request: ApprovalRequest) {
        let _ = self.notices.send(Notice::Asked(Box::new(request)));
    }

    /// A request was decided: its message loses its buttons.
    pub fn decided(&self, decision: ApprovalDecision) {
        let _ = self.notices.send(Notice::Decided(Box::new(decision)));
    }

    /// A person pressed a button: queued for the desk, or refused as a
    /// full queue (the sender tries again) or a stopped desk.
    pub fn press(&self, press: Press) -> Result<(), EmitError> {
        self.presses.try_send(press).map_err(|error| match error {
            mpsc::error::TrySendError::Full(_) => {
                EmitError::QueueFull("the approval desk is busy".into())
            }
            mpsc::error::TrySendError::Closed(_) => {
                EmitError::Closed("the approval desk stopped".into())
            }
        })
    }
}

/// What the desk and the presses it answers share.
#[derive(Debug)]
struct Shared {
    settings: ChatApprovals,
    client: ChatClient,
    messages: Mutex<ApprovalMessages>,
    /// Requests a press is deciding right now.
    deciding: Mutex<HashSet<String>>,
    link: OrchestratorLink,
}

impl Shared {
    fn messages(&self) -> std::sync::MutexGuard<'_, ApprovalMessages> {
        // Each method either wrote its line and updated the map, or
        // neither: a panic cannot leave them apart.
        self.messages
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn deciding(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.deciding
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records that `posted` is done, then edits its message; a failed
    /// edit leaves buttons whose press says the request is decided.
    async fn settle(&self, posted: &PostedApproval, outcome: &Outcome) {
        if let Err(error) = self.messages().settled(&posted.id) {
            tracing::error!(approval = %posted.id, code = error.code(), "could not record that the request is settled: {error}");
        }
        if let Err(error) = self.client.settle(posted, outcome).await {
            tracing::warn!(approval = %posted.id, code = error.code(), "could not edit the request's message: {error}");
        }
    }

    async fn reply(&self, press: &Press, reply: Reply) {
        if let Err(error) = self.client.reply(press, &reply, &self.settings.chat).await {
            tracing::warn!(approval = %press.approval_id, code = error.code(), "could not answer the press: {error}");
        }
    }

    /// Checks a press, hands its decision to the instance and answers it.
    async fn press(&self, press: Press) {
        let platform = self.settings.platform.name();
        let by = format!("{platform}:{}", press.user_id);
        let id = press.approval_id.clone();
        if !self.settings.may_decide(&press.user_id) {
            tracing::warn!(approval = %id, by = %by, "a press by someone not among the deciders; nothing decided");
            let refusal = "You are not among the people who may decide this request.";
            return self.reply(&press, Reply::Refused(refusal.into())).await;
        }
        let (posted, settled) = {
            let messages = self.messages();
            (messages.waiting(&id).cloned(), messages.is_settled(&id))
        };
        let posted = match posted {
            Some(posted) => posted,
            None => {
                let refusal = if settled {
                    "This request was already decided."
                } else {
                    "This request is no longer waiting for a decision."
                };
                return self.reply(&press, Reply::Refused(refusal.into())).await;
            }
        };
        if let Err(mismatch) = press.check_posted(&posted) {
            tracing::warn!(approval = %id, by = %by, code = mismatch.code(), chat = ?press.chat, message = ?press.message, "a press not on the request's message; nothing decided: {mismatch}");
            let refusal = "This button is not on the message this request was posted as; nothing was decided.";
            return self.reply(&press, Reply::Refused(refusal.into())).await;
        }
        if !self.deciding().insert(id.clone()) {
            let refusal = "Someone is deciding this request right now.";
            return self.reply(&press, Reply::Refused(refusal.into())).await;
        }
        let decision = ApprovalDecision {
            id: id.clone(),
            verdict: press.verdict,
            arguments: None,
            reason: None,
            by: by.clone(),
            decided_at: goondan_types::now_iso(),
        };
        let query = Query::Decide {
            target: goondan_types::RoutingKey::new(&posted.agent, &posted.instance_key).to_string(),
            decision: Box::new(decision),
        };
        let answer = self.link.ask(query, DECIDE_TIMEOUT).await;
        match answer {
            Ok(QueryAnswer::Decided) => {
                tracing::info!(approval = %id, verdict = press.verdict.as_str(), by = %by, "decided by a press");
                let outcome = Outcome::Decided {
                    verdict: press.verdict,
                    by,
                    name: press.user_name.clone(),
                    reason: None,
                };
                self.settle(&posted, &outcome).await;
                self.reply(&press, Reply::Recorded(press.verdict)).await;
            }
            Ok(QueryAnswer::Failed(failure)) if failure.code == APPROVAL_NOT_FOUND => {
                self.settle(&posted, &Outcome::Gone).await;
                let refusal = "This request was already decided.";
                self.reply(&press, Reply::Refused(refusal.into())).await;
            }
            other => {
                let why = match other {
                    Ok(QueryAnswer::Failed(failure)) => {
                        format!("{}: {}", failure.code, failure.message)
                    }
                    Ok(answer) => format!("unexpected answer {answer:?}"),
                    Err(error) => error.to_string(),
                };
                tracing::warn!(approval = %id, by = %by, "a press's decision was not recorded: {why}");
                let refusal = "The decision could not be recorded; try again in a moment.";
                self.reply(&press, Reply::Refused(refusal.into())).await;
            }
        }
        self.deciding().remove(&id);
    }
}

/// The desk of one ConnectorProcess: posts requests, settles their
/// messages, answers presses. Run by [`ApprovalDesk::run`].
#[derive(Debug)]
pub struct ApprovalDesk {
    shared: Arc<Shared>,
    notices: mpsc::UnboundedReceiver<Notice>,
    presses: mpsc::Receiver<Press>,
    /// Requests whose post failed, to try again at `retry_at`.
    unposted: Vec<ApprovalRequest>,
    retry_at: Option<Instant>,
    retry_wait: Duration,
}

impl ApprovalDesk {
    /// A desk posting through `client` as `settings` say, remembering
    /// what it posted in `messages` and deciding through `link`.
    pub fn new(
        settings: ChatApprovals,
        client: ChatClient,
        messages: ApprovalMessages,
        link: OrchestratorLink,
    ) -> (ApprovalDesk, DeskHandle) {
        let (notices_tx, notices_rx) = mpsc::unbounded_channel();
        let (presses_tx, presses_rx) = mpsc::channel(PRESS_CAPACITY);
        let desk = ApprovalDesk {
            shared: Arc::new(Shared {
                settings,
                client,
                messages: Mutex::new(messages),
                deciding: Mutex::new(HashSet::new()),
                link,
            }),
            notices: notices_rx,
            presses: presses_rx,
            unposted: Vec::new(),
            retry_at: None,
            retry_wait: FIRST_RETRY_WAIT,
        };
        let handle = DeskHandle {
            notices: notices_tx,
            presses: presses_tx,
        };
        (desk, handle)
    }

    /// Works until `shutdown`. Presses are answered on tasks of their
    /// own, so one waiting for an instance to start holds up no post;
    /// they stop at `shutdown` too.
    pub async fn run(self, shutdown: Shutdown) {
        // A post in flight is cut short too: the desk holds the process's
        // pipe to the orchestrator, which must close at a shutdown.
        let mut stopping = shutdown.clone();
        tokio::select! {
            () = self.work(shutdown) => {}
            () = stopping.requested() => {}
        }
    }

    async fn work(mut self, shutdown: Shutdown) {
        loop {
            let retry_at = self.retry_at;
            tokio::select! {
                notice = self.notices.recv() => match notice {
                    Some(Notice::Asked(request)) => self.post(*request).await,
                    Some(Notice::Decided(decision)) => self.decided(*decision).await,
                    None => return,
                },
                Some(press) = self.presses.recv() => {
                    let shared = Arc::clone(&self.shared);
                    // Stopped with the desk: a press still waiting for its
                    // instance must not hold the process (and its pipe to
                    // the orchestrator) open after a shutdown.
                    let mut stopping = shutdown.clone();
                    tokio::spawn(async move {
                        tokio::select! {
                            () = shared.press(press) => {}
                            () = stopping.requested() => {}
                        }
                    });
                }
                () = sleep_until(retry_at), if retry_at.is_some() => self.retry().await,
            }
        }
    }

    /// Posts `request` unless it was posted, settled or waits for a
    /// retry already.
    async fn post(&mut self, request: ApprovalRequest) {
        if self.shared.messages().knows(&request.id)
            || self.unposted.iter().any(|waiting| waiting.id == request.id)
        {
            return;
        }
        // While posts fail, a new one waits for the next try with them
        // rather than for its own timeout.
        if self.retry_at.is_some() {
            self.unposted.push(request);
            return;
        }
        if let Err(error) = self.try_post(&request).await {
            let wait = error.retry_after().unwrap_or(self.retry_wait);
            tracing::warn!(approval = %request.id, code = error.code(), wait_ms = wait.as_millis() as u64, "could not post the request; trying again later: {error}");
            self.unposted.push(request);
            self.retry_at = Some(Instant::now() + wait);
            self.retry_wait = (self.retry_wait * 2).min(MAX_RETRY_WAIT);
        }
    }

    async fn try_post(&self, request: &ApprovalRequest) -> Result<(), ChatError> {
        let chat = &self.shared.settings.chat;
        let message = self.shared.client.post(chat, &Shown::of(request)).await?;
        let posted = PostedApproval {
            id: request.id.clone(),
            agent: request.agent.clone(),
            instance_key: request.instance_key.clone(),
            chat: message.chat,
            message: message.id,
            text: message.text,
            posted_at: goondan_types::now_iso(),
        };
        tracing::info!(approval = %request.id, chat = %posted.chat, message = %posted.message, "approval request posted");
        if let Err(error) = self.shared.messages().posted(posted) {
            // Posted but not remembered: a restart would post it again,
            // which is better than a request nobody sees.
            tracing::error!(approval = %request.id, code = error.code(), "could not record the posted request: {error}");
        }
        Ok(())
    }

    /// Tries every failed post again, in the order asked.
    async fn retry(&mut self) {
        self.retry_at = None;
        let waiting = std::mem::take(&mut self.unposted);
        let mut failed = None;
        for request in waiting {
            if failed.is_some() {
                self.unposted.push(request);
                continue;
            }
            if let Err(error) = self.try_post(&request).await {
                tracing::warn!(approval = %request.id, code = error.code(), "could not post the request again: {error}");
                failed = Some(error.retry_after().unwrap_or(self.retry_wait));
                self.unposted.push(request);
            }
        }
        match failed {
            Some(wait) => {
                self.retry_at = Some(Instant::now() + wait);
                self.retry_wait = (self.retry_wait * 2).min(MAX_RETRY_WAIT);
            }
            None => self.retry_wait = FIRST_RETRY_WAIT,
        }
    }

    /// A request was decided: its message says how, or it is never
    /// posted.
    async fn decided(&mut self, decision: ApprovalDecision) {
        self.unposted.retain(|request| request.id != decision.id);
        // A press deciding it settles its message with the presser's name.
        if self.shared.deciding().contains(&decision.id) {
            return;
        }
        let posted = {
            let mut messages = self.shared.messages();
            let posted = messages.waiting(&decision.id).cloned();
            if posted.is_none() && !messages.knows(&decision.id) {
                // Decided before it was posted: a late word of the request
                // must not post it.
                if let Err(error) = messages.settled(&decision.id) {
                    tracing::warn!(approval = %decision.id, code = error.code(), "could not record a decided request: {error}");
                }
            }
            posted
        };
        if let Some(posted) = posted {
            self.shared.settle(&posted, &Outcome::of(&decision)).await;
        }
    }
}

/// Resolves at `at`; never when there is none.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_arguments_and_names_are_cut_and_marked() {
        let request = ApprovalRequest {
            id: "apv_1".into(),
            key: "call_1".into(),
            agent: "a".repeat(150),
            instance_key: "default".into(),
            tool: Some("file-system__write".into()),
            arguments: serde_json::json!({"content": "x".repeat(4000)}),
            question: Some("q".repeat(900)),
            turn_id: "turn_1".into(),
            event_id: "evt_1".into(),
            requested_at: "2026-11-27T00:00:00.000Z".into(),
            deadline: Some("2026-11-27T00:10:00.000Z".into()),
            on_timeout: Verdict::Deny,
            deciders: vec!["operator".into()],
        };
        let shown = Shown::of(&request);
        assert!(shown.agent.ends_with("… (truncated)"));
        assert_eq!(
            shown.agent.chars().count(),
            100 + "… (truncated)".chars().count()
        );
        assert!(shown.arguments.chars().count() < MAX_ARGUMENTS_CHARS + 20);
        assert!(shown.question.unwrap().ends_with("… (truncated)"));
        assert_eq!(
            shown.deadline,
            Some(("2026-11-27T00:10:00.000Z".into(), Verdict::Deny))
        );
        assert_eq!(cut("héllo", 10), "héllo");
    }

    #[test]
    fn a_press_decides_only_on_the_message_posted_for_its_request() {
        let posted = PostedApproval {
            id: "apv_1".into(),
            agent: "coder".into(),
            instance_key: "default".into(),
            chat: "-100".into(),
            message: "900".into(),
            text: "Approval needed".into(),
            posted_at: "2026-11-27T00:00:00.000Z".into(),
        };
        let press = |chat: Option<&str>, message: Option<&str>| Press {
            approval_id: "apv_1".into(),
            verdict: Verdict::Approve,
            user_id: "7".into(),
            user_name: None,
            chat: chat.map(str::to_string),
            message: message.map(str::to_string),
            callback_id: None,
        };
        assert_eq!(
            press(Some("-100"), Some("900")).check_posted(&posted),
            Ok(())
        );
        for (chat, message, code) in [
            (Some("-100"), Some("901"), "E_APPROVAL_PRESS_OTHER_MESSAGE"),
            (Some("-100"), Some(""), "E_APPROVAL_PRESS_OTHER_MESSAGE"),
            (Some("-200"), Some("900"), "E_APPROVAL_PRESS_OTHER_CHAT"),
            (Some("-100"), None, "E_APPROVAL_PRESS_NO_MESSAGE"),
            (None, Some("900"), "E_APPROVAL_PRESS_NO_MESSAGE"),
            (None, None, "E_APPROVAL_PRESS_NO_MESSAGE"),
        ] {
            let mismatch = press(chat, message).check_posted(&posted).unwrap_err();
            assert_eq!(mismatch.code(), code, "{chat:?} {message:?}");
            assert!(mismatch.to_string().starts_with(code), "{mismatch}");
        }
    }

    #[test]
    fn without_deciders_anyone_decides() {
        let mut settings = ChatApprovals {
            platform: ApprovalPlatform::Telegram,
            chat: "-100".into(),
            deciders: Vec::new(),
        };
        assert!(settings.may_decide("7"));
        settings.deciders = vec!["42".into()];
        assert!(settings.may_decide("42"));
        assert!(!settings.may_decide("7"));
    }
}
