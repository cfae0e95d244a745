//! Structured logs: JSON lines on stderr, one per event, with the span
//! fields (agent, instance, turn, trace) the runtime attaches. The level
//! comes from `GOONDAN_LOG_LEVEL` (`debug`, `info`, `warn`, `error`);
//! without it, agent processes log at `info` into their log files and a
//! foreground `gdn run` only says what is wrong unless `-v` is given.
//! Only long-running modes (`run`, `agent`, `connector`) install it, so
//! quick commands such as `validate` pay nothing. Every line goes through
//! [`goondan_types::secret::mask_for_logs`] on its way out, so a secret
//! the process holds never reaches a log file, whatever logged it.

use goondan_types::secret::mask_for_logs;
use std::io::Write;
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
        .with_writer(|| Masked(std::io::stderr().lock()))
        .try_init();
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
