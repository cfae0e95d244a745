//! Subresource-integrity strings (`sha512-<base64>`), as the lockfile and
//! the registry metadata carry them, plus the legacy `shasum` (SHA-1 hex)
//! the registry metadata also lists.

use aws_lc_rs::digest;
use base64::Engine;

/// The integrity of `bytes`: `sha512-` and the base64 of its SHA-512.
pub fn integrity_of(bytes: &[u8]) -> String {
    let hash = digest::digest(&digest::SHA512, bytes);
    format!(
        "sha512-{}",
        base64::engine::general_purpose::STANDARD.encode(hash.as_ref())
    )
}

/// The SHA-1 of `bytes` in hex: the `dist.shasum` field, informative only
/// (nothing trusts it; integrity is what is checked).
pub fn shasum_of(bytes: &[u8]) -> String {
    let hash = digest::digest(&digest::SHA1_FOR_LEGACY_USE_ONLY, bytes);
    hash.as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Whether `bytes` match `expected`, compared in constant time.
pub fn matches(bytes: &[u8], expected: &str) -> bool {
    let actual = integrity_of(bytes);
    goondan_http::token::same_secret(actual.as_bytes(), expected.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integrity_is_sha512_base64() {
        // SHA-512 of the empty string, from FIPS 180-2 test vectors.
        assert_eq!(
            integrity_of(b""),
            "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKHfuwvY7kxvUdBeoGlODJ6+SfaPg=="
        );
        assert!(matches(b"abc", &integrity_of(b"abc")));
        assert!(!matches(b"abd", &integrity_of(b"abc")));
        assert_eq!(
            shasum_of(b"abc"),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }
}
