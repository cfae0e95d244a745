//! The running swarm as the server sees it: [`Swarm`]. The binary
//! implements it over the orchestrator's control socket, which this
//! crate does not name, so the routers are tested against any
//! implementation.

use futures_util::future::BoxFuture;
use goondan_types::TokenUsage;
use tokio::sync::mpsc;

/// Why a Turn gave no answer, or was not taken: its code
/// (`E_ORCHESTRATOR_NOT_RUNNING`, `E_QUEUE_FULL`, `E_TURN_CANCELLED`, …),
/// what happened and how to recover.
pub type TurnFailure = goondan_types::ErrorBody;

/// One agent of the Swarm, as the server offers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    /// Its name: the A2A agent's path segment and the OpenAI model id.
    pub name: String,
    /// What its resource says it does.
    pub description: Option<String>,
    /// Whether it is the Swarm's entry agent.
    pub entry: bool,
    /// The tools it may call, as skills of its Agent Card.
    pub tools: Vec<ToolInfo>,
}

/// A tool an agent may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolInfo {
    /// The name the model calls it by.
    pub name: String,
    /// What it does.
    pub description: Option<String>,
}

/// Who wrote a message of a conversation replayed into a fresh instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorRole {
    /// Instructions the client gave.
    System,
    /// The client's side.
    User,
    /// The agent's side.
    Assistant,
}

/// A message of the conversation so far, replayed into a fresh instance
/// before its first input (an OpenAI client sends the whole conversation
/// with every request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorMessage {
    /// Who wrote it.
    pub role: PriorRole,
    /// What it says.
    pub text: String,
}

/// One input for an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRequest {
    /// The agent.
    pub agent: String,
    /// The instance (conversation) it goes to.
    pub instance_key: String,
    /// The input.
    pub text: String,
    /// Messages to put before the input in an instance that has none
    /// but system prompts; left out, with a warning in the agent's log,
    /// when the instance already holds a conversation.
    pub history: Vec<PriorMessage>,
    /// Which door it came through (`a2a`, `openai`), recorded as the
    /// event's source.
    pub source: String,
}

/// What a finished Turn answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TurnAnswer {
    /// The answer's text.
    pub text: String,
    /// The Turn that answered.
    pub turn_id: Option<String>,
    /// The model tokens the Turn spent, as its ledger recorded them.
    pub usage: Option<TokenUsage>,
}

/// What a running Turn reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnUpdate {
    /// More of the answer's text, as the model streams it.
    Text(String),
    /// The Turn ended; nothing follows.
    Finished(Result<TurnAnswer, TurnFailure>),
}

/// An input the swarm holds durably, and its Turn's reports. Dropping it
/// before [`TurnUpdate::Finished`] cancels the Turn (`E_TURN_CANCELLED`;
/// what it stored is kept).
#[derive(Debug)]
pub struct RunningTurn {
    /// The input event's id, stable across restarts of the swarm.
    pub event_id: String,
    /// The Turn's reports, ending with one [`TurnUpdate::Finished`]; a
    /// channel that closes without it means the swarm went away.
    pub updates: mpsc::Receiver<TurnUpdate>,
}

/// The running swarm.
pub trait Swarm: Send + Sync + 'static {
    /// The Swarm's name.
    fn name(&self) -> &str;

    /// Its agents, entry agent first.
    fn agents(&self) -> &[AgentInfo];

    /// Hands `request` to the swarm; resolves once its input is durable in
    /// the instance's inbox (or was refused: a full queue is
    /// `E_QUEUE_FULL`).
    fn start(&self, request: TurnRequest) -> BoxFuture<'static, Result<RunningTurn, TurnFailure>>;

    /// What a person must decide before the running Turn of
    /// `agent:instance_key` goes on (an approval it waits for); `None`
    /// when nothing waits.
    fn waiting_for(&self, agent: &str, instance_key: &str) -> Option<String>;

    /// The agent named `name`.
    fn agent(&self, name: &str) -> Option<&AgentInfo> {
        self.agents().iter().find(|agent| agent.name == name)
    }
}
