//! `gdn strip-types <FILE>` (hidden): prints a TypeScript file as
//! JavaScript with its types removed. The plugin host's Node shim runs it
//! on Node versions without type stripping (`GOONDAN_STRIP_TYPES_COMMAND`),
//! reading the module from stdout. The transform is
//! `goondan_typescript::strip_types`; this module only reads the file,
//! prints and renders errors.
//!
//! Exit codes: 0 with the JavaScript on stdout; 3 when the file cannot be
//! read; 2 when it is not a `.ts`, `.mts` or `.cts` file; 4 when it is not
//! valid TypeScript or the transform refuses it. Every failure prints
//! `error[E_TYPESCRIPT_STRIP]` with the file, line:column and a fix on
//! stderr, and nothing on stdout.

use crate::cli::{Format, StripTypesArgs};
use crate::exit::Outcome;
use crate::render::{Renderer, Style};
use goondan_types::Diagnostic;
use goondan_typescript::StripError;
use std::io::Write;
use std::path::PathBuf;

/// How a plugin host on Node without type stripping runs this command:
/// this very binary with `strip-types` (the file is appended). `None`
/// when the binary cannot be located, which leaves TypeScript entries to
/// Bun or a newer Node, with the plugin host's own error when neither is
/// there.
pub(crate) fn command() -> Option<Vec<String>> {
    let program = std::env::current_exe().ok()?;
    Some(vec![
        program.to_str()?.to_string(),
        "strip-types".to_string(),
    ])
}

/// Strips `args.file` and prints the JavaScript.
pub(crate) fn run(args: &StripTypesArgs) -> anyhow::Result<Outcome> {
    let path = &args.file;
    let source = match std::fs::read_to_string(path) {
        Ok(source) => source,
        Err(error) => {
            let diagnostic = Diagnostic::error(
                "E_TYPESCRIPT_STRIP",
                format!("cannot read {}: {error}", path.display()),
            )
            .with_file(path.display().to_string())
            .with_suggestion("check the path and the file's permissions");
            report(&[diagnostic])?;
            return Ok(Outcome::ConfigError);
        }
    };
    match goondan_typescript::strip_types(&source, path) {
        Ok(javascript) => {
            let mut out = std::io::stdout().lock();
            out.write_all(javascript.as_bytes())?;
            out.flush()?;
            Ok(Outcome::Success)
        }
        Err(error) => {
            report(&diagnostics(&error))?;
            Ok(match error {
                StripError::UnsupportedFile { .. } => Outcome::BadArguments,
                _ => Outcome::ValidationFailed,
            })
        }
    }
}

/// One diagnostic per located problem (one for the whole file when the
/// error has no place).
fn diagnostics(error: &StripError) -> Vec<Diagnostic> {
    let file = error.path().display().to_string();
    let with_suggestion = |diagnostic: Diagnostic| match error.suggestion() {
        Some(suggestion) => diagnostic.with_suggestion(suggestion),
        None => diagnostic,
    };
    if error.problems().is_empty() {
        let message = match error {
            StripError::UnsupportedFile { kind, .. } => {
                format!("cannot strip types from a {kind} file")
            }
            other => other.to_string(),
        };
        return vec![with_suggestion(
            Diagnostic::error(error.code(), message).with_file(file),
        )];
    }
    error
        .problems()
        .iter()
        .map(|problem| {
            let diagnostic = Diagnostic::error(error.code(), problem.message.clone())
                .with_file(file.clone())
                .with_location(problem.line as usize, problem.column as usize);
            match &problem.help {
                Some(help) => diagnostic.with_suggestion(help.clone()),
                None => with_suggestion(diagnostic),
            }
        })
        .collect()
}

/// Writes the diagnostics to stderr as text, without color: the reader is
/// the plugin host, which forwards the text.
fn report(diagnostics: &[Diagnostic]) -> anyhow::Result<()> {
    let renderer = Renderer {
        style: Style { colored: false },
        base: PathBuf::new(),
    };
    let mut err = std::io::stderr().lock();
    renderer.report(&mut err, Format::Text, diagnostics, false)?;
    Ok(())
}
