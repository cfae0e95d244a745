//! Turning bytes cut by a size cap into text: a character the cap split
//! in two is dropped rather than shown as a replacement character, and
//! invalid UTF-8 elsewhere is replaced.

/// Decodes `bytes`, a prefix of some longer (or equal) byte string.
pub(crate) fn decode_prefix(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(error) if error.error_len().is_none() => {
            String::from_utf8_lossy(&bytes[..error.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_characters_are_dropped_and_invalid_bytes_replaced() {
        let text = "héllo".as_bytes();
        assert_eq!(decode_prefix(&text[..2]), "h");
        assert_eq!(decode_prefix(&text[..3]), "hé");
        assert_eq!(decode_prefix(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(decode_prefix(b""), "");
    }
}
