//! The environment of a process a tool starts: an allow-list, never the
//! agent's whole environment.
//!
//! The `bash` tool and the plugin hosts both start processes on behalf of
//! user code, and both must not hand them the agent's provider keys or
//! any other secret. This module owns only which variables a child gets;
//! how a child is started (namespaces, death signal) stays with the code
//! that starts it.

use std::ffi::OsString;

/// `PATH` when the agent has none: a command still finds the usual tools.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// `LANG` when the agent has none: UTF-8 output from tools that ask.
pub const DEFAULT_LANG: &str = "C.UTF-8";

/// The whole environment of a child: `PATH` (the agent's, or
/// [`DEFAULT_PATH`]), `HOME` (the agent's, when set), `LANG` (the agent's,
/// or [`DEFAULT_LANG`]), then each of `also_inherited` the agent has set
/// and non-empty, then `declared` on top (a declared name replaces an
/// inherited one).
///
/// An allow-list rather than a list of secrets to remove: a secret under a
/// name nobody thought of is not inherited either.
pub fn allow_listed_environment(
    also_inherited: &[&str],
    declared: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    let inherited = |name: &str| std::env::var_os(name).filter(|value| !value.is_empty());
    let mut environment = vec![(
        OsString::from("PATH"),
        inherited("PATH").unwrap_or_else(|| DEFAULT_PATH.into()),
    )];
    if let Some(home) = inherited("HOME") {
        environment.push(("HOME".into(), home));
    }
    environment.push((
        "LANG".into(),
        inherited("LANG").unwrap_or_else(|| DEFAULT_LANG.into()),
    ));
    for name in also_inherited {
        if environment.iter().any(|(existing, _)| existing == *name) {
            continue;
        }
        if let Some(value) = inherited(name) {
            environment.push((name.into(), value));
        }
    }
    for (key, value) in declared {
        environment.retain(|(existing, _)| existing != key.as_str());
        environment.push((key.into(), value.into()));
    }
    environment
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_is_an_allow_list_the_call_can_extend_and_override() {
        let environment = allow_listed_environment(
            &[],
            &[
                ("PATH".into(), "/opt/tools/bin".into()),
                ("DECLARED".into(), "yes".into()),
            ],
        );
        let names: Vec<&str> = environment
            .iter()
            .map(|(name, _)| name.to_str().unwrap())
            .collect();
        let expected: &[&str] = if std::env::var_os("HOME").is_some_and(|home| !home.is_empty()) {
            &["HOME", "LANG", "PATH", "DECLARED"]
        } else {
            &["LANG", "PATH", "DECLARED"]
        };
        assert_eq!(names, expected);
        let path = environment.iter().find(|(name, _)| name == "PATH").unwrap();
        assert_eq!(path.1, "/opt/tools/bin");
    }

    #[test]
    fn extra_names_are_inherited_only_when_set() {
        // PATH is always set by cargo's test runner; a name nobody sets is
        // never invented.
        let environment = allow_listed_environment(&["PATH", "GOONDAN_SURELY_UNSET_VARIABLE"], &[]);
        let names: Vec<&str> = environment
            .iter()
            .map(|(name, _)| name.to_str().unwrap())
            .collect();
        assert_eq!(names.iter().filter(|name| **name == "PATH").count(), 1);
        assert!(!names.contains(&"GOONDAN_SURELY_UNSET_VARIABLE"));
    }
}
