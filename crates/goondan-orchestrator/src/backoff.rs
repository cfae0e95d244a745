//! Crash-loop backoff (`runtime.md` §4.5).
//!
//! The spec gives both the formula `min(initial * 2^(n-1), max)` and an
//! example where the sixth crash waits 1 s and the seventh 2 s. Both agree
//! when `n` counts the crashes past the threshold, which is how this module
//! reads it: crashes 1 to 5 respawn at once, crash 6 waits 1 s, crash 7
//! 2 s, and so on up to 5 minutes.

use goondan_types::backoff::Backoff;
use std::time::Duration;

/// Crashes tolerated before backing off.
pub const CRASH_LOOP_THRESHOLD: u32 = 5;
/// The first backoff delay.
pub const INITIAL_BACKOFF_MS: u64 = 1_000;
/// The longest backoff delay.
pub const MAX_BACKOFF_MS: u64 = 300_000;

/// The respawn delays past the threshold.
const CRASH_BACKOFF: Backoff = Backoff::new(
    Duration::from_millis(INITIAL_BACKOFF_MS),
    Duration::from_millis(MAX_BACKOFF_MS),
);

/// The wait before the next respawn after `consecutive_crashes` crashes;
/// `None` means respawn at once.
pub fn respawn_delay(consecutive_crashes: u32) -> Option<Duration> {
    let past_threshold = consecutive_crashes.checked_sub(CRASH_LOOP_THRESHOLD)?;
    if past_threshold == 0 {
        return None;
    }
    Some(CRASH_BACKOFF.delay(past_threshold - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_spec_example() {
        let table: Vec<Option<u64>> = (1..=16)
            .map(|n| respawn_delay(n).map(|d| d.as_millis() as u64))
            .collect();
        assert_eq!(&table[..5], &[None; 5]);
        assert_eq!(table[5], Some(1_000));
        assert_eq!(table[6], Some(2_000));
        assert_eq!(table[7], Some(4_000));
        assert_eq!(table[13], Some(256_000));
        assert_eq!(table[14], Some(300_000));
        assert_eq!(respawn_delay(u32::MAX).unwrap().as_millis(), 300_000);
    }
}
