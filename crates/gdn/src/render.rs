//! Diagnostic rendering: text for people, JSON for tools, and GitHub
//! Actions annotations for CI. Rendering never changes a diagnostic; the
//! caller decides severities (for example `--strict`).

use crate::cli::Format;
use goondan_types::{Diagnostic, Severity};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

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
        for diagnostic in diagnostics {
            let label = match diagnostic.severity {
                Severity::Error => {
                    errors += 1;
                    self.style.paint("error", "1;31")
                }
                Severity::Warning => {
                    warnings += 1;
                    if quiet {
                        continue;
                    }
                    self.style.paint("warning", "1;33")
                }
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
        }
        if !quiet {
            writeln!(out, "Errors: {errors}, Warnings: {warnings}")?;
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

#[cfg(test)]
mod tests {
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
