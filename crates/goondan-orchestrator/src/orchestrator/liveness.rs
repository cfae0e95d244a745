//! Liveness: every ready process is pinged at an interval
//! ([`RuntimeMessage::Ping`]), and one that has said nothing for the
//! deadline (by default three intervals) is killed with SIGKILL and
//! counted as a crash (`E_AGENT_UNRESPONSIVE`): what it held is
//! redelivered, and the crash ledger and its backoff apply.
//!
//! Anything a process says proves it alive, not only a pong. The child
//! answers from its IPC reader, never from its Turn loop, so a long Turn
//! (a slow model, a long tool call) is not taken for a dead process; a
//! stopped (SIGSTOP) or wedged one is. A process that has not finished its
//! handshake is not pinged: its start-up has its own bounds.
//!
//! What this module does not own: the kill itself and the exit that
//! follows (`supervision`), which treats the unresponsive process like any
//! other crash.

use super::Orchestrator;
use goondan_ipc::protocol::Ping;
use goondan_ipc::{RoutingKey, RuntimeMessage, ORCHESTRATOR};
use std::time::Duration;
use tokio::time::Instant;

/// The environment variable that sets the ping interval in milliseconds
/// (tests use a short one).
pub const LIVENESS_INTERVAL_ENV: &str = "GOONDAN_LIVENESS_INTERVAL_MS";

/// How often processes are pinged and how much silence kills one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// The time between two pings.
    pub interval: Duration,
    /// How many intervals of silence make a process unresponsive.
    pub missed_pings: u32,
}

impl Default for Liveness {
    /// A ping every 10 s; 30 s of silence kills.
    fn default() -> Self {
        Liveness {
            interval: Duration::from_secs(10),
            missed_pings: 3,
        }
    }
}

impl Liveness {
    /// The default, with the interval taken from
    /// [`LIVENESS_INTERVAL_ENV`] when it holds a positive number.
    pub fn from_env() -> Self {
        let interval = std::env::var(LIVENESS_INTERVAL_ENV)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map(Duration::from_millis);
        Liveness {
            interval: interval.unwrap_or(Liveness::default().interval),
            ..Liveness::default()
        }
    }

    /// How long a process may stay silent.
    pub fn deadline(&self) -> Duration {
        self.interval.saturating_mul(self.missed_pings.max(1))
    }
}

/// The liveness of one instance's current process.
#[derive(Debug, Default)]
pub(crate) struct LivenessState {
    /// When to ping (or judge) next; `None` while not pinged.
    pub(crate) next_check_at: Option<Instant>,
    /// When the process last said anything.
    pub(crate) last_heard: Option<Instant>,
    /// The sequence number of the last ping.
    pub(crate) seq: u64,
    /// Set when the process was killed for its silence, so its end is
    /// reported as that.
    pub(crate) unresponsive: bool,
}

impl Orchestrator {
    /// The process serving `key` finished its handshake: pinging starts.
    pub(super) fn start_pinging(&mut self, key: &RoutingKey) {
        let interval = self.liveness.interval;
        if let Some(instance) = self.instances.get_mut(key) {
            let now = Instant::now();
            instance.liveness.last_heard = Some(now);
            instance.liveness.next_check_at = Some(on_tick(now + interval, interval));
        }
    }

    /// The process serving `key` said something: it is alive.
    pub(super) fn heard_from(&mut self, key: &RoutingKey) {
        if let Some(instance) = self.instances.get_mut(key) {
            instance.liveness.last_heard = Some(Instant::now());
        }
    }

    /// Pings every process whose check is due, and kills the ones silent
    /// past the deadline.
    pub(super) fn check_liveness(&mut self) {
        let now = Instant::now();
        let interval = self.liveness.interval;
        let deadline = self.liveness.deadline();
        for (key, instance) in self.instances.iter_mut() {
            let state = &mut instance.liveness;
            if state.next_check_at.is_none_or(|at| now < at) {
                continue;
            }
            let ending = instance.ending.exit.is_some() || instance.ending.stream_ended;
            let (Some(link), Some(control)) = (instance.link.clone(), instance.control.as_mut())
            else {
                state.next_check_at = None;
                continue;
            };
            if ending {
                state.next_check_at = None;
                continue;
            }
            let last_heard = state.last_heard.unwrap_or(now);
            let silent = now.saturating_duration_since(last_heard);
            if silent >= deadline {
                tracing::error!(
                    key = %key,
                    code = "E_AGENT_UNRESPONSIVE",
                    silent_ms = silent.as_millis() as u64,
                    deadline_ms = deadline.as_millis() as u64,
                    "the process answered no ping within the deadline; killing it (SIGKILL) and counting a crash"
                );
                state.unresponsive = true;
                state.next_check_at = None;
                control.kill();
                continue;
            }
            state.seq += 1;
            let ping = RuntimeMessage::Ping(Ping { seq: state.seq })
                .to_message(ORCHESTRATOR, &key.to_string());
            // A full link is a process that does not read: the missing
            // answer counts against it like any other.
            let _ = self.transport.try_send(&link, ping);
            let next = (now + interval).min(last_heard + deadline).max(now);
            state.next_check_at = Some(on_tick(next, interval));
        }
    }
}

/// `at`, moved later to the next multiple of a quarter of the ping
/// interval (counted from the process's first use of this function).
/// Checks then fall due together, a quarter interval at a time, instead
/// of one wake-up of the main loop per process: with thousands of agents,
/// each wake-up's pass over them is what would cost.
fn on_tick(at: Instant, interval: Duration) -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let tick = (interval / 4).max(Duration::from_millis(1));
    let since = at.saturating_duration_since(origin);
    let ticks = since.as_nanos().div_ceil(tick.as_nanos());
    let rounded = tick.saturating_mul(u32::try_from(ticks).unwrap_or(u32::MAX));
    origin + rounded.max(since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_the_interval_times_the_missed_pings() {
        let cases = [
            (Liveness::default(), Duration::from_secs(30)),
            (
                Liveness {
                    interval: Duration::from_millis(200),
                    missed_pings: 3,
                },
                Duration::from_millis(600),
            ),
            (
                Liveness {
                    interval: Duration::from_secs(1),
                    missed_pings: 0,
                },
                Duration::from_secs(1),
            ),
        ];
        for (liveness, deadline) in cases {
            assert_eq!(liveness.deadline(), deadline, "{liveness:?}");
        }
    }
}
