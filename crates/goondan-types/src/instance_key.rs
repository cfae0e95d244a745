//! What an instance key may hold (issue 47): any text a platform gives
//! (user ids, chat ids, `user:123`, unicode names) except characters that
//! change how the key is shown rather than what it is. A key is printed in
//! `gdn instance list`, logs, approvals and the Studio; a control character
//! (a newline, an escape sequence) could forge lines there, and a bidi
//! override (U+202E) shows `evil` as `live`.

/// The code every door refuses such a key with.
pub const INSTANCE_KEY_INVALID: &str = "E_INSTANCE_KEY_INVALID";

/// The first character of `key` that an instance key may not hold, if any:
/// a control character (C0, DEL, C1), a bidirectional formatting
/// character (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069), a
/// line or paragraph separator (U+2028, U+2029) or a byte order mark
/// (U+FEFF).
pub fn forbidden_character(key: &str) -> Option<char> {
    key.chars().find(|&c| {
        c.is_control()
            || matches!(
                c,
                '\u{061C}'
                    | '\u{200E}'
                    | '\u{200F}'
                    | '\u{202A}'..='\u{202E}'
                    | '\u{2066}'..='\u{2069}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{FEFF}'
            )
    })
}

/// `key` for an error message: each forbidden character written as its
/// escape (`\u{202e}`), so the message itself shows what was refused.
pub fn escaped(key: &str) -> String {
    key.chars()
        .map(|c| {
            if forbidden_character(c.encode_utf8(&mut [0; 4])).is_some() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_keys_pass_and_what_changes_the_display_is_refused() {
        for good in [
            "default",
            "user:123",
            "telegram:-100200",
            "김철수",
            "a b",
            "👩‍💻",
        ] {
            assert_eq!(forbidden_character(good), None, "{good}");
        }
        for (bad, first) in [
            ("evil\u{202E}live", '\u{202E}'),
            ("a\nb", '\n'),
            ("\u{1b}[31mred", '\u{1b}'),
            ("tab\there", '\t'),
            ("nul\0", '\0'),
            ("c1\u{85}", '\u{85}'),
            ("iso\u{2067}late", '\u{2067}'),
            ("bom\u{FEFF}", '\u{FEFF}'),
            ("line\u{2028}sep", '\u{2028}'),
        ] {
            assert_eq!(forbidden_character(bad), Some(first), "{bad:?}");
        }
        assert_eq!(escaped("evil\u{202E}live"), "evil\\u{202e}live");
    }
}
