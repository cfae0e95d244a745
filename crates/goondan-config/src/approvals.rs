//! The pattern language of approval gates, shared by the base
//! `tool-approval` extension and `Swarm.spec.policy.approvals`: a glob
//! (`*`, `?`, `[…]`) matched against the whole text, or a regex written
//! `re:…` or `/…/`. The loader compiles them so a bad one is a
//! diagnostic; the gate compiles them again when the agent starts.
//!
//! It does not own what a pattern is matched against (the gate reads a
//! `bash__exec` command as shell, `goondan-base`).

/// The builtin entry name (`builtin:<name>`) an agent process gives the
/// Swarm's `policy.approvals` gate. It is not a resource of
/// `@goondan/base`: no bundle can list it, so an agent's own
/// configuration cannot replace or remove it.
pub const SWARM_GATE_ENTRY: &str = "swarm-approvals";

/// The export whose `command` argument a gate reads as shell.
pub const SHELL_TOOL: &str = "bash__exec";

/// Compiles a gate pattern into one anchored regex.
///
/// # Errors
///
/// The regex's own error for a `re:…` or `/…/` pattern that does not
/// compile (a glob always does).
pub fn compile_pattern(pattern: &str) -> Result<regex::Regex, regex::Error> {
    if let Some(regex) = pattern.strip_prefix("re:") {
        return regex::Regex::new(regex);
    }
    if let Some(regex) = pattern
        .strip_prefix('/')
        .and_then(|rest| rest.strip_suffix('/'))
        .filter(|regex| !regex.is_empty())
    {
        return regex::Regex::new(regex);
    }
    let mut regex = String::from("(?s)^");
    let mut in_class = false;
    for c in pattern.chars() {
        match c {
            '[' if !in_class => {
                in_class = true;
                regex.push('[');
            }
            ']' if in_class => {
                in_class = false;
                regex.push(']');
            }
            '*' if !in_class => regex.push_str(".*"),
            '?' if !in_class => regex.push('.'),
            _ if in_class => regex.push(c),
            _ => regex.push_str(&regex::escape(&c.to_string())),
        }
    }
    regex.push('$');
    regex::Regex::new(&regex)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_and_regexes_match_whole_values() {
        let cases: &[(&str, &str, bool)] = &[
            ("rm *", "rm -rf /", true),
            ("rm *", "echo rm -rf", false),
            ("rm *", "rm", false),
            ("file-?.txt", "file-1.txt", true),
            ("[ab]*", "banana", true),
            ("a.b", "axb", false),
            ("re:^/etc/", "/etc/passwd", true),
            ("/pass(wd)?$/", "/etc/passwd", true),
            ("ls *", "ls -la\nrm x", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(
                compile_pattern(pattern).unwrap().is_match(text),
                *expected,
                "{pattern:?} on {text:?}"
            );
        }
        assert!(compile_pattern("re:(").is_err());
        assert!(compile_pattern("[a").is_err());
    }
}
