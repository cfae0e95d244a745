//! The bearer tokens that guard a port (the Studio beyond loopback,
//! `gdn mcp serve --http --token-env`, `gdn registry serve --token-file`):
//! how long one must be, a new one, and comparing one.
//!
//! One rule for every port, so that no port is the weak way in: whoever
//! holds a token runs Turns (the agents' `bash`) or publishes packages,
//! and a short one can be guessed over the network.

use crate::error::HttpError;
use rand::RngExt;

/// The fewest characters a token that guards a port may have. A
/// generated token ([`generate`]) has 64.
pub const MIN_TOKEN_CHARS: usize = 24;

/// Refuses a token shorter than [`MIN_TOKEN_CHARS`] characters.
pub fn check_strength(token: &str) -> Result<(), HttpError> {
    let length = token.chars().count();
    if length < MIN_TOKEN_CHARS {
        return Err(HttpError::WeakToken {
            length,
            minimum: MIN_TOKEN_CHARS,
        });
    }
    Ok(())
}

/// A new token: 32 random bytes as 64 hex characters.
pub fn generate() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether `given` is `expected`, without stopping at the first
/// difference, so the time taken does not tell how much of a guess was
/// right.
pub fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |difference, (a, b)| difference | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_under_the_minimum_are_refused() {
        let cases = [
            ("", false),
            ("x", false),
            (&"a".repeat(MIN_TOKEN_CHARS - 1), false),
            (&"a".repeat(MIN_TOKEN_CHARS), true),
            // Characters, not bytes: 23 two-byte characters are too few.
            (&"é".repeat(MIN_TOKEN_CHARS - 1), false),
        ];
        for (token, accepted) in cases {
            assert_eq!(check_strength(token).is_ok(), accepted, "{token:?}");
        }
        let refused = check_strength("x").unwrap_err();
        assert_eq!(
            refused,
            HttpError::WeakToken {
                length: 1,
                minimum: MIN_TOKEN_CHARS
            }
        );
        assert_eq!(refused.code(), "E_TOKEN_WEAK");
    }

    #[test]
    fn a_generated_token_passes_and_differs_each_time() {
        let first = generate();
        assert_eq!(first.len(), 64);
        assert!(check_strength(&first).is_ok());
        assert_ne!(first, generate());
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
    }
}
