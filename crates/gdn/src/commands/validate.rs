//! `gdn validate [path] [--strict] [--fix] [--format text|json|github]`:
//! loads the bundle, prints every diagnostic, and exits 0 (valid), 3
//! (unreadable) or 4 (invalid). `--fix` first rewrites what has one right
//! fix (`goondan_config::fix`) and validates the result. It starts no async runtime and no logging: it is a file
//! check and must stay fast.

use crate::cli::{Format, GlobalArgs, ValidateArgs};
use crate::exit::Outcome;
use crate::render::{Renderer, Style};
use goondan_config::{load_bundle, LoadOptions};
use goondan_types::{Diagnostic, Severity};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Runs `gdn validate`.
pub(crate) fn run(global: &GlobalArgs, args: &ValidateArgs) -> anyhow::Result<Outcome> {
    let path = args
        .path
        .clone()
        .or_else(|| global.config.clone())
        .unwrap_or_else(|| PathBuf::from("."));
    let format = match (args.format, global.json) {
        (Some(format), _) => format,
        (None, true) => Format::Json,
        (None, false) => Format::Text,
    };
    let stdout = std::io::stdout();
    let colored = format == Format::Text
        && !global.no_color
        && std::env::var_os("NO_COLOR").is_none()
        && stdout.is_terminal();
    let renderer = Renderer {
        style: Style { colored },
        base: display_base(&path),
    };
    let mut out = stdout.lock();

    let options = LoadOptions {
        env_file: args.env_file.clone(),
        inherit_process_env: true,
        packages_root: crate::project::packages_root(global),
        ..LoadOptions::default()
    };
    let mut loaded = load_bundle(&path, &options);
    if args.fix {
        if let Ok(outcome) = &loaded {
            let fixed = goondan_config::fix::fix_bundle(&path, &outcome.diagnostics)?;
            for fix in &fixed {
                eprintln!("fixed {}:{}: {}", fix.file, fix.line, fix.description);
            }
            if !fixed.is_empty() {
                loaded = load_bundle(&path, &options);
            }
        }
    }
    let outcome = match loaded {
        Ok(outcome) => outcome,
        Err(error) => {
            let diagnostic = error.to_diagnostic();
            renderer.report(&mut out, format, &[diagnostic], global.quiet)?;
            out.flush()?;
            return Ok(Outcome::ConfigError);
        }
    };

    let mut diagnostics = outcome.diagnostics;
    if args.strict {
        for diagnostic in &mut diagnostics {
            diagnostic.severity = Severity::Error;
        }
    }
    if global.verbose > 0 && format == Format::Text {
        writeln!(out, "Validating {}", path.display())?;
        if let Some(bundle) = &outcome.bundle {
            writeln!(out, "{}", summary(bundle))?;
        }
    }
    renderer.report(&mut out, format, &diagnostics, global.quiet)?;
    out.flush()?;
    if diagnostics.iter().any(Diagnostic::is_error) {
        Ok(Outcome::ValidationFailed)
    } else {
        Ok(Outcome::Success)
    }
}

/// What a valid bundle holds, in one line.
fn summary(bundle: &goondan_config::Bundle) -> String {
    let builtin_tools = bundle
        .tools()
        .iter()
        .filter(|tool| !tool.origin.is_local())
        .count();
    format!(
        "Loaded {} model(s), {} agent(s), {} swarm(s), {} connection(s), {} local tool(s), {} built-in tool(s)",
        bundle.models().len(),
        bundle.agents().len(),
        bundle.swarms().len(),
        bundle.connections().len(),
        bundle.tools().len() - builtin_tools,
        builtin_tools,
    )
}

/// Diagnostic files are relative to the bundle root; shown relative to
/// where the user is, they can be clicked and opened.
fn display_base(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.to_path_buf()
    } else {
        path.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}
