//! "Did you mean" for unknown names, kinds and fields, by edit distance.

/// The candidate closest to `input`, when it is close enough to be a typo:
/// at most a third of the input's length away (and at least 1 allowed), or
/// one name being a prefix of the other (`claude` for `claude-sonnet`).
pub(crate) fn closest<'a>(
    input: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let allowed = (input.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .filter(|candidate| *candidate != input)
        .map(|candidate| (strsim::damerau_levenshtein(input, candidate), candidate))
        .filter(|(distance, candidate)| {
            *distance <= allowed
                || (input.len() >= 3
                    && (candidate.starts_with(input) || input.starts_with(candidate)))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn suggests_only_near_misses() {
        let names = ["claude-sonnet", "gpt", "gemini"];
        assert_eq!(closest("claude-sonet", names), Some("claude-sonnet"));
        assert_eq!(closest("Modle", ["Model", "Agent"]), Some("Model"));
        assert_eq!(closest("claude", names), Some("claude-sonnet"));
        assert_eq!(closest("zzz", names), None);
    }
}
