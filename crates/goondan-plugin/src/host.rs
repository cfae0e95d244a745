//! One plugin process per entry file and its life: start, handshake,
//! calls matched by id, callbacks from the plugin, and restart with
//! backoff after the process crashed, hung or broke the protocol.
//!
//! ```text
//!  PluginHost ── call(method) ──► writer task ──► plugin stdin
//!      ▲                                              │
//!      │ oneshot by id                                ▼
//!  reader task ◄──────────────────────────────── plugin stdout
//!      ├─ response            → the waiting call
//!      ├─ request with `invocation` → that middleware invocation
//!      └─ other request       → HostServices (state, events, log)
//!  stderr task: each line, masked, to tracing
//!  watch task: kills the child when the host lets go of it
//! ```
//!
//! A failed process is never reused: the failure becomes the error of
//! every call that was waiting on it, and the next call starts a new one
//! after a backoff (0, 100 ms, 200 ms, ... capped at 5 s; reset after a
//! call succeeds). A restart replays the handshake and every
//! `extension.register` the host ran, so a restarted extension has the
//! same middlewares.
//!
//! This module does not know what a tool or a middleware is; it carries
//! methods and JSON.

use crate::error::PluginError;
use crate::launch::{self, Launch};
use crate::protocol::{
    self, error_codes, methods, Exports, InitializeParams, InitializeResult, Registrations,
    RequestId, RpcError, RpcMessage, PROTOCOL_VERSION,
};
use goondan_runtime::{EventBus, ExtensionState};
use goondan_types::{JsonValue, Secrets};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

/// The call timeout when none is configured.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest wait before a restart.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How many of the plugin's last stderr lines a crash report quotes.
const STDERR_TAIL: usize = 5;

/// How a host behaves.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// How long one call may wait for the plugin (time spent in the
    /// host's `next` does not count). Default 30 s.
    pub call_timeout: Duration,
    /// Values masked in every stderr line and error message, on top of
    /// the process-wide log secrets.
    pub secrets: Secrets,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            call_timeout: DEFAULT_CALL_TIMEOUT,
            secrets: Secrets::default(),
        }
    }
}

/// A plugin → host request that belongs to one middleware invocation
/// (`middleware.next`, `message.emit`): the reader hands it to the task
/// running that invocation.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub(crate) id: Option<RequestId>,
    pub(crate) method: String,
    pub(crate) params: JsonValue,
}

/// The handles an extension's callbacks reach: bound when the runtime
/// runs the extension's `register`.
#[derive(Clone)]
struct BoundExtension {
    state: ExtensionState,
    events: EventBus,
}

/// Serves plugin → host requests that belong to no invocation.
struct HostServices {
    label: String,
    extensions: Mutex<HashMap<String, BoundExtension>>,
}

impl HostServices {
    fn extension(&self, params: &JsonValue) -> Result<BoundExtension, RpcError> {
        let name = params
            .get("extension")
            .and_then(JsonValue::as_str)
            .ok_or_else(|| RpcError::new(error_codes::INVALID_PARAMS, "`extension` is missing"))?;
        lock(&self.extensions).get(name).cloned().ok_or_else(|| {
            RpcError::new(
                error_codes::INVALID_PARAMS,
                format!(
                    "`{name}` is not an extension of this plugin's agent (state and \
                     events belong to the extension that registered)"
                ),
            )
        })
    }

    fn handle(&self, method: &str, params: &JsonValue) -> Result<JsonValue, RpcError> {
        match method {
            methods::STATE_GET => {
                let extension = self.extension(params)?;
                Ok(serde_json::json!({ "value": extension.state.get() }))
            }
            methods::STATE_SET => {
                let extension = self.extension(params)?;
                let value = params.get("value").cloned().unwrap_or(JsonValue::Null);
                extension.state.set(value);
                Ok(JsonValue::Null)
            }
            methods::EVENTS_EMIT => {
                let extension = self.extension(params)?;
                let event = params
                    .get("event")
                    .and_then(JsonValue::as_str)
                    .ok_or_else(|| {
                        RpcError::new(error_codes::INVALID_PARAMS, "`event` is missing")
                    })?;
                // `args` holds every argument of `emit(event, ...args)`;
                // `payload` alone is the one-argument form.
                let args = match params.get("args") {
                    Some(JsonValue::Array(args)) => args.clone(),
                    Some(_) => {
                        return Err(RpcError::new(
                            error_codes::INVALID_PARAMS,
                            "`args` must be an array of the emitted arguments",
                        ))
                    }
                    None => vec![params.get("payload").cloned().unwrap_or(JsonValue::Null)],
                };
                let delivered = extension.events.emit_all(event, &args);
                Ok(serde_json::json!({ "delivered": delivered }))
            }
            methods::LOG => {
                log_line(&self.label, params);
                Ok(JsonValue::Null)
            }
            other => Err(RpcError::new(
                error_codes::METHOD_NOT_FOUND,
                format!("the host has no method `{other}`"),
            )),
        }
    }
}

/// A `log` notification, to tracing at its level.
fn log_line(label: &str, params: &JsonValue) {
    let level = params
        .get("level")
        .and_then(JsonValue::as_str)
        .unwrap_or("info");
    let message = params
        .get("message")
        .and_then(JsonValue::as_str)
        .unwrap_or("");
    let message = goondan_types::secret::mask_for_logs(message);
    match level {
        "error" => tracing::error!(plugin = label, "{message}"),
        "warn" => tracing::warn!(plugin = label, "{message}"),
        "debug" => tracing::debug!(plugin = label, "{message}"),
        "trace" => tracing::trace!(plugin = label, "{message}"),
        _ => tracing::info!(plugin = label, "{message}"),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section here leaves the data whole.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

type Waiter = oneshot::Sender<Result<JsonValue, PluginError>>;

/// What one running process shares between the host and its tasks.
struct Wire {
    label: String,
    writer: mpsc::UnboundedSender<String>,
    pending: Mutex<HashMap<u64, (String, Waiter)>>,
    invocations: Mutex<HashMap<String, mpsc::UnboundedSender<Incoming>>>,
    /// Set once the process failed; no call is sent to it after that.
    failed: Mutex<Option<PluginError>>,
    stderr_tail: Mutex<VecDeque<String>>,
    secrets: Secrets,
}

impl Wire {
    fn mask(&self, text: &str) -> String {
        let masked = self.secrets.mask(text);
        goondan_types::secret::mask_for_logs(&masked).into_owned()
    }

    /// Marks the process failed with `error` (the first failure wins) and
    /// fails every waiting call with it.
    fn fail(&self, error: PluginError) {
        let first = {
            let mut failed = lock(&self.failed);
            failed.get_or_insert(error).clone()
        };
        let waiting: Vec<_> = lock(&self.pending).drain().collect();
        for (_, (method, waiter)) in waiting {
            let error = match &first {
                PluginError::Crashed { entry, detail, .. } => PluginError::Crashed {
                    entry: entry.clone(),
                    method,
                    detail: detail.clone(),
                },
                other => other.clone(),
            };
            let _ = waiter.send(Err(error));
        }
        // Invocations see their channel close and their call fail.
        lock(&self.invocations).clear();
    }

    fn respond(&self, id: &RequestId, outcome: &Result<JsonValue, RpcError>) {
        let _ = self.writer.send(protocol::encode_response(id, outcome));
    }

    fn crash_detail(&self, status: Option<std::process::ExitStatus>) -> String {
        let status = match status {
            Some(status) => status.to_string(),
            None => "its stdout closed".to_string(),
        };
        let tail: Vec<String> = lock(&self.stderr_tail).iter().cloned().collect();
        if tail.is_empty() {
            status
        } else {
            format!("{status}; its last stderr lines: {}", tail.join(" | "))
        }
    }
}

/// One started process.
struct Connection {
    wire: Arc<Wire>,
    exports: Exports,
    /// Dropping it kills the process (the watch task waits on it).
    _kill: oneshot::Sender<()>,
    /// The OS process id, for logs and tests.
    pid: Option<u32>,
    /// Whether this process's failure was counted towards the backoff:
    /// every call in flight fails with it, but it is one failure.
    counted: AtomicBool,
    kill_now: Mutex<Option<oneshot::Sender<()>>>,
    /// The key of the last once-per-key part this process got
    /// ([`PluginHost::call_with_once`]).
    shipped_once: Mutex<Option<String>>,
}

impl Connection {
    fn alive(&self) -> bool {
        lock(&self.wire.failed).is_none()
    }

    fn kill(&self) {
        if let Some(kill) = lock(&self.kill_now).take() {
            let _ = kill.send(());
        }
    }
}

/// Gives up a call whose future is dropped before its answer (its Turn
/// was cancelled, its agent stops): the plugin is told (`$/cancel`) and
/// stopped, as after a timeout, because a running JavaScript or Python
/// function cannot be interrupted and would otherwise go on acting for a
/// Turn that is over. The next call starts the plugin again.
struct AbandonOnDrop<'a> {
    connection: &'a Connection,
    id: u64,
    invocation: Option<String>,
    armed: bool,
}

impl Drop for AbandonOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let wire = &self.connection.wire;
        lock(&wire.pending).remove(&self.id);
        if let Some(name) = &self.invocation {
            lock(&wire.invocations).remove(name);
        }
        let _ = wire.writer.send(protocol::encode_request(
            None,
            methods::CANCEL,
            &serde_json::json!({ "id": self.id }),
        ));
        // Marked failed now, not when the kill lands: the next call (the
        // next Turn's) must start a fresh process, not reach this one
        // while it dies.
        wire.fail(PluginError::Crashed {
            entry: wire.label.clone(),
            method: String::new(),
            detail: "stopped because a call it was running was given up (its Turn was \
                     cancelled or its agent stops)"
                .into(),
        });
        self.connection.kill();
    }
}

/// One extension `register` the host ran, replayed after a restart.
#[derive(Clone)]
struct Registration {
    extension: String,
    config: JsonValue,
}

struct Lifecycle {
    connection: Option<Arc<Connection>>,
    registrations: Vec<Registration>,
}

/// A plugin process for one entry file, started on first use and
/// restarted after a failure. Cheap to share (`Arc`); dropping the last
/// handle kills the process.
pub struct PluginHost {
    label: String,
    launch: Launch,
    options: HostOptions,
    services: Arc<HostServices>,
    lifecycle: tokio::sync::Mutex<Lifecycle>,
    next_id: AtomicU64,
    /// Failures since the last successful call; drives the backoff.
    failures: AtomicU32,
    started_once: AtomicBool,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("entry", &self.label)
            .field("program", &self.launch.program)
            .finish_non_exhaustive()
    }
}

/// The wait before start number `failures + 1`: none after one failure,
/// then 100 ms doubling up to [`MAX_BACKOFF`].
pub fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => goondan_types::backoff::Backoff::new(Duration::from_millis(100), MAX_BACKOFF)
            .delay(n - 2),
    }
}

impl PluginHost {
    /// A host for `launch`; `label` is the entry as written (errors and
    /// logs name it). Nothing starts until the first call.
    pub fn new(label: impl Into<String>, launch: Launch, options: HostOptions) -> Self {
        let label = label.into();
        PluginHost {
            services: Arc::new(HostServices {
                label: label.clone(),
                extensions: Mutex::new(HashMap::new()),
            }),
            label,
            launch,
            options,
            lifecycle: tokio::sync::Mutex::new(Lifecycle {
                connection: None,
                registrations: Vec::new(),
            }),
            next_id: AtomicU64::new(1),
            failures: AtomicU32::new(0),
            started_once: AtomicBool::new(false),
        }
    }

    /// The entry as written.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The call timeout.
    pub fn call_timeout(&self) -> Duration {
        self.options.call_timeout
    }

    /// What the module exports (starts the process if needed).
    pub async fn exports(&self) -> Result<Exports, PluginError> {
        Ok(self.connection().await?.exports.clone())
    }

    /// The id of the running plugin process, if one runs.
    pub async fn process_id(&self) -> Option<u32> {
        let lifecycle = self.lifecycle.lock().await;
        lifecycle
            .connection
            .as_ref()
            .filter(|connection| connection.alive())
            .and_then(|connection| connection.pid)
    }

    /// Starts the process now if it is not running (the next call would).
    pub async fn start(&self) -> Result<(), PluginError> {
        self.connection().await.map(drop)
    }

    /// Runs `register(api, config)` of extension `extension` in the
    /// plugin, and remembers it so a restarted process registers again.
    pub async fn register_extension(
        &self,
        extension: &str,
        config: &JsonValue,
    ) -> Result<Registrations, PluginError> {
        let connection = self.connection().await?;
        if !connection.exports.register {
            return Err(PluginError::NoRegister {
                entry: self.label.clone(),
            });
        }
        let registration = Registration {
            extension: extension.to_string(),
            config: config.clone(),
        };
        let registrations = self.send_register(&connection, &registration).await?;
        let mut lifecycle = self.lifecycle.lock().await;
        if !lifecycle
            .registrations
            .iter()
            .any(|known| known.extension == extension)
        {
            lifecycle.registrations.push(registration);
        }
        Ok(registrations)
    }

    /// Binds extension `extension`'s state and event bus, which its
    /// `state.*` and `events.emit` callbacks reach.
    pub fn bind_extension(&self, extension: &str, state: ExtensionState, events: EventBus) {
        lock(&self.services.extensions)
            .insert(extension.to_string(), BoundExtension { state, events });
    }

    /// Sends a notification (no answer) if the process runs; dropped
    /// otherwise (an event for a plugin that is restarting is lost, as
    /// it would be for one that crashed a moment later).
    pub fn notify(&self, method: &str, params: &JsonValue) {
        if let Ok(lifecycle) = self.lifecycle.try_lock() {
            if let Some(connection) = lifecycle.connection.as_ref().filter(|c| c.alive()) {
                let _ = connection
                    .wire
                    .writer
                    .send(protocol::encode_request(None, method, params));
            }
        }
    }

    /// Calls `method` and waits for its answer, at most the call timeout.
    pub async fn call(&self, method: &str, params: JsonValue) -> Result<JsonValue, PluginError> {
        self.call_with(method, params, None).await
    }

    /// Calls `method` for middleware invocation `invocation`: every
    /// plugin → host request naming it goes to `serve`, whose time does
    /// not count against the timeout.
    pub(crate) async fn call_with(
        &self,
        method: &str,
        params: JsonValue,
        invocation: Option<(&str, &mut (dyn InvocationServer + Send))>,
    ) -> Result<JsonValue, PluginError> {
        let connection = self.connection().await?;
        let outcome = self.request(&connection, method, params, invocation).await;
        self.settle(&connection, &outcome);
        outcome
    }

    /// [`PluginHost::call_with`] for params holding a large part that
    /// stays the same for many calls (a Turn's base messages): the part
    /// at JSON pointer `pointer` goes to this process only when `key`
    /// differs from the key of the last one it got, and is left out
    /// otherwise; the plugin keeps the last one. A restarted process has
    /// none, so it gets the part again.
    pub(crate) async fn call_with_once(
        &self,
        method: &str,
        mut params: JsonValue,
        invocation: (&str, &mut (dyn InvocationServer + Send)),
        (pointer, key): (&str, &str),
    ) -> Result<JsonValue, PluginError> {
        let connection = self.connection().await?;
        {
            let mut shipped = lock(&connection.shipped_once);
            if shipped.as_deref() == Some(key) {
                if let Some((parent, field)) = pointer.rsplit_once('/') {
                    if let Some(JsonValue::Object(parent)) = params.pointer_mut(parent) {
                        parent.remove(field);
                    }
                }
            } else {
                *shipped = Some(key.to_string());
            }
        }
        let outcome = self
            .request(&connection, method, params, Some(invocation))
            .await;
        self.settle(&connection, &outcome);
        outcome
    }

    /// Calls `method` with no timeout (a connector runs until it returns
    /// or the process ends), serving `invocation`'s callbacks.
    pub(crate) async fn call_unbounded(
        &self,
        method: &str,
        params: JsonValue,
        invocation: (&str, &mut (dyn InvocationServer + Send)),
    ) -> Result<JsonValue, PluginError> {
        let connection = self.connection().await?;
        let outcome = self
            .request_within(&connection, method, params, Some(invocation), None)
            .await;
        self.settle(&connection, &outcome);
        outcome
    }

    /// Counts a failure that ended the process, or resets the count after
    /// a call the plugin answered.
    fn settle(&self, connection: &Connection, outcome: &Result<JsonValue, PluginError>) {
        match outcome {
            Err(error) if error.ends_the_process() => {
                connection.kill();
                if !connection.counted.swap(true, Ordering::SeqCst) {
                    self.failures.fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(plugin = %self.label, code = error.code(), %error, "plugin failed; the next call starts it again");
                }
            }
            _ => self.failures.store(0, Ordering::SeqCst),
        }
    }

    async fn request(
        &self,
        connection: &Connection,
        method: &str,
        params: JsonValue,
        mut invocation: Option<(&str, &mut (dyn InvocationServer + Send))>,
    ) -> Result<JsonValue, PluginError> {
        let timeout = self.options.call_timeout;
        self.request_within(connection, method, params, invocation.take(), Some(timeout))
            .await
    }

    /// [`PluginHost::request`] with `timeout` (`None`: wait as long as
    /// the process lives, for a connector's run).
    async fn request_within(
        &self,
        connection: &Connection,
        method: &str,
        params: JsonValue,
        mut invocation: Option<(&str, &mut (dyn InvocationServer + Send))>,
        timeout: Option<Duration>,
    ) -> Result<JsonValue, PluginError> {
        let wire = &connection.wire;
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (waiter, mut answer) = oneshot::channel();
        let mut incoming = None;
        {
            lock(&wire.pending).insert(id, (method.to_string(), waiter));
            // `fail` marks the wire before it drains `pending`, so a call
            // registered after the drain sees the mark here.
            if let Some(error) = lock(&wire.failed).clone() {
                lock(&wire.pending).remove(&id);
                return Err(match error {
                    PluginError::Crashed { entry, detail, .. } => PluginError::Crashed {
                        entry,
                        method: method.to_string(),
                        detail,
                    },
                    other => other,
                });
            }
            if let Some((name, _)) = &invocation {
                let (sender, receiver) = mpsc::unbounded_channel();
                lock(&wire.invocations).insert(name.to_string(), sender);
                incoming = Some(receiver);
            }
        }
        let line = protocol::encode_request(Some(&RequestId::Number(id)), method, &params);
        if wire.writer.send(line).is_err() {
            lock(&wire.pending).remove(&id);
        }
        let mut abandon = AbandonOnDrop {
            connection,
            id,
            invocation: invocation.as_ref().map(|(name, _)| name.to_string()),
            armed: true,
        };
        let far_future = Duration::from_secs(86_400 * 365);
        let mut deadline = tokio::time::Instant::now() + timeout.unwrap_or(far_future);
        let outcome = loop {
            let next_incoming = async {
                match incoming.as_mut() {
                    Some(receiver) => receiver.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // Callbacks first: the reader queues them in the order the
                // plugin wrote them, so one written before the answer (an
                // `emitMessageEvent` right before `return`) is served
                // before the answer ends the call, never dropped.
                biased;
                Some(request) = next_incoming => {
                    if let Some((_, server)) = invocation.as_mut() {
                        let reply = server.serve(&request.method, request.params).await;
                        if let Some(id) = &request.id {
                            wire.respond(id, &reply);
                        }
                    }
                    // The plugin waited on the host meanwhile.
                    deadline = tokio::time::Instant::now() + timeout.unwrap_or(far_future);
                }
                answered = &mut answer => {
                    break answered.unwrap_or_else(|_| Err(PluginError::Crashed {
                        entry: self.label.clone(),
                        method: method.to_string(),
                        detail: "the host stopped reading it".into(),
                    }));
                }
                () = tokio::time::sleep_until(deadline), if timeout.is_some() => {
                    lock(&wire.pending).remove(&id);
                    let _ = wire.writer.send(protocol::encode_request(
                        None,
                        methods::CANCEL,
                        &serde_json::json!({ "id": id }),
                    ));
                    let error = PluginError::Timeout {
                        entry: self.label.clone(),
                        method: method.to_string(),
                        after: timeout.unwrap_or(far_future),
                    };
                    wire.fail(error.clone());
                    break Err(error);
                }
            }
        };
        abandon.armed = false;
        if let Some((name, _)) = &invocation {
            lock(&wire.invocations).remove(*name);
        }
        outcome
    }

    async fn send_register(
        &self,
        connection: &Connection,
        registration: &Registration,
    ) -> Result<Registrations, PluginError> {
        let params = serde_json::json!({
            "extension": registration.extension,
            "config": registration.config,
        });
        let outcome = self
            .request(connection, methods::EXTENSION_REGISTER, params, None)
            .await;
        self.settle(connection, &outcome);
        serde_json::from_value(outcome?).map_err(|error| PluginError::Protocol {
            entry: self.label.clone(),
            detail: format!("`extension.register` answered a malformed result: {error}"),
        })
    }

    /// The running connection, or a new one (after the backoff the
    /// failures so far call for).
    async fn connection(&self) -> Result<Arc<Connection>, PluginError> {
        let mut lifecycle = self.lifecycle.lock().await;
        if let Some(connection) = &lifecycle.connection {
            if connection.alive() {
                return Ok(Arc::clone(connection));
            }
        }
        lifecycle.connection = None;
        let wait = backoff(self.failures.load(Ordering::SeqCst));
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        if self.started_once.swap(true, Ordering::SeqCst) {
            tracing::info!(plugin = %self.label, "starting the plugin again");
        }
        let connection = match self.start_process().await {
            Ok(connection) => Arc::new(connection),
            Err(error) => {
                self.failures.fetch_add(1, Ordering::SeqCst);
                return Err(error);
            }
        };
        for registration in lifecycle.registrations.clone() {
            self.send_register(&connection, &registration).await?;
        }
        lifecycle.connection = Some(Arc::clone(&connection));
        Ok(connection)
    }

    async fn start_process(&self) -> Result<Connection, PluginError> {
        let mut process = launch::spawn(&self.launch).map_err(|error| PluginError::Start {
            entry: self.label.clone(),
            program: self.launch.program.display().to_string(),
            detail: error.to_string(),
        })?;
        let child = process.child_mut();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(PluginError::Start {
                entry: self.label.clone(),
                program: self.launch.program.display().to_string(),
                detail: "its stdio pipes were not created".into(),
            });
        };
        let pid = child.id();
        let (writer, mut lines_out) = mpsc::unbounded_channel::<String>();
        let wire = Arc::new(Wire {
            label: self.label.clone(),
            writer,
            pending: Mutex::new(HashMap::new()),
            invocations: Mutex::new(HashMap::new()),
            failed: Mutex::new(None),
            stderr_tail: Mutex::new(VecDeque::new()),
            secrets: self.options.secrets.clone(),
        });

        // Writer: one line at a time, in order.
        tokio::spawn(async move {
            let mut stdin = stdin;
            while let Some(mut line) = lines_out.recv().await {
                line.push('\n');
                if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
        });

        // Stderr: masked, to the agent's log, the last lines kept for a
        // crash report.
        let stderr_wire = Arc::clone(&wire);
        let stderr_done = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let masked = stderr_wire.mask(&line);
                tracing::info!(plugin = %stderr_wire.label, stream = "stderr", "{masked}");
                let mut tail = lock(&stderr_wire.stderr_tail);
                if tail.len() == STDERR_TAIL {
                    tail.pop_front();
                }
                tail.push_back(masked);
            }
        });

        // Watch: owns the process; kills its group (everything the plugin
        // started) when the plugin ended, when told or when the host lets
        // go, and reports how it ended.
        let (kill, killed) = oneshot::channel::<()>();
        let (kill_now, killed_now) = oneshot::channel::<()>();
        let (exit_sender, exit) = oneshot::channel::<Option<std::process::ExitStatus>>();
        tokio::spawn(async move {
            let status = tokio::select! {
                status = process.status() => status,
                _ = killed => None,
                _ = killed_now => None,
            };
            process.kill();
            let reaped = process.reap().await;
            let _ = exit_sender.send(status.or(reaped));
        });

        // Reader: responses to their calls, requests to their server.
        let reader_wire = Arc::clone(&wire);
        let services = Arc::clone(&self.services);
        tokio::spawn(async move {
            read_stdout(stdout, &reader_wire, &services).await;
            // The end of stdout: wait for the exit status and the last
            // stderr lines, then fail whatever still waits.
            let status = exit.await.ok().flatten();
            let _ = tokio::time::timeout(Duration::from_millis(200), stderr_done).await;
            let detail = reader_wire.crash_detail(status);
            reader_wire.fail(PluginError::Crashed {
                entry: reader_wire.label.clone(),
                method: String::new(),
                detail,
            });
        });

        let connection = Connection {
            wire,
            exports: Exports::default(),
            _kill: kill,
            pid,
            counted: AtomicBool::new(false),
            kill_now: Mutex::new(Some(kill_now)),
            shipped_once: Mutex::new(None),
        };
        let params = serde_json::to_value(InitializeParams {
            protocol_version: PROTOCOL_VERSION,
            entry: self.launch_entry(),
        })
        .unwrap_or(JsonValue::Null);
        let answer = self
            .request(&connection, methods::INITIALIZE, params, None)
            .await;
        let initialized: InitializeResult = match answer {
            Ok(value) => serde_json::from_value(value).map_err(|error| PluginError::Protocol {
                entry: self.label.clone(),
                detail: format!("`initialize` answered a malformed result: {error}"),
            }),
            Err(PluginError::User { message, .. }) => Err(PluginError::Entry {
                entry: self.label.clone(),
                detail: format!("the module did not load: {message}"),
                fix: "run the file with its runtime to see the error; the plugin's stderr \
                      is in the agent log"
                    .into(),
            }),
            Err(error) => Err(error),
        }
        .inspect_err(|_| connection.kill())?;
        if initialized.protocol_version != PROTOCOL_VERSION {
            connection.kill();
            return Err(PluginError::Protocol {
                entry: self.label.clone(),
                detail: format!(
                    "it speaks protocol version {}, this host speaks {PROTOCOL_VERSION}",
                    initialized.protocol_version
                ),
            });
        }
        Ok(Connection {
            exports: initialized.exports,
            ..connection
        })
    }

    fn launch_entry(&self) -> String {
        // The shims take the entry as their last argument; an executable
        // is the entry.
        self.launch
            .args
            .last()
            .map(|arg| arg.to_string_lossy().into_owned())
            .unwrap_or_else(|| self.launch.program.display().to_string())
    }

    /// Asks the plugin to exit and waits for its answer (at most the call
    /// timeout); the process is killed when the host is dropped anyway.
    pub async fn shutdown(&self) {
        let connection = self.lifecycle.lock().await.connection.take();
        if let Some(connection) = connection.filter(|c| c.alive()) {
            let _ = self
                .request(&connection, methods::SHUTDOWN, JsonValue::Null, None)
                .await;
        }
    }
}

/// Reads stdout until it ends or breaks the protocol.
async fn read_stdout(
    stdout: tokio::process::ChildStdout,
    wire: &Arc<Wire>,
    services: &Arc<HostServices>,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(protocol::MAX_LINE_BYTES as u64 + 1)
            .read_line(&mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if line.len() > protocol::MAX_LINE_BYTES {
            return protocol_failure(wire, "a line longer than 8 MiB".to_string());
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        match protocol::decode(text) {
            Ok(RpcMessage::Response { id, outcome }) => {
                let RequestId::Number(number) = id else {
                    continue;
                };
                if let Some((_, waiter)) = lock(&wire.pending).remove(&number) {
                    let _ = waiter.send(outcome.map_err(user_error));
                }
            }
            Ok(RpcMessage::Request { id, method, params }) => {
                let invocation = params
                    .get("invocation")
                    .and_then(JsonValue::as_str)
                    .and_then(|name| lock(&wire.invocations).get(name).cloned());
                match invocation {
                    Some(sender) => {
                        let _ = sender.send(Incoming { id, method, params });
                    }
                    None if params.get("invocation").is_some() => {
                        if let Some(id) = id {
                            wire.respond(
                                &id,
                                &Err(RpcError::new(
                                    error_codes::INVALID_PARAMS,
                                    "that invocation is over: call next and emit only while \
                                     the middleware runs",
                                )),
                            );
                        }
                    }
                    None => {
                        let reply = services.handle(&method, &params);
                        if let Some(id) = id {
                            wire.respond(&id, &reply);
                        }
                    }
                }
            }
            Err(error) => {
                let shown: String = wire.mask(text).chars().take(200).collect();
                return protocol_failure(
                    wire,
                    format!("it printed `{shown}` on stdout ({})", error.reason),
                );
            }
        }
    }
}

fn protocol_failure(wire: &Wire, detail: String) {
    wire.fail(PluginError::Protocol {
        entry: wire.label.clone(),
        detail,
    });
}

/// A JSON-RPC error from the plugin as a [`PluginError::User`]: the
/// user's code threw (or the shim refused the call).
fn user_error(error: RpcError) -> PluginError {
    let data = error.data.unwrap_or(JsonValue::Null);
    let text = |key: &str| {
        data.get(key)
            .and_then(JsonValue::as_str)
            .map(str::to_string)
    };
    let code = text("code").or_else(|| match error.code {
        error_codes::METHOD_NOT_FOUND
        | error_codes::INVALID_PARAMS
        | error_codes::INVALID_REQUEST => Some("E_PLUGIN_PROTOCOL".to_string()),
        _ => None,
    });
    PluginError::User {
        code,
        name: text("name"),
        message: error.message,
        suggestion: text("suggestion"),
    }
}

/// Serves the plugin → host requests of one middleware invocation.
pub(crate) trait InvocationServer {
    /// Answers `method` with `params`.
    fn serve<'a>(
        &'a mut self,
        method: &'a str,
        params: JsonValue,
    ) -> futures_util::future::BoxFuture<'a, Result<JsonValue, RpcError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_starts_at_zero_doubles_and_is_capped() {
        let waits: Vec<u128> = (0..10).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(waits, [0, 0, 100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
