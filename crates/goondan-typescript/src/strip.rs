//! The strip pipeline: choose the source type from the path, parse, build
//! scoping, run oxc's TypeScript transform with every other transform off,
//! print. Owns the mapping of oxc diagnostics to [`SourceProblem`]s; owns
//! no IO.

use std::path::Path;

use oxc_allocator::Allocator;
use oxc_ast::ast::{Decorator, Program, Statement, TSModuleReference};
use oxc_ast_visit::Visit;
use oxc_codegen::{Codegen, CodegenOptions};
use oxc_diagnostics::{OxcDiagnostic, Severity};
use oxc_parser::Parser;
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;
use oxc_transformer::{TransformOptions, Transformer};

use crate::error::{SourceProblem, StripError};

/// Turns the TypeScript `source`, read from `path`, into JavaScript.
///
/// `path` decides how the text is read and is quoted in errors; nothing is
/// read from it:
///
/// * `.ts` and `.mts`: an ES module (the output is an ES module);
/// * `.cts`: CommonJS (the output is CommonJS);
/// * `.d.ts` and friends: declarations only, so the output is empty;
/// * `.tsx` and anything else: refused with [`StripError::UnsupportedFile`].
///
/// Types, interfaces, type aliases, type-only imports and exports,
/// `declare`d items, `as`, `satisfies`, `!` and accessibility modifiers
/// are removed. Enums (`const` ones too) become plain objects built by an
/// immediately invoked function, parameter properties become assignments in
/// the constructor, and namespaces become objects. Imports whose bindings
/// are used only as types are removed, as `tsc` does without
/// `verbatimModuleSyntax`. Import specifiers are printed as written.
/// The output is reprinted, not patched: most comments are kept, blank
/// lines and formatting are not, so its line numbers do not match the
/// source's.
///
/// # Errors
///
/// [`StripError::Syntax`] when the parser (or the syntax checks of
/// semantic analysis) reports an error, [`StripError::Transform`] when the
/// transform refuses a construct; both carry every problem with its line
/// and column. Decorators, and in a `.ts` or `.mts` file `export =` and
/// `import x = require(..)`, are a [`StripError::Transform`]: the output
/// could not run.
pub fn strip_types(source: &str, path: &Path) -> Result<String, StripError> {
    let source_type = source_type_for(path)?;
    let allocator = Allocator::default();

    let parsed = Parser::new(&allocator, source, source_type).parse();
    if !parsed.diagnostics.is_empty() || parsed.panicked {
        return Err(StripError::Syntax {
            path: path.to_path_buf(),
            problems: problems(source, &parsed.diagnostics),
        });
    }
    let mut program = parsed.program;
    let refused = refused_constructs(&program, source_type.is_module());
    if !refused.is_empty() {
        return Err(StripError::Transform {
            path: path.to_path_buf(),
            problems: refused
                .into_iter()
                .map(|(offset, message)| {
                    let (line, column) = line_and_column(source, offset);
                    SourceProblem {
                        line,
                        column,
                        message: message.into(),
                        help: None,
                    }
                })
                .collect(),
        });
    }

    let semantic = SemanticBuilder::new()
        .with_check_syntax_error(true)
        // Enum member values are computed here for the enum transform.
        .with_enum_eval(true)
        // The transform adds scopes and symbols (enum and namespace
        // wrappers); reserving room up front avoids regrowing the tables.
        .with_excess_capacity(2.0)
        .build(&program);
    if !semantic.diagnostics.is_empty() {
        return Err(StripError::Syntax {
            path: path.to_path_buf(),
            problems: problems(source, &semantic.diagnostics),
        });
    }
    let scoping = semantic.semantic.into_scoping();

    // The defaults run only the TypeScript transform on a TypeScript
    // source: every ES-version lowering, JSX and decorator transform is
    // off, and import specifiers are left alone.
    let options = TransformOptions::default();
    let transformed =
        Transformer::new(&allocator, path, &options).build_with_scoping(scoping, &mut program);
    let transform_errors: Vec<&OxcDiagnostic> = (&transformed.diagnostics)
        .into_iter()
        .filter(|diagnostic| diagnostic.severity == Severity::Error)
        .collect();
    if !transform_errors.is_empty() {
        return Err(StripError::Transform {
            path: path.to_path_buf(),
            problems: problems(source, transform_errors),
        });
    }

    let printed = Codegen::new()
        .with_options(CodegenOptions::default())
        .build(&program);
    Ok(printed.code)
}

/// Checks that `source`, read from `path`, parses: TypeScript for `.ts`,
/// `.mts` and `.cts`, JavaScript for `.js`, `.mjs` and `.cjs`. Any other
/// extension is not read and passes. Nothing is transformed; this is what
/// `gdn validate` and a swarm's start-up ask of a script entry, so a
/// syntax error is reported with its line before a plugin host runs it.
///
/// # Errors
///
/// [`StripError::Syntax`] with every problem the parser (and the syntax
/// checks of semantic analysis) reported, each with its line and column.
pub fn check_syntax(source: &str, path: &Path) -> Result<(), StripError> {
    let extension = path
        .extension()
        .and_then(|extension| extension.to_str())
        .unwrap_or("");
    let source_type = match extension {
        "ts" | "mts" | "cts" => source_type_for(path)?,
        // A `.js` plugin is loaded with `import()`, as a module.
        "js" | "mjs" => SourceType::mjs(),
        "cjs" => SourceType::cjs(),
        _ => return Ok(()),
    };
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, source, source_type).parse();
    let mut diagnostics = parsed.diagnostics;
    if diagnostics.is_empty() && !parsed.panicked {
        diagnostics = SemanticBuilder::new()
            .with_check_syntax_error(true)
            .build(&parsed.program)
            .diagnostics;
    }
    if diagnostics.is_empty() && !parsed.panicked {
        return Ok(());
    }
    Err(StripError::Syntax {
        path: path.to_path_buf(),
        problems: problems(source, &diagnostics),
    })
}

/// The constructs that parse but have no JavaScript form the output could
/// use, with their byte offsets, in source order:
///
/// * decorators: the transform would keep them, and no Node version runs
///   them (lowering them needs helper functions from a package the plugin
///   host does not have);
/// * in an ES module, `export =` and `import x = require(..)`: the
///   transform turns them into `module.exports =` and `require(..)`, which
///   an ES module has not got, so the output would fail only when loaded.
fn refused_constructs(program: &Program<'_>, is_module: bool) -> Vec<(u32, &'static str)> {
    let mut refused = Vec::new();
    if is_module {
        refused.extend(program.body.iter().filter_map(commonjs_only));
    }
    let mut decorators = DecoratorFinder::default();
    decorators.visit_program(program);
    refused.extend(decorators.offsets.into_iter().map(|offset| {
        (
            offset,
            "decorators are not supported: Node cannot run them and stripping does not lower them",
        )
    }));
    refused.sort_by_key(|(offset, _)| *offset);
    refused
}

/// `statement`'s offset and message when only CommonJS can run it.
fn commonjs_only(statement: &Statement<'_>) -> Option<(u32, &'static str)> {
    match statement {
        Statement::TSExportAssignment(assignment) => Some((
            assignment.span.start,
            "`export =` is CommonJS; an ES module needs `export default`",
        )),
        Statement::TSImportEqualsDeclaration(declaration)
            if declaration.import_kind.is_value()
                && matches!(
                    declaration.module_reference,
                    TSModuleReference::ExternalModuleReference(_)
                ) =>
        {
            Some((
                declaration.span.start,
                "`import x = require(..)` is CommonJS; an ES module needs `import x from`",
            ))
        }
        _ => None,
    }
}

/// Collects the offset of every decorator, however deeply nested.
#[derive(Default)]
struct DecoratorFinder {
    offsets: Vec<u32>,
}

impl<'a> Visit<'a> for DecoratorFinder {
    fn visit_decorator(&mut self, decorator: &Decorator<'a>) {
        self.offsets.push(decorator.span.start);
    }
}

/// The parser's source type for `path`, or the refusal.
fn source_type_for(path: &Path) -> Result<SourceType, StripError> {
    let extension = path
        .extension()
        .and_then(|extension| extension.to_str())
        .unwrap_or("");
    let unsupported = |kind: String| StripError::UnsupportedFile {
        path: path.to_path_buf(),
        kind,
    };
    match extension {
        "ts" | "mts" | "cts" => {}
        "tsx" => return Err(unsupported("TSX".into())),
        "" => return Err(unsupported("extension-less".into())),
        other => return Err(unsupported(format!(".{other}"))),
    }
    let source_type =
        SourceType::from_path(path).map_err(|_| unsupported(format!(".{extension}")))?;
    // A `.ts` file is read as an ES module: the plugin host loads the
    // output with `import()`, whatever the file contains.
    Ok(if extension == "ts" {
        source_type.with_module(true)
    } else {
        source_type
    })
}

/// Every diagnostic placed at its first label's line and column, in source
/// order.
fn problems<'d>(
    source: &str,
    diagnostics: impl IntoIterator<Item = &'d OxcDiagnostic>,
) -> Vec<SourceProblem> {
    let mut placed: Vec<(u32, SourceProblem)> = diagnostics
        .into_iter()
        .map(|diagnostic| {
            let offset = diagnostic
                .labels
                .iter()
                .find(|label| label.primary())
                .or_else(|| diagnostic.labels.first())
                .map_or(0, |label| label.offset());
            let (line, column) = line_and_column(source, offset);
            let problem = SourceProblem {
                line,
                column,
                message: diagnostic.message.to_string(),
                help: diagnostic.help.as_ref().map(|help| help.to_string()),
            };
            (offset, problem)
        })
        .collect();
    placed.sort_by_key(|(offset, _)| *offset);
    placed.into_iter().map(|(_, problem)| problem).collect()
}

/// The 1-based line and character column of byte `offset` in `source`.
/// An offset past the end or inside a character is clamped to the
/// character boundary before it.
fn line_and_column(source: &str, offset: u32) -> (u32, u32) {
    let mut offset = (offset as usize).min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before[line_start..].chars().count() + 1;
    (
        u32::try_from(line).unwrap_or(u32::MAX),
        u32::try_from(column).unwrap_or(u32::MAX),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column_are_one_based_and_count_characters() {
        let source = "ab\ncé\nxyz";
        let cases = [
            (0, (1, 1)),
            (2, (1, 3)),
            (3, (2, 1)),
            (4, (2, 2)),
            // `é` is two bytes; the byte after it is column 3.
            (6, (2, 3)),
            // Inside `é`: clamped to its start.
            (5, (2, 2)),
            (7, (3, 1)),
            (100, (3, 4)),
        ];
        for (offset, expected) in cases {
            assert_eq!(line_and_column(source, offset), expected, "offset {offset}");
        }
    }

    #[test]
    fn the_extension_decides_what_is_refused() {
        let cases = [
            ("a.ts", None),
            ("a.mts", None),
            ("a.cts", None),
            ("types.d.ts", None),
            ("view.tsx", Some("TSX")),
            ("plain.js", Some(".js")),
            ("README", Some("extension-less")),
        ];
        for (path, refused_as) in cases {
            let result = source_type_for(Path::new(path));
            match (result, refused_as) {
                (Ok(_), None) => {}
                (Err(StripError::UnsupportedFile { kind, .. }), Some(expected)) => {
                    assert_eq!(kind, expected, "{path}")
                }
                (other, _) => panic!("{path}: unexpected {other:?}"),
            }
        }
    }
}
