//! Exponential backoff: the one rule every retry loop of the workspace
//! waits by (a crashed agent's respawn, a plugin host's restart, a model
//! call's retry, Telegram's long polling, an MCP server's event stream),
//! each with its own first delay and ceiling.

use std::time::Duration;

/// A delay that doubles from `first` up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay before any doubling.
    pub first: Duration,
    /// The longest delay.
    pub max: Duration,
}

impl Backoff {
    /// A backoff from `first` doubling up to `max`.
    pub const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max }
    }

    /// `first * 2^doublings`, at most `max`; saturating, so any count is
    /// safe.
    pub fn delay(&self, doublings: u32) -> Duration {
        self.first
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_doubles_from_its_first_delay_to_its_ceiling_whatever_the_count() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let delays: Vec<u128> = (0..8).map(|n| backoff.delay(n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(5));
        let huge = Backoff::new(Duration::from_secs(u64::MAX / 2), Duration::MAX);
        assert_eq!(huge.delay(40), Duration::MAX);
    }
}
