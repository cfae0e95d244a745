//! Which instance (conversation) a request goes to.

/// The longest instance key a client may name.
pub(crate) const MAX_KEY_CHARS: usize = 128;

/// Whether `key` may name an instance: 1 to [`MAX_KEY_CHARS`]
/// characters, none of them a control character.
pub(crate) fn is_valid_key(key: &str) -> bool {
    !key.is_empty() && key.chars().count() <= MAX_KEY_CHARS && !key.chars().any(char::is_control)
}

/// A new instance key no client named: `<prefix>-<32 hex digits>`.
pub(crate) fn fresh_key(prefix: &str) -> String {
    format!("{prefix}-{}", goondan_types::trace::random_hex(16))
}
