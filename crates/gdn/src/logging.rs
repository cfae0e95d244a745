//! Structured logs: JSON lines on stderr, one per event, with the span
//! fields (agent, instance, turn, trace) the runtime attaches. The level
//! comes from `GOONDAN_LOG_LEVEL` (`debug`, `info`, `warn`, `error`);
//! without it, agent processes log at `info` into their log files and a
//! foreground `gdn run` only says what is wrong unless `-v` is given.
//! Only long-running modes (`run`, `agent`) install it, so quick commands
//! such as `validate` pay nothing.

use tracing_subscriber::EnvFilter;

/// Installs the JSON subscriber on stderr, at `GOONDAN_LOG_LEVEL` or else
/// `default_level`.
pub(crate) fn init_json_stderr(default_level: &str) {
    let level = std::env::var("GOONDAN_LOG_LEVEL").unwrap_or_else(|_| default_level.to_string());
    let filter = EnvFilter::try_new(&level).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .with_writer(std::io::stderr)
        .try_init();
}
