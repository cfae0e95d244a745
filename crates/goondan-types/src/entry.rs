//! The `spec.entry` of Tool, Extension and Connector resources, classified
//! once for every crate: a native implementation compiled into the binary
//! (`builtin:<name>`) or a script file that a plugin host runs.
//!
//! This module only classifies text. Whether a native name exists, whether
//! a file exists inside the bundle, and how either becomes code are
//! questions for the loader (`goondan-config`) and the entry resolvers
//! (`goondan-runtime`).

use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The prefix of entries that name an implementation compiled into the
/// binary, as in `builtin:bash`.
pub const BUILTIN_PREFIX: &str = "builtin:";

/// A resource's `spec.entry`, classified.
///
/// [`Entry::parse`] and [`fmt::Display`] round-trip: the displayed form is
/// the text the author wrote.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Entry {
    /// `builtin:<name>`: an implementation of the `@goondan/base` package
    /// (or one a library user registered) that runs in-process.
    Native {
        /// The part after `builtin:`; never empty.
        name: String,
    },
    /// A file the plugin host runs.
    Script {
        /// The path as written, relative to the bundle root (for example
        /// `./tools/x.ts`). It stays relative so an entry means the same
        /// thing on every host that has the bundle; the loader has already
        /// checked that it stays inside the bundle.
        path: String,
        /// What runs the file, derived from its extension.
        runtime: ScriptRuntime,
    },
}

/// What runs a script entry, by file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScriptRuntime {
    /// `.ts`, `.mts`, `.cts`.
    TypeScript,
    /// `.js`, `.mjs`, `.cjs`, run by node.
    JavaScript,
    /// `.py`.
    Python,
    /// Any other file, run directly as an executable.
    Executable,
}

impl ScriptRuntime {
    /// The runtime of a file, from its extension (compared without regard
    /// to case); a file without a known extension is an
    /// [`ScriptRuntime::Executable`].
    pub fn of_path(path: &str) -> ScriptRuntime {
        let extension = Path::new(path)
            .extension()
            .and_then(|extension| extension.to_str())
            .map(str::to_ascii_lowercase);
        match extension.as_deref() {
            Some("ts" | "mts" | "cts") => ScriptRuntime::TypeScript,
            Some("js" | "mjs" | "cjs") => ScriptRuntime::JavaScript,
            Some("py") => ScriptRuntime::Python,
            _ => ScriptRuntime::Executable,
        }
    }

    /// The name shown to users: `TypeScript`, `JavaScript`, `Python` or
    /// `executable`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScriptRuntime::TypeScript => "TypeScript",
            ScriptRuntime::JavaScript => "JavaScript",
            ScriptRuntime::Python => "Python",
            ScriptRuntime::Executable => "executable",
        }
    }
}

impl fmt::Display for ScriptRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a `spec.entry` string is not an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryParseError {
    /// The entry is empty or only whitespace.
    Empty,
    /// The entry is `builtin:` with no name after it.
    EmptyBuiltinName,
}

impl EntryParseError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        "E_ENTRY_INVALID"
    }

    /// How to fix it.
    pub fn suggestion(&self) -> &'static str {
        "write `builtin:<name>` or a file path relative to the bundle root"
    }
}

impl fmt::Display for EntryParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EntryParseError::Empty => f.write_str("the entry is empty"),
            EntryParseError::EmptyBuiltinName => {
                write!(f, "the entry `{BUILTIN_PREFIX}` names no built-in")
            }
        }
    }
}

impl std::error::Error for EntryParseError {}

impl Entry {
    /// Classifies an entry string: `builtin:<name>` is native, anything
    /// else is a script path kept exactly as written.
    pub fn parse(text: &str) -> Result<Entry, EntryParseError> {
        if text.trim().is_empty() {
            return Err(EntryParseError::Empty);
        }
        match text.strip_prefix(BUILTIN_PREFIX) {
            Some("") => Err(EntryParseError::EmptyBuiltinName),
            Some(name) => Ok(Entry::native(name)),
            None => Ok(Entry::script(text)),
        }
    }

    /// `builtin:<name>`.
    pub fn native(name: impl Into<String>) -> Entry {
        Entry::Native { name: name.into() }
    }

    /// A script at `path` (relative to the bundle root), its runtime
    /// derived from the extension.
    pub fn script(path: impl Into<String>) -> Entry {
        let path = path.into();
        Entry::Script {
            runtime: ScriptRuntime::of_path(&path),
            path,
        }
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entry::Native { name } => write!(f, "{BUILTIN_PREFIX}{name}"),
            Entry::Script { path, .. } => f.write_str(path),
        }
    }
}

impl FromStr for Entry {
    type Err = EntryParseError;

    fn from_str(text: &str) -> Result<Entry, EntryParseError> {
        Entry::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script(path: &str, runtime: ScriptRuntime) -> Result<Entry, EntryParseError> {
        Ok(Entry::Script {
            path: path.to_string(),
            runtime,
        })
    }

    #[test]
    fn entries_classify_by_prefix_and_extension() {
        use ScriptRuntime::*;
        let cases: [(&str, Result<Entry, EntryParseError>); 16] = [
            ("builtin:bash", Ok(Entry::native("bash"))),
            (
                "builtin:message-window",
                Ok(Entry::native("message-window")),
            ),
            ("./tools/x.ts", script("./tools/x.ts", TypeScript)),
            ("tools/x.mts", script("tools/x.mts", TypeScript)),
            ("tools/x.cts", script("tools/x.cts", TypeScript)),
            ("tools/x.py", script("tools/x.py", Python)),
            ("x.mjs", script("x.mjs", JavaScript)),
            ("x.cjs", script("x.cjs", JavaScript)),
            ("lib/x.JS", script("lib/x.JS", JavaScript)),
            ("bin/tool", script("bin/tool", Executable)),
            ("bin/tool.sh", script("bin/tool.sh", Executable)),
            ("tools.d/run", script("tools.d/run", Executable)),
            ("Builtin:bash", script("Builtin:bash", Executable)),
            ("", Err(EntryParseError::Empty)),
            ("  ", Err(EntryParseError::Empty)),
            ("builtin:", Err(EntryParseError::EmptyBuiltinName)),
        ];
        for (text, expected) in cases {
            assert_eq!(Entry::parse(text), expected, "{text:?}");
        }
    }

    #[test]
    fn display_gives_back_the_entry_as_written() {
        for text in ["builtin:bash", "./tools/x.ts", "bin/tool"] {
            let entry: Entry = text.parse().unwrap();
            assert_eq!(entry.to_string(), text);
        }
    }

    #[test]
    fn parse_errors_carry_a_code_and_a_fix() {
        let error = Entry::parse("builtin:").unwrap_err();
        assert_eq!(error.code(), "E_ENTRY_INVALID");
        assert_eq!(error.to_string(), "the entry `builtin:` names no built-in");
        assert!(error.suggestion().contains("builtin:<name>"));
    }
}
