//! What a Turn is doing while a person waits at a terminal for its answer:
//! a spinner while the model works, one dim line per tool call
//! (`→ bash__exec ls … ✓ 12 ms`, `✗ E_…` for an error result) and one per
//! delegation (`→ researcher`), on stderr between the streamed text. It
//! reads the instances' runtime-event logs as they grow, as the chat reads
//! the approvals its Turn waits on: nothing extra crosses the processes,
//! and an agent pays nothing for a console that watches it.
//!
//! Only the Turns of the input's trace are shown (a delegation keeps its
//! caller's `traceId`), so a Connection's work in the same swarm does not
//! mix in. Nothing of this is shown unless stdout and stderr are both a
//! terminal, nor with `--json` or `--quiet`.

use crate::progress::FRAMES;
use goondan_store::follow::{FollowFrom, FollowOptions, LoggedEvent, WorkspaceFollower};
use goondan_store::WorkspacePaths;
use goondan_types::{EventSourceKind, RuntimeEvent, ToolCallStatus};
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the spinner turns and the logs are read.
const TICK: Duration = Duration::from_millis(100);
/// How old an event must be before it is shown: streamed text travels
/// from the agent through the orchestrator while the event goes straight
/// to its log, so text written just before a tool call may arrive after
/// the call's event; holding events this long keeps them in order.
const HOLD: chrono::TimeDelta = chrono::TimeDelta::milliseconds(60);
/// How often new instances (a delegation's first Turn) are looked for.
const LIST_INTERVAL: Duration = Duration::from_millis(500);

/// Whether a console shows activity: on a terminal, without `--json` or
/// `--quiet`.
pub(crate) fn wanted(global: &crate::cli::GlobalArgs) -> bool {
    !global.json
        && !global.quiet
        && std::io::stdout().is_terminal()
        && std::io::stderr().is_terminal()
}

/// The activity of one input, shown until it is dropped.
pub(crate) struct Activity {
    /// Asks the ticker to show what it has now, or to stop.
    asks: std::sync::mpsc::Sender<Ask>,
    screen: Arc<Mutex<Screen>>,
    /// A thread of its own, not a task: reading many instances' logs must
    /// never hold the runtime the orchestrator of `gdn run` shares, and
    /// the logs are its alone, so no lock is held while it reads them.
    ticker: Option<std::thread::JoinHandle<()>>,
}

/// What the ticker is asked.
enum Ask {
    /// Show every event read so far, and say when done.
    Flush(tokio::sync::oneshot::Sender<()>),
    /// Show the rest and end.
    Stop,
}

impl Activity {
    /// Starts showing the activity in `workspace` that follows now.
    pub(crate) fn start(workspace: WorkspacePaths, colored: bool) -> Activity {
        let screen = Arc::new(Mutex::new(Screen {
            colored,
            ..Screen::default()
        }));
        // What is there now is not this input's (taken before the input
        // is sent, so nothing of it is missed).
        let logs = Logs::new(workspace);
        let ticking = Arc::clone(&screen);
        let (asks, asked) = std::sync::mpsc::channel::<Ask>();
        let ticker = std::thread::Builder::new()
            .name("activity".into())
            .spawn(move || tick(logs, &ticking, &asked))
            .ok();
        Activity {
            asks,
            screen,
            ticker,
        }
    }

    /// A handle for the printer of streamed text, which awaits
    /// [`TextGate::before_text`] before each delta.
    pub(crate) fn gate(&self) -> TextGate {
        TextGate {
            screen: Arc::clone(&self.screen),
            asks: self.asks.clone(),
        }
    }
}

/// The ticker: reads the logs and turns the spinner every [`TICK`], shows
/// everything at once when asked, and at the end.
fn tick(mut logs: Logs, screen: &Mutex<Screen>, asked: &std::sync::mpsc::Receiver<Ask>) {
    loop {
        // Until the input's first Turn is found its instance may be new:
        // look for it at every tick.
        let list = logs.trace.is_none();
        let events = read_new(&mut logs, list, false);
        {
            let mut screen = lock(screen);
            for event in &events {
                screen.event(event);
            }
            screen.spin();
        }
        match asked.recv_timeout(TICK) {
            Ok(Ask::Flush(flush)) => {
                let events = read_new(&mut logs, true, true);
                let mut screen = lock(screen);
                for event in &events {
                    screen.event(event);
                }
                screen.in_text = true;
                drop(screen);
                let _ = flush.send(());
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Ok(Ask::Stop) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    // A quick Turn may be over before the next tick: what it did is shown
    // all the same.
    let events = read_new(&mut logs, true, true);
    let mut screen = lock(screen);
    for event in &events {
        screen.event(event);
    }
    screen.close();
}

/// Dropping it stops the display, leaving the cursor at the start of a
/// clean line for the answer (or whatever ended the wait).
impl Drop for Activity {
    fn drop(&mut self) {
        // Not by dropping the sender: the text printer holds a clone.
        let _ = self.asks.send(Ask::Stop);
        match self.ticker.take() {
            Some(ticker) => {
                let _ = ticker.join();
            }
            None => lock(&self.screen).close(),
        }
    }
}

/// What the logs gained (all of it when `all`, else what is older than
/// [`HOLD`]), after looking for new instances when `list` (else every
/// [`LIST_INTERVAL`]).
fn read_new(logs: &mut Logs, list: bool, all: bool) -> Vec<RuntimeEvent> {
    if list {
        logs.follower.list_instances();
    }
    logs.ready(all)
}

fn lock<T>(value: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    value
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Lets streamed text through without a spinner in it.
#[derive(Clone)]
pub(crate) struct TextGate {
    screen: Arc<Mutex<Screen>>,
    asks: std::sync::mpsc::Sender<Ask>,
}

/// How long a run of text waits for the activity before it to be shown.
const FLUSH_WAIT: Duration = Duration::from_millis(250);

impl TextGate {
    /// Clears the spinner (and ends an open tool line) before `delta` is
    /// written to stdout; at the start of a run of text, first has what
    /// happened before it shown (a tool call's end before the next Step's
    /// text), waiting for that without holding the runtime.
    pub(crate) async fn before_text(&self, delta: &str) {
        let in_text = lock(&self.screen).in_text;
        if !in_text {
            let (flush, flushed) = tokio::sync::oneshot::channel();
            if self.asks.send(Ask::Flush(flush)).is_ok() {
                let _ = tokio::time::timeout(FLUSH_WAIT, flushed).await;
            }
        }
        let mut screen = lock(&self.screen);
        screen.in_text = true;
        screen.erase_spinner();
        screen.end_tool_line();
        screen.streaming = !delta.ends_with('\n');
    }
}

/// The runtime-event logs of a workspace's instances, followed from when
/// the input was sent: logs there then from their end, logs of instances
/// made later from their start.
struct Logs {
    follower: WorkspaceFollower,
    /// The input's trace, once its first Turn started.
    trace: Option<String>,
    /// Events read and not shown yet ([`HOLD`]), oldest first.
    held: Vec<RuntimeEvent>,
}

impl Logs {
    fn new(workspace: WorkspacePaths) -> Logs {
        let options = FollowOptions {
            list_interval: LIST_INTERVAL,
            ..FollowOptions::default()
        };
        Logs {
            follower: WorkspaceFollower::new(workspace, options, FollowFrom::Now),
            trace: None,
            held: Vec::new(),
        }
    }

    /// The events of the input's trace that are ready to be shown: older
    /// than [`HOLD`], or all of them when `all`.
    fn ready(&mut self, all: bool) -> Vec<RuntimeEvent> {
        let new = self.read();
        self.held.extend(new);
        self.held
            .sort_by(|a, b| a.base().timestamp.cmp(&b.base().timestamp));
        let cutoff = chrono::Utc::now() - HOLD;
        let young = |event: &RuntimeEvent| {
            chrono::DateTime::parse_from_rfc3339(&event.base().timestamp)
                .is_ok_and(|at| at > cutoff)
        };
        let split = if all {
            self.held.len()
        } else {
            self.held.iter().position(young).unwrap_or(self.held.len())
        };
        self.held.drain(..split).collect()
    }

    /// The new events of the input's trace. The trace is the one of the
    /// first Turn a person's input (not an agent) started.
    fn read(&mut self) -> Vec<RuntimeEvent> {
        // Oldest first across the instances.
        let events: Vec<RuntimeEvent> = self
            .follower
            .poll()
            .into_iter()
            .filter_map(|followed| match followed.event {
                LoggedEvent::Runtime(event) => Some(event),
                LoggedEvent::Swarm(_) => None,
            })
            .collect();
        if self.trace.is_none() {
            self.trace = events.iter().find_map(|event| match event {
                RuntimeEvent::TurnStarted { base, source, .. }
                    if source
                        .as_ref()
                        .is_none_or(|source| source.kind != EventSourceKind::Agent) =>
                {
                    Some(base.trace_id.clone())
                }
                _ => None,
            });
        }
        match &self.trace {
            Some(trace) => events
                .into_iter()
                .filter(|event| event.base().trace_id == *trace)
                .collect(),
            None => Vec::new(),
        }
    }
}

/// What stderr shows and where its cursor is.
#[derive(Default)]
struct Screen {
    colored: bool,
    frame: usize,
    /// A spinner is drawn on the current line.
    spinner: bool,
    /// A tool line was written without its end: its call's id.
    open_tool: Option<String>,
    /// Streamed text left the cursor in the middle of a line.
    streaming: bool,
    /// Text is streaming and no activity line came since it started.
    in_text: bool,
    /// The agent whose Turn the input started; the others' lines name
    /// their agent.
    entry_agent: Option<String>,
}

impl Screen {
    fn dim(&self, text: &str) -> String {
        if self.colored {
            format!("\x1b[2m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    fn write(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
    }

    fn erase_spinner(&mut self) {
        if self.spinner {
            self.write("\r\x1b[K");
            self.spinner = false;
        }
    }

    fn end_tool_line(&mut self) {
        if self.open_tool.take().is_some() {
            self.write("\n");
        }
    }

    /// Starts a line of its own for what comes next.
    fn fresh_line(&mut self) {
        self.in_text = false;
        self.erase_spinner();
        self.end_tool_line();
        if self.streaming {
            self.write("\n");
            self.streaming = false;
        }
    }

    /// Turns the spinner, unless text or a tool line holds the line.
    fn spin(&mut self) {
        if self.in_text || self.streaming || self.open_tool.is_some() {
            return;
        }
        let frame = FRAMES[self.frame % FRAMES.len()];
        self.frame = self.frame.wrapping_add(1);
        let text = format!("\r\x1b[K{}", self.dim(&format!("{frame} thinking")));
        self.write(&text);
        self.spinner = true;
    }

    fn event(&mut self, event: &RuntimeEvent) {
        let agent = &event.base().agent_name;
        let prefix = match &self.entry_agent {
            Some(entry) if entry != agent => format!("{agent}: "),
            _ => String::new(),
        };
        match event {
            RuntimeEvent::TurnStarted { source, .. } => {
                let delegated = source
                    .as_ref()
                    .is_some_and(|source| source.kind == EventSourceKind::Agent);
                if self.entry_agent.is_none() {
                    self.entry_agent = Some(agent.clone());
                } else if delegated {
                    self.fresh_line();
                    let line = self.dim(&format!("  → {agent}"));
                    self.write(&format!("{line}\n"));
                }
            }
            RuntimeEvent::ToolCalled {
                tool_call_id,
                tool_name,
                input_summary,
                ..
            } => {
                self.fresh_line();
                let summary = input_summary
                    .as_deref()
                    .filter(|summary| !summary.is_empty())
                    .map(|summary| format!(" {summary}"))
                    .unwrap_or_default();
                self.write(&self.dim(&format!("  → {prefix}{tool_name}{summary}")));
                self.open_tool = Some(tool_call_id.clone());
            }
            RuntimeEvent::ToolCompleted {
                tool_call_id,
                tool_name,
                status,
                duration,
                error_code,
                error_message,
                ..
            } => {
                let outcome = match status {
                    ToolCallStatus::Ok => format!("✓ {}", elapsed(*duration)),
                    ToolCallStatus::Error => format!(
                        "✗ {} {}",
                        error_code
                            .as_deref()
                            .or(error_message.as_deref())
                            .unwrap_or("error"),
                        elapsed(*duration)
                    ),
                };
                self.tool_done(tool_call_id, tool_name, &prefix, &outcome);
            }
            RuntimeEvent::ToolFailed {
                tool_call_id,
                tool_name,
                error_message,
                ..
            } => {
                let outcome = format!("✗ {error_message}");
                self.tool_done(tool_call_id, tool_name, &prefix, &outcome);
            }
            _ => {}
        }
    }

    /// Ends the tool line of `tool_call_id` with `outcome`, or writes a
    /// line of its own when something came in between.
    fn tool_done(&mut self, tool_call_id: &str, tool_name: &str, prefix: &str, outcome: &str) {
        self.erase_spinner();
        self.in_text = false;
        if self.open_tool.as_deref() == Some(tool_call_id) {
            self.open_tool = None;
            let text = self.dim(&format!(" {outcome}"));
            self.write(&format!("{text}\n"));
        } else {
            self.fresh_line();
            let text = self.dim(&format!("  {outcome} {prefix}{tool_name}"));
            self.write(&format!("{text}\n"));
        }
    }

    /// Leaves the cursor at the start of a clean line.
    fn close(&mut self) {
        self.erase_spinner();
        self.end_tool_line();
    }
}

/// `12 ms`, `1.4 s`.
fn elapsed(milliseconds: u64) -> String {
    if milliseconds < 1000 {
        format!("{milliseconds} ms")
    } else {
        format!("{:.1} s", milliseconds as f64 / 1000.0)
    }
}
