//! Structured logs and what of them a person sees. A process whose stderr
//! is a file or a pipe (an agent, a connector, a detached `gdn run`, a
//! service) writes JSON lines there, one per event, with the span fields
//! (agent, instance, turn, trace) the runtime attaches. A process whose
//! stderr is a terminal (a foreground `gdn run`, `gdn studio`) never shows
//! JSON there: its structured log goes to its log file once the caller
//! names one ([`log_to_file`]), and the terminal gets one readable line per
//! warning or error, shaped like every other `error[…]` line, unless the
//! event says it was already `reported` to whoever asked (an agent that
//! cannot start fails the request waiting on it, and that answer is what
//! the console prints).
//!
//! The level comes from `GOONDAN_LOG_LEVEL` (`debug`, `info`, `warn`,
//! `error`); without it, agent processes log at `info` into their log
//! files and a foreground `gdn run` shows only what is wrong unless `-v`
//! is given. Only long-running modes (`run`, `agent`, `connector`,
//! `studio`) install a subscriber, so quick commands such as `validate`
//! pay nothing. Every line goes through
//! [`goondan_types::secret::mask_for_logs`] on its way out, so a secret
//! the process holds never reaches a log file or a terminal, whatever
//! logged it.

use goondan_types::secret::mask_for_logs;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The log file of a terminal-attached process, once named.
static LOG_FILE: Mutex<Option<std::fs::File>> = Mutex::new(None);

fn level_filter(default_level: &str) -> EnvFilter {
    let level = std::env::var("GOONDAN_LOG_LEVEL").unwrap_or_else(|_| default_level.to_string());
    EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Installs the JSON subscriber on stderr, at `GOONDAN_LOG_LEVEL` or else
/// `default_level`: for processes whose stderr is their log file.
pub(crate) fn init_json_stderr(default_level: &str) {
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(level_filter(default_level))
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(|| Masked(std::io::stderr().lock()))
        .try_init();
}

/// Installs the subscriber of a command a person may be watching: JSON on
/// stderr when stderr is not a terminal (as [`init_json_stderr`]);
/// otherwise JSON into the log file named later by [`log_to_file`] (at
/// `GOONDAN_LOG_LEVEL`, else `info`) and readable lines on the terminal
/// at `console_level` (`warn`, or `info` with `-v`).
pub(crate) fn init_console(console_level: Level) {
    if !std::io::stderr().is_terminal() {
        let default = if console_level >= Level::INFO {
            "info"
        } else {
            "warn"
        };
        init_json_stderr(default);
        return;
    }
    let file = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(|| Masked(FileSink))
        .with_filter(level_filter("info"));
    let console = Readable::default().with_filter(
        tracing_subscriber::filter::LevelFilter::from_level(console_level),
    );
    let _ = tracing_subscriber::registry()
        .with(file)
        .with(console)
        .try_init();
}

/// What a terminal shows of the log: warnings and errors, and with `-v`
/// what the swarm does.
pub(crate) fn console_level(global: &crate::cli::GlobalArgs) -> Level {
    if global.verbose > 0 {
        Level::INFO
    } else {
        Level::WARN
    }
}

/// Sends the structured log of a terminal-attached process to `path`
/// (appended, owner-only), from now on. Best effort: a file that cannot be
/// opened leaves the log where it was (nowhere), and says so once.
pub(crate) fn log_to_file(path: &Path) {
    if !std::io::stderr().is_terminal() {
        return;
    }
    let opened = path
        .parent()
        .map_or(Ok(()), goondan_store::owner_only::create_dir_all)
        .and_then(|()| {
            goondan_store::owner_only::open_options()
                .create(true)
                .append(true)
                .open(path)
        });
    match opened {
        Ok(file) => *LOG_FILE.lock().unwrap_or_else(|p| p.into_inner()) = Some(file),
        Err(error) => eprintln!(
            "warning: cannot open the log file {}: {error}; structured logs are not kept",
            path.display()
        ),
    }
}

/// Writes to the named log file, or nowhere before one is named.
struct FileSink;

impl Write for FileSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(file) = LOG_FILE.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            file.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One readable line per event on the terminal: `error[CODE]: message
/// (agent:instance)` and `   = help: …`, as [`crate::render::error`]
/// prints them.
#[derive(Default)]
struct Readable {
    /// The lines already shown.
    shown: Mutex<std::collections::HashSet<String>>,
}

/// How many distinct lines [`Readable`] remembers; past that a terminal
/// has seen enough, and the log file has the rest.
const MAX_REMEMBERED: usize = 256;

impl<S: Subscriber> Layer<S> for Readable {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let label = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            _ => "debug",
        };
        let mut line = label.to_string();
        // Only a coded error's code: other `code` fields (an exit status)
        // are details for the log file.
        if let Some(code) = fields.code.filter(|code| code.starts_with("E_")) {
            line.push_str(&format!("[{code}]"));
        }
        line.push_str(": ");
        line.push_str(&fields.message);
        if let Some(key) = fields.key {
            line.push_str(&format!(" ({key})"));
        }
        line.push('\n');
        if let Some(help) = fields.suggestion.filter(|help| !help.is_empty()) {
            line.push_str(&format!("   = help: {help}\n"));
        }
        // A problem is said once: a crash loop repeats the same lines. One
        // already reported to its requester counts as said.
        let mut shown = self.shown.lock().unwrap_or_else(|p| p.into_inner());
        if shown.len() >= MAX_REMEMBERED || !shown.insert(line.clone()) || fields.reported {
            return;
        }
        let _ = std::io::stderr()
            .lock()
            .write_all(mask_for_logs(&line).as_bytes());
    }
}

/// The fields of an event a readable line shows.
#[derive(Default)]
struct Fields {
    message: String,
    code: Option<String>,
    suggestion: Option<String>,
    key: Option<String>,
    reported: bool,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value.to_string());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if field.name() == "reported" {
            self.reported = value;
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record(field, format!("{value:?}"));
    }
}

impl Fields {
    fn record(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.message = value,
            "code" => self.code = Some(value),
            "suggestion" => self.suggestion = Some(value),
            "key" | "connection" | "plugin" => self.key = Some(value),
            _ => {}
        }
    }
}

/// A writer that masks the process's secrets in what goes through it.
/// The JSON formatter hands over each log line in one `write`, so a secret
/// is never split between two calls.
struct Masked<W>(W);

impl<W: Write> Write for Masked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => self.0.write_all(mask_for_logs(text).as_bytes())?,
            Err(_) => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_reach_the_file_with_the_secrets_masked() {
        let secrets: goondan_types::Secrets = [("SIGNING_SECRET", "whsec-log-test-91c2")]
            .into_iter()
            .collect();
        goondan_types::secret::mask_in_logs(&secrets);
        let mut written = Masked(Vec::new());
        written
            .write_all(b"{\"message\":\"bad config: whsec-log-test-91c2\"}\n")
            .unwrap();
        let written = String::from_utf8(written.0).unwrap();
        assert!(!written.contains("whsec-log-test-91c2"), "{written}");
        assert!(written.contains("[REDACTED:SIGNING_SECRET]"), "{written}");
    }
}
