//! Rendering for people: diagnostics (text for people, JSON for tools,
//! GitHub Actions annotations for CI), every coded `error[…]` line, and
//! the notices of a running swarm. Rendering never changes a diagnostic;
//! the caller decides severities (for example `--strict`).

use crate::cli::Format;
use crate::exit::Outcome;
use goondan_host::{HostError, NotLoaded, Notice, Notices};
use goondan_types::{Diagnostic, Severity};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Dollars for a table: four decimals, or two significant digits for a
/// cost too small for four (`$0.000012`, not a misleading `$0.0000`).
pub(crate) fn usd(cost: f64) -> String {
    if cost == 0.0 || cost.abs() >= 0.0001 || !cost.is_finite() {
        return format!("${cost:.4}");
    }
    let decimals = ((-cost.abs().log10()).ceil() as usize + 1).min(12);
    format!("${cost:.decimals$}")
}

/// Whether to color text output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Style {
    pub(crate) colored: bool,
}

impl Style {
    fn paint(&self, text: &str, ansi: &str) -> String {
        if self.colored {
            format!("\x1b[{ansi}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
}

/// Renders diagnostics whose files are relative to `base`.
pub(crate) struct Renderer {
    pub(crate) style: Style,
    pub(crate) base: PathBuf,
}

impl Renderer {
    /// Writes the full report in `format`. With `quiet`, text output keeps
    /// only errors and drops the tally.
    pub(crate) fn report(
        &self,
        out: &mut impl Write,
        format: Format,
        diagnostics: &[Diagnostic],
        quiet: bool,
    ) -> io::Result<()> {
        match format {
            Format::Text => self.text(out, diagnostics, quiet),
            Format::Json => json(out, diagnostics),
            Format::Github => self.github(out, diagnostics),
        }
    }

    fn shown_file(&self, file: &str) -> String {
        if self.base.as_os_str().is_empty() || self.base == Path::new(".") {
            file.to_string()
        } else {
            self.base.join(file).display().to_string()
        }
    }

    fn text(
        &self,
        out: &mut impl Write,
        diagnostics: &[Diagnostic],
        quiet: bool,
    ) -> io::Result<()> {
        let (mut errors, mut warnings) = (0, 0);
        let mut sources = Sources::default();
        for diagnostic in diagnostics {
            match diagnostic.severity {
                Severity::Error => errors += 1,
                Severity::Warning if quiet => {
                    warnings += 1;
                    continue;
                }
                Severity::Warning => warnings += 1,
            }
            let source = match (&diagnostic.file, diagnostic.line, diagnostic.column) {
                (Some(file), Some(line), Some(column)) => sources
                    .line(&self.base.join(file), line)
                    .map(|text| (file, line, column, text)),
                _ => None,
            };
            match source {
                Some((file, line, column, text)) => {
                    self.snippet(out, diagnostic, &self.shown_file(file), line, column, text)?
                }
                None => self.plain(out, diagnostic)?,
            }
        }
        if !quiet {
            writeln!(out, "Errors: {errors}, Warnings: {warnings}")?;
        }
        Ok(())
    }

    /// A diagnostic with its source line and a caret under the span, as
    /// rustc prints one; the field and the suggestion follow as notes.
    fn snippet(
        &self,
        out: &mut impl Write,
        diagnostic: &Diagnostic,
        shown_file: &str,
        line: usize,
        column: usize,
        text: &str,
    ) -> io::Result<()> {
        use annotate_snippets::{AnnotationKind, Level, Snippet};
        let level = match diagnostic.severity {
            Severity::Error => Level::ERROR,
            Severity::Warning => Level::WARNING,
        };
        let label = diagnostic
            .document
            .map(|document| format!("document {document}"))
            .unwrap_or_default();
        let mut group = level
            .primary_title(diagnostic.message.as_str())
            .id(diagnostic.code.as_str())
            .element(
                Snippet::source(text)
                    .line_start(line)
                    .path(shown_file)
                    .annotation(
                        AnnotationKind::Primary
                            .span(token_span(text, column))
                            .label(label),
                    ),
            );
        if let Some(field) = &diagnostic.field {
            group = group.element(Level::NOTE.with_name("field").message(field.as_str()));
        }
        if let Some(suggestion) = &diagnostic.suggestion {
            group = group.element(Level::HELP.message(suggestion.as_str()));
        }
        let renderer = if self.style.colored {
            annotate_snippets::Renderer::styled()
        } else {
            annotate_snippets::Renderer::plain()
        };
        // A blank line after each, as rustc leaves between its errors.
        writeln!(out, "{}\n", renderer.render(&[group]))
    }

    /// A diagnostic whose source cannot be shown (no line, or the file is
    /// gone): the place as `file:line:col` alone.
    fn plain(&self, out: &mut impl Write, diagnostic: &Diagnostic) -> io::Result<()> {
        let label = match diagnostic.severity {
            Severity::Error => self.style.paint("error", "1;31"),
            Severity::Warning => self.style.paint("warning", "1;33"),
        };
        writeln!(
            out,
            "{label}{}: {}",
            self.style.paint(&format!("[{}]", diagnostic.code), "1"),
            diagnostic.message
        )?;
        if let Some(file) = &diagnostic.file {
            let mut place = self.shown_file(file);
            if let (Some(line), Some(column)) = (diagnostic.line, diagnostic.column) {
                place.push_str(&format!(":{line}:{column}"));
            }
            if let Some(document) = diagnostic.document {
                place.push_str(&format!(" (document {document})"));
            }
            writeln!(out, "  {} {place}", self.style.paint("-->", "1;34"))?;
        }
        let bar = self.style.paint("=", "1;34");
        if let Some(field) = &diagnostic.field {
            writeln!(out, "   {bar} field: {field}")?;
        }
        if let Some(suggestion) = &diagnostic.suggestion {
            writeln!(out, "   {bar} help: {suggestion}")?;
        }
        Ok(())
    }

    fn github(&self, out: &mut impl Write, diagnostics: &[Diagnostic]) -> io::Result<()> {
        for diagnostic in diagnostics {
            let command = match diagnostic.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
            };
            let mut properties = Vec::new();
            if let Some(file) = &diagnostic.file {
                properties.push(format!("file={}", escape_property(&self.shown_file(file))));
            }
            if let Some(line) = diagnostic.line {
                properties.push(format!("line={line}"));
            }
            if let Some(column) = diagnostic.column {
                properties.push(format!("col={column}"));
            }
            properties.push(format!("title={}", escape_property(&diagnostic.code)));
            let mut message = diagnostic.message.clone();
            if let Some(field) = &diagnostic.field {
                message.push_str(&format!(" (field {field})"));
            }
            if let Some(suggestion) = &diagnostic.suggestion {
                message.push_str(&format!("\nhelp: {suggestion}"));
            }
            writeln!(
                out,
                "::{command} {}::{}",
                properties.join(","),
                escape_data(&message)
            )?;
        }
        Ok(())
    }
}

/// The files diagnostics point into, each read once per report.
#[derive(Default)]
struct Sources {
    files: HashMap<PathBuf, Option<String>>,
}

impl Sources {
    /// Line `line` (from 1) of `path`, without its line break; `None` when
    /// the file cannot be read or is shorter.
    fn line(&mut self, path: &Path, line: usize) -> Option<&str> {
        let text = self
            .files
            .entry(path.to_path_buf())
            .or_insert_with(|| std::fs::read_to_string(path).ok())
            .as_deref()?;
        text.lines().nth(line.checked_sub(1)?)
    }
}

/// The byte range of the YAML token that starts at `column` (from 1, in
/// characters, as the loader counts): a quoted scalar to its closing
/// quote, a flow collection to its closing bracket, else a plain key or
/// value up to `: `, ` #`, a flow separator or the end of the line. The loader records where a node starts, not where
/// it ends; the token is what a reader sees as "that value".
fn token_span(text: &str, column: usize) -> std::ops::Range<usize> {
    let start = text
        .char_indices()
        .nth(column.saturating_sub(1))
        .map_or(text.len(), |(offset, _)| offset);
    let rest = &text[start..];
    let length = match rest.chars().next() {
        Some(quote @ ('"' | '\'')) => rest[1..].find(quote).map_or(rest.len(), |close| close + 2),
        // A flow collection: to its closing bracket on this line.
        Some(open @ ('[' | '{')) => {
            let close = if open == '[' { ']' } else { '}' };
            let mut depth = 0usize;
            rest.char_indices()
                .find_map(|(offset, c)| {
                    if c == open {
                        depth += 1;
                    } else if c == close {
                        depth -= 1;
                        if depth == 0 {
                            return Some(offset + 1);
                        }
                    }
                    None
                })
                .unwrap_or_else(|| rest.trim_end().len())
        }
        Some(_) => {
            let bytes = rest.as_bytes();
            let mut end = rest.len();
            for (offset, &byte) in bytes.iter().enumerate() {
                let next = bytes.get(offset + 1).copied();
                let ends = match byte {
                    b':' => matches!(next, None | Some(b' ' | b'\t')),
                    b'#' => offset > 0 && matches!(bytes[offset - 1], b' ' | b'\t'),
                    b',' | b']' | b'}' => offset > 0,
                    _ => false,
                };
                if ends {
                    end = offset;
                    break;
                }
            }
            rest[..end].trim_end().len()
        }
        None => 0,
    };
    start..start + length
}

/// `{ "valid", "errors", "warnings" }` (`cli.md` §6.5).
fn json(out: &mut impl Write, diagnostics: &[Diagnostic]) -> io::Result<()> {
    let (errors, warnings): (Vec<&Diagnostic>, Vec<&Diagnostic>) = diagnostics
        .iter()
        .partition(|diagnostic| diagnostic.is_error());
    let report = serde_json::json!({
        "valid": errors.is_empty(),
        "errors": errors,
        "warnings": warnings,
    });
    serde_json::to_writer_pretty(&mut *out, &report)?;
    writeln!(out)
}

/// Escapes an annotation message the way the Actions runner decodes it.
fn escape_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// Escapes an annotation property value.
fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// Whether `--json` was given: coded errors and warnings are then one JSON
/// object per line on stderr (`{"error": {"code", "message",
/// "suggestion"}}`, `{"warning": …}`), so every command and mode speaks
/// JSON to a machine, its failures included.
static JSON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Makes [`error`] and [`warning`] print JSON lines (`--json`).
pub(crate) fn set_json(json: bool) {
    JSON.store(json, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `--json` was given (see [`set_json`]).
pub(crate) fn json_mode() -> bool {
    JSON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Prints `kind` (`error` or `warning`) as one JSON line on stderr when
/// `--json` was given; `false` otherwise.
fn json_line(kind: &str, code: &str, message: &dyn std::fmt::Display, help: Option<&str>) -> bool {
    json_line_with(kind, code, message, help, None)
}

/// [`json_line`], with the diagnostics behind it (a bundle that did not
/// load) as `diagnostics`, so one line says everything.
fn json_line_with(
    kind: &str,
    code: &str,
    message: &dyn std::fmt::Display,
    help: Option<&str>,
    diagnostics: Option<&[Diagnostic]>,
) -> bool {
    // No error is written over a spinner.
    crate::progress::clear();
    if !json_mode() {
        return false;
    }
    let mut body = serde_json::json!({
        "code": code, "message": message.to_string(), "suggestion": help
    });
    if let Some(diagnostics) = diagnostics {
        body["diagnostics"] = serde_json::json!(diagnostics);
    }
    let line = serde_json::json!({ kind: body });
    let _ = writeln!(io::stderr().lock(), "{line}");
    true
}

/// A plain line that follows an error for a person (`nothing was
/// started`). With `--json` it is left out: the error's one JSON line is
/// all a machine reads on stderr.
pub(crate) fn after_error(text: &str) {
    if !json_mode() {
        eprintln!("{text}");
    }
}

/// Prints a command line clap refused: its own text for a person, or with
/// `--json` one line `{"error": {"code": "E_CLI_ARGS", …}}`, the usage
/// as its suggestion.
pub(crate) fn argument_error(error: &clap::Error, json: bool) -> io::Result<()> {
    if !json {
        return error.print();
    }
    let text = error.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|line| !line.is_empty());
    let message = lines
        .next()
        .map(|line| line.strip_prefix("error: ").unwrap_or(line).to_string())
        .unwrap_or_default();
    let mut help: Vec<String> = Vec::new();
    for line in lines {
        if let Some(tip) = line.strip_prefix("tip: ") {
            help.push(tip.to_string());
        } else if let Some(usage) = line.strip_prefix("Usage: ") {
            help.push(format!("usage: {usage}"));
        }
    }
    help.push("`--help` lists the flags".to_string());
    let line = serde_json::json!({
        "error": { "code": "E_CLI_ARGS", "message": message, "suggestion": help.join("; ") }
    });
    writeln!(io::stderr().lock(), "{line}")
}

/// Prints one coded error as every command prints one: `error[CODE]:
/// message`, then `   = help: …` when there is something to suggest.
pub(crate) fn error(code: &str, message: &dyn std::fmt::Display, help: Option<&str>) {
    if json_line("error", code, message, help) {
        return;
    }
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "error[{code}]: {message}");
    if let Some(help) = help {
        let _ = writeln!(err, "   = help: {help}");
    }
}

/// Prints an error that has no code (an IO failure no library named):
/// `error: message`, or with `--json` a JSON line whose `code` is null.
pub(crate) fn uncoded_error(message: &str) {
    crate::progress::clear();
    if json_mode() {
        let line = serde_json::json!({ "error": { "code": null, "message": message } });
        let _ = writeln!(io::stderr().lock(), "{line}");
    } else {
        let _ = writeln!(io::stderr().lock(), "error: {message}");
    }
}

/// Prints one coded warning, shaped as [`error`]: `warning[CODE]:
/// message`, then `   = help: …`.
pub(crate) fn warning(code: &str, message: &dyn std::fmt::Display, help: Option<&str>) {
    if json_line("warning", code, message, help) {
        return;
    }
    let mut err = io::stderr().lock();
    let _ = writeln!(err, "warning[{code}]: {message}");
    if let Some(help) = help {
        let _ = writeln!(err, "   = help: {help}");
    }
}

/// Prints the diagnostics of a bundle that did not load, relative to its
/// folder; with `--json`, one error line: the first error's code, message
/// and suggestion, every diagnostic under `diagnostics`.
pub(crate) fn not_loaded(not_loaded: &NotLoaded, format: Format, quiet: bool) {
    if matches!(format, Format::Json) {
        let diagnostics = &not_loaded.diagnostics;
        match diagnostics
            .iter()
            .find(|diagnostic| diagnostic.is_error())
            .or(diagnostics.first())
        {
            Some(first) => {
                json_line_with(
                    "error",
                    &first.code,
                    &first.message,
                    first.suggestion.as_deref(),
                    Some(diagnostics),
                );
            }
            None => uncoded_error("the bundle did not load"),
        }
        return;
    }
    let renderer = Renderer {
        style: Style { colored: false },
        base: not_loaded.base.clone(),
    };
    let mut err = io::stderr().lock();
    let _ = renderer.report(&mut err, format, &not_loaded.diagnostics, quiet);
    let _ = err.flush();
}

/// Prints why a swarm could not start (or a cluster command failed) and
/// returns the outcome to exit with.
pub(crate) fn host_error(error: &HostError, format: Format) -> Outcome {
    match error {
        // With --json the host's error carries the diagnostics: one line.
        HostError::ClusterBundleNotLoaded {
            not_loaded: diagnostics,
            ..
        } if json_mode() => {
            json_line_with(
                "error",
                error.code(),
                error,
                error.suggestion().as_deref(),
                Some(&diagnostics.diagnostics),
            );
        }
        HostError::ClusterBundleNotLoaded {
            not_loaded: diagnostics,
            ..
        } => {
            not_loaded(diagnostics, format, false);
            self::error(error.code(), error, error.suggestion().as_deref());
        }
        _ => self::error(error.code(), error, error.suggestion().as_deref()),
    }
    match error {
        HostError::StateRootTooDeep { .. }
        | HostError::ClusterBundle { .. }
        | HostError::ClusterWorkspace { .. }
        | HostError::Store(_)
        | HostError::SwarmMissing { .. } => Outcome::ConfigError,
        HostError::ClusterBundleNotLoaded { not_loaded, .. } if not_loaded.invalid => {
            Outcome::ValidationFailed
        }
        HostError::ClusterBundleNotLoaded { .. } => Outcome::ConfigError,
        _ => Outcome::Failure,
    }
}

/// Prints a cluster error the way every command prints coded errors.
pub(crate) fn cluster_error(error: &goondan_cluster::ClusterError) -> Outcome {
    self::error(error.code(), error, error.suggestion().as_deref());
    Outcome::Failure
}

/// The console lines of a running swarm's notices, on stderr (stdout
/// carries answers); an invalid bundle's diagnostics as `format` says.
pub(crate) fn notices(format: Format, quiet: bool) -> Notices {
    use goondan_cluster::bundle::short_digest;
    Arc::new(move |notice: Notice| {
        match notice {
        Notice::Reloaded {
            trigger,
            asked,
            elapsed,
            changed,
            restarted,
        } => eprintln!(
            "{trigger}: reloaded{asked} in {} ms: changed {changed}; restarted {restarted}",
            elapsed.as_millis()
        ),
        Notice::ReloadRefused {
            trigger,
            what,
            code,
            message,
            not_loaded: diagnostics,
        } => {
            let said = format!("{trigger}: the {what} is invalid: {message}; the swarm runs on unchanged");
            // The swarm runs on, so with --json this is a warning, and one
            // line with the diagnostics in it.
            let json = json_line_with(
                "warning",
                &code,
                &said,
                None,
                diagnostics.as_ref().map(|d| d.diagnostics.as_slice()),
            );
            if !json {
                if let Some(diagnostics) = &diagnostics {
                    not_loaded(diagnostics, format, quiet);
                }
                eprintln!(
                    "{trigger}: the {what} is invalid: [{code}] {message}; the swarm runs on unchanged"
                );
            }
        }
        Notice::RunsClusterBundle {
            active,
            deployed_by,
            deployed_at,
            local,
        } => eprintln!(
            "the cluster runs bundle {} (made active by {deployed_by} at {deployed_at}); this folder's bundle ({}) differs and is not run here. `gdn cluster deploy` rolls a bundle out to every host",
            short_digest(&active),
            short_digest(&local)
        ),
        Notice::RolloutRefused {
            digest,
            problem,
            running,
        } => eprintln!(
            "rollout: bundle {} refused on this host: {problem}; it runs on with {}",
            short_digest(&digest),
            short_digest(&running)
        ),
    }
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn small_costs_keep_two_significant_digits() {
        assert_eq!(super::usd(0.000012), "$0.000012");
        assert_eq!(super::usd(0.00001), "$0.000010");
        assert_eq!(super::usd(0.0), "$0.0000");
        assert_eq!(super::usd(0.0123), "$0.0123");
        assert_eq!(super::usd(12.5), "$12.5000");
    }

    use super::*;

    fn render(format: Format, diagnostics: &[Diagnostic], colored: bool) -> String {
        let renderer = Renderer {
            style: Style { colored },
            base: PathBuf::from("."),
        };
        let mut out = Vec::new();
        renderer
            .report(&mut out, format, diagnostics, false)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    fn sample() -> Diagnostic {
        Diagnostic::error(
            "E_CONFIG_REF_NOT_FOUND",
            "Agent/planner refers to Model/claude, which is not defined",
        )
        .with_file("goondan.yaml")
        .with_field("spec.modelRef")
        .with_location(23, 13)
        .with_document(3)
        .with_suggestion("did you mean Model/claude-sonnet (goondan.yaml:9)?")
    }

    #[test]
    fn text_matches_the_house_format() {
        assert_eq!(
            render(Format::Text, &[sample()], false),
            "error[E_CONFIG_REF_NOT_FOUND]: Agent/planner refers to Model/claude, which is not defined
  --> goondan.yaml:23:13 (document 3)
   = field: spec.modelRef
   = help: did you mean Model/claude-sonnet (goondan.yaml:9)?
Errors: 1, Warnings: 0
"
        );
        assert!(render(Format::Text, &[sample()], true).contains("\x1b[1;31merror"));
    }

    #[test]
    fn a_readable_source_shows_its_line_with_a_caret_under_the_token() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(
            folder.path().join("goondan.yaml"),
            "apiVersion: goondan.ai/v1\nkind: Agnt # typo\nmetadata:\n  name: \"a\"\n",
        )
        .unwrap();
        let renderer = Renderer {
            style: Style { colored: false },
            base: folder.path().to_path_buf(),
        };
        let kind = Diagnostic::error("E_CONFIG_UNKNOWN_KIND", "`Agnt` is not a resource kind")
            .with_file("goondan.yaml")
            .with_field("kind")
            .with_location(2, 7)
            .with_document(1)
            .with_suggestion("did you mean Agent?");
        let name = Diagnostic::warning("E_X", "quoted")
            .with_file("goondan.yaml")
            .with_location(4, 9);
        let mut out = Vec::new();
        renderer
            .report(&mut out, Format::Text, &[kind, name], false)
            .unwrap();
        let shown = folder.path().join("goondan.yaml").display().to_string();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "error[E_CONFIG_UNKNOWN_KIND]: `Agnt` is not a resource kind
 --> {shown}:2:7
  |
2 | kind: Agnt # typo
  |       ^^^^ document 1
  |
  = field: kind
  = help: did you mean Agent?

warning[E_X]: quoted
 --> {shown}:4:9
  |
4 |   name: \"a\"
  |         ^^^

Errors: 1, Warnings: 1
"
            )
        );
    }

    #[test]
    fn token_spans_end_where_a_yaml_reader_sees_the_value_end() {
        for (line, column, token) in [
            ("kind: Agnt", 7, "Agnt"),
            ("  modelRef: Model/x # note", 13, "Model/x"),
            ("  modelRef: Model/x # note", 3, "modelRef"),
            ("  - 'a: b'  ", 5, "'a: b'"),
            ("tools: [a, b]", 9, "a"),
            ("tools: [a, [b]] # x", 8, "[a, [b]]"),
            ("env: { A: 1 }", 6, "{ A: 1 }"),
            ("url: http://x:1/y", 6, "http://x:1/y"),
            ("short", 9, ""),
        ] {
            assert_eq!(
                &line[token_span(line, column)],
                token,
                "{line:?} at {column}"
            );
        }
    }

    #[test]
    fn github_annotations_escape_their_values() {
        let text = render(
            Format::Github,
            &[sample().with_suggestion("a, b: 100%")],
            false,
        );
        assert_eq!(
            text,
            "::error file=goondan.yaml,line=23,col=13,title=E_CONFIG_REF_NOT_FOUND::Agent/planner refers to Model/claude, which is not defined (field spec.modelRef)%0Ahelp: a, b: 100%25\n"
        );
    }
}
