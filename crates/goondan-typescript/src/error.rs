//! The one error type of stripping, [`StripError`], and [`SourceProblem`],
//! a parser or transformer message placed at a line and column of the
//! TypeScript source. Every variant has the code `E_TYPESCRIPT_STRIP` and
//! names the file; rendering for people is the caller's job.

use std::fmt;
use std::path::PathBuf;

/// Why a TypeScript file could not be turned into JavaScript.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StripError {
    /// The file's extension is not one this crate strips (`.tsx`, `.js`,
    /// no extension, ...).
    #[error("{path}: cannot strip types from a {kind} file", path = path.display())]
    UnsupportedFile {
        /// The file as given.
        path: PathBuf,
        /// What the extension says the file is, in words (`TSX`, `.js`).
        kind: String,
    },
    /// The source is not valid TypeScript.
    #[error("{}", located(path, "is not valid TypeScript", problems))]
    Syntax {
        /// The file as given.
        path: PathBuf,
        /// Every problem the parser reported, in source order.
        problems: Vec<SourceProblem>,
    },
    /// The source parsed, but a construct has no JavaScript form here (for
    /// example `export =` in an ES module).
    #[error("{}", located(path, "cannot be turned into JavaScript", problems))]
    Transform {
        /// The file as given.
        path: PathBuf,
        /// Every problem the transform reported, in source order.
        problems: Vec<SourceProblem>,
    },
}

/// The first problem in `path:line:column: message` form, with a count of
/// the others.
fn located(path: &std::path::Path, what: &str, problems: &[SourceProblem]) -> String {
    let path = path.display();
    match problems.split_first() {
        None => format!("{path} {what}"),
        Some((first, [])) => format!("{path}:{first}"),
        Some((first, rest)) => {
            let others = rest.len();
            let noun = if others == 1 { "problem" } else { "problems" };
            format!("{path}:{first} (and {others} more {noun})")
        }
    }
}

impl StripError {
    /// The stable code, the same for every variant.
    pub fn code(&self) -> &'static str {
        "E_TYPESCRIPT_STRIP"
    }

    /// The file the error is about.
    pub fn path(&self) -> &std::path::Path {
        match self {
            StripError::UnsupportedFile { path, .. }
            | StripError::Syntax { path, .. }
            | StripError::Transform { path, .. } => path,
        }
    }

    /// Every located problem (empty for [`StripError::UnsupportedFile`]).
    pub fn problems(&self) -> &[SourceProblem] {
        match self {
            StripError::UnsupportedFile { .. } => &[],
            StripError::Syntax { problems, .. } | StripError::Transform { problems, .. } => {
                problems
            }
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> Option<String> {
        match self {
            StripError::UnsupportedFile { kind, .. } if kind == "TSX" => Some(
                "JSX is not supported in plugins: rename the file to .ts and build elements without JSX, or compile it to .js yourself".into(),
            ),
            StripError::UnsupportedFile { .. } => Some(
                "only .ts, .mts and .cts files need stripping; load JavaScript files directly".into(),
            ),
            StripError::Syntax { problems, .. } => Some(match problems.first().and_then(|p| p.help.as_deref()) {
                Some(help) => format!("{help}; the file must compile with `tsc --noEmit` before it can be loaded"),
                None => "fix the syntax at that line; the file must compile with `tsc --noEmit` before it can be loaded".into(),
            }),
            StripError::Transform { .. } => Some(
                "rewrite the construct as the message says, or compile the plugin to .js with tsc and load that".into(),
            ),
        }
    }
}

/// One message of the parser or the transform, placed in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProblem {
    /// The 1-based line.
    pub line: u32,
    /// The 1-based column, counted in characters.
    pub column: u32,
    /// The message, as the parser or transform wrote it.
    pub message: String,
    /// The parser's own hint, when it gave one.
    pub help: Option<String>,
}

impl fmt::Display for SourceProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(line: u32, column: u32, message: &str) -> SourceProblem {
        SourceProblem {
            line,
            column,
            message: message.into(),
            help: None,
        }
    }

    #[test]
    fn display_names_the_file_the_place_and_how_many_more() {
        let cases = [
            (
                vec![problem(3, 7, "Expected `;`")],
                "a.ts:3:7: Expected `;`",
            ),
            (
                vec![problem(3, 7, "Expected `;`"), problem(4, 1, "x")],
                "a.ts:3:7: Expected `;` (and 1 more problem)",
            ),
            (
                vec![problem(1, 1, "x"), problem(2, 1, "y"), problem(3, 1, "z")],
                "a.ts:1:1: x (and 2 more problems)",
            ),
            (vec![], "a.ts is not valid TypeScript"),
        ];
        for (problems, expected) in cases {
            let error = StripError::Syntax {
                path: "a.ts".into(),
                problems,
            };
            assert_eq!(error.to_string(), expected);
            assert_eq!(error.code(), "E_TYPESCRIPT_STRIP");
        }
    }

    #[test]
    fn tsx_gets_its_own_suggestion() {
        let error = StripError::UnsupportedFile {
            path: "view.tsx".into(),
            kind: "TSX".into(),
        };
        assert_eq!(
            error.to_string(),
            "view.tsx: cannot strip types from a TSX file"
        );
        assert!(error.suggestion().unwrap().contains("JSX is not supported"));
    }
}
