//! Workspace rules that no compiler checks (STYLE.md §2):
//!
//! * crates follow the data flow and nothing depends rightward;
//! * every Rust file opens with a `//!` header saying what it owns;
//! * every library crate warns on missing docs and unreachable `pub`;
//! * every dependency a manifest names is used by the code it is for.

use std::path::{Path, PathBuf};

/// The crates in flow order; a crate may depend only on crates before it.
const FLOW: &[&str] = &[
    "goondan-types",
    "goondan-sandbox",
    "goondan-http",
    "goondan-a2a",
    "goondan-typescript",
    "goondan-telemetry",
    "goondan-config",
    "goondan-package",
    "goondan-store",
    "goondan-model",
    "goondan-ipc",
    "goondan-cluster",
    "goondan-runtime",
    "goondan-plugin",
    "goondan-connector",
    "goondan-mcp",
    "goondan-base",
    "goondan-agent",
    "goondan-orchestrator",
    "goondan-client",
    "goondan-studio",
    "goondan-host",
    "goondan-eval",
    "goondan-serve",
    "gdn",
];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/gdn sits two levels below the root")
        .to_path_buf()
}

fn crate_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace_root().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    dirs
}

/// Which table of a manifest a dependency is declared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DependencyKind {
    Normal,
    Dev,
    Build,
}

/// One dependency a manifest declares, as `(kind, name)` with the name as
/// written (`goondan-types`, not `goondan_types`). Reads `[dependencies]`,
/// `[dev-dependencies]`, `[build-dependencies]`, their
/// `[target.'cfg(..)'.*]` forms and the `[dependencies.name]` table form.
fn declared_dependencies(manifest: &str) -> Vec<(DependencyKind, String)> {
    let mut section: Option<DependencyKind> = None;
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_end_matches(']').trim();
            // `target.'cfg(unix)'.dependencies` names the same tables.
            let table = match header.strip_prefix("target.") {
                Some(rest) => rest.rsplit_once("'.").map_or(rest, |(_, table)| table),
                None => header,
            };
            let (table, table_form_name) = match table.split_once('.') {
                Some((table, name)) => (table, Some(name)),
                None => (table, None),
            };
            section = match table {
                "dependencies" => Some(DependencyKind::Normal),
                "dev-dependencies" => Some(DependencyKind::Dev),
                "build-dependencies" => Some(DependencyKind::Build),
                _ => None,
            };
            if let (Some(kind), Some(name)) = (section, table_form_name) {
                found.push((kind, name.to_string()));
                // The keys below are that dependency's fields.
                section = None;
            }
            continue;
        }
        let Some(kind) = section else { continue };
        let Some(name) = line.split(['=', '.']).next().map(str::trim) else {
            continue;
        };
        let is_key = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if is_key {
            found.push((kind, name.to_string()));
        }
    }
    found
}

/// The `goondan-*` names a manifest needs to build its library and
/// binaries (`[dependencies]`, target-specific ones included).
fn normal_dependencies(manifest: &str) -> Vec<String> {
    declared_dependencies(manifest)
        .into_iter()
        .filter(|(kind, name)| *kind == DependencyKind::Normal && name.starts_with("goondan-"))
        .map(|(_, name)| name)
        .collect()
}

#[test]
fn crates_follow_the_flow_and_nothing_depends_rightward() {
    let mut problems = Vec::new();
    for dir in crate_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let Some(position) = FLOW.iter().position(|known| *known == name) else {
            problems.push(format!(
                "{name} is not placed in the FLOW list of tests/tidy.rs"
            ));
            continue;
        };
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        for dependency in normal_dependencies(&manifest) {
            match FLOW.iter().position(|known| *known == dependency) {
                Some(dep_position) if dep_position < position => {}
                _ => problems.push(format!(
                    "{name} depends on {dependency}, which is not to its left"
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path
                .file_name()
                .is_some_and(|name| name != "target" && name != "fixtures")
            {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_rust_file_opens_with_a_module_header() {
    let mut files = Vec::new();
    for dir in crate_dirs() {
        rust_files(&dir, &mut files);
    }
    let missing: Vec<String> = files
        .iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            !text.trim_start().starts_with("//!")
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` header:\n{}",
        missing.join("\n")
    );
}

#[test]
fn library_crates_warn_on_missing_docs() {
    let mut problems = Vec::new();
    for dir in crate_dirs() {
        let lib = dir.join("src/lib.rs");
        if !lib.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&lib).unwrap();
        for needle in ["missing_docs", "unreachable_pub", "unsafe_code"] {
            if !text.contains(needle) {
                problems.push(format!("{} does not set `{needle}`", lib.display()));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Dependencies that are declared but not named in the code they are for,
/// on purpose: `(crate, dependency, why)`. Keep each entry explained; a
/// dependency that only turns on a feature of another one, or that is
/// named only in a doc test, belongs here.
const UNUSED_DEPENDENCY_ALLOWED: &[(&str, &str, &str)] = &[];

/// The text of every `.rs` file under `dir/sub` for each `sub`, with
/// `//` comment lines left out; with `skip_unit_tests`, a file's
/// `#[cfg(test)] mod ..` and everything after it (STYLE.md puts unit tests
/// at the end of the file) are left out too.
fn code_under(dir: &Path, subdirs: &[&str], skip_unit_tests: bool) -> String {
    let mut files = Vec::new();
    for sub in subdirs {
        let path = dir.join(sub);
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else if path.is_file() {
            files.push(path);
        }
    }
    let mut code = String::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            let trimmed = line.trim_start();
            if skip_unit_tests
                && trimmed.starts_with("#[cfg(test)]")
                && lines.peek().is_some_and(|next| {
                    // `mod tests {`, not `mod testing;` (a file of its own).
                    next.trim_start().starts_with("mod ") && !next.trim_end().ends_with(';')
                })
            {
                break;
            }
            if !trimmed.starts_with("//") {
                code.push_str(line);
                code.push('\n');
            }
        }
    }
    code
}

/// Whether `code` names the crate `name` (already with `_` for `-`): as a
/// path (`name::`, which covers `use name::..`, `#[name::test]` and
/// `#[derive(name::Trait)]`), as `use name;` / `use name as ..`, or as
/// `extern crate name`.
fn names_crate(code: &str, name: &str) -> bool {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        if before.is_some_and(is_ident) {
            return false;
        }
        let after = &code[at + name.len()..];
        if after.starts_with("::") {
            return true;
        }
        if after.chars().next().is_some_and(is_ident) {
            return false;
        }
        let prefix = code[..at].trim_end();
        ["use", "extern crate"].iter().any(|keyword| {
            prefix
                .strip_suffix(keyword)
                .is_some_and(|rest| !rest.chars().next_back().is_some_and(is_ident))
        })
    })
}

#[test]
fn every_declared_dependency_is_used() {
    let mut problems = Vec::new();
    for dir in crate_dirs() {
        let crate_name = dir.file_name().unwrap().to_string_lossy().to_string();
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let declared = declared_dependencies(&manifest);
        // `[dependencies]` serve the library and binaries, not their unit
        // tests: a crate named only under `#[cfg(test)]` is a
        // dev-dependency.
        let shipped_code = code_under(&dir, &["src"], true);
        let dev_code = code_under(&dir, &["src", "tests", "benches", "examples"], false);
        let build_code = code_under(&dir, &["build.rs"], false);
        for (kind, dependency) in &declared {
            let allowed = UNUSED_DEPENDENCY_ALLOWED
                .iter()
                .any(|(owner, allowed, _)| *owner == crate_name && allowed == dependency);
            let code = match kind {
                DependencyKind::Normal => &shipped_code,
                DependencyKind::Dev => &dev_code,
                DependencyKind::Build => &build_code,
            };
            if !allowed && !names_crate(code, &dependency.replace('-', "_")) {
                let (table, searched) = match kind {
                    DependencyKind::Normal => ("dependencies", "src/ (outside unit tests)"),
                    DependencyKind::Dev => {
                        ("dev-dependencies", "src/, tests/, benches/ or examples/")
                    }
                    DependencyKind::Build => ("build-dependencies", "build.rs"),
                };
                problems.push(format!(
                    "{crate_name}: [{table}] names `{dependency}`, which nothing in {searched} uses; \
                     remove it, or add it to UNUSED_DEPENDENCY_ALLOWED in tests/tidy.rs with a reason"
                ));
            }
        }
    }
    for (owner, dependency, _) in UNUSED_DEPENDENCY_ALLOWED {
        let manifest = workspace_root()
            .join("crates")
            .join(owner)
            .join("Cargo.toml");
        let declared = std::fs::read_to_string(&manifest)
            .map(|text| declared_dependencies(&text))
            .unwrap_or_default();
        if !declared.iter().any(|(_, name)| name == dependency) {
            problems.push(format!(
                "UNUSED_DEPENDENCY_ALLOWED names {owner} -> {dependency}, which is no longer declared"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_workspace_dependency_is_declared_by_a_crate() {
    let root = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let mut in_table = false;
    let mut offered = Vec::new();
    for line in root.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_table = line == "[workspace.dependencies]";
            continue;
        }
        let name = line.split(['=', '.']).next().unwrap_or("").trim();
        if in_table && !name.is_empty() && !name.starts_with('#') {
            offered.push(name.to_string());
        }
    }
    let declared: Vec<String> = crate_dirs()
        .iter()
        .flat_map(|dir| {
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
            declared_dependencies(&manifest)
                .into_iter()
                .map(|(_, name)| name)
        })
        .collect();
    let unused: Vec<&String> = offered
        .iter()
        .filter(|name| !declared.contains(name))
        .collect();
    assert!(
        unused.is_empty(),
        "[workspace.dependencies] of the root Cargo.toml offers {unused:?}, which no crate declares; remove them"
    );
}

#[test]
fn manifest_tables_are_read_as_cargo_reads_them() {
    let manifest = r#"
[package]
name = "example"

[dependencies]
serde.workspace = true
tokio = { workspace = true, features = [
    "rt",
] }

[target.'cfg(unix)'.dependencies]
nix = { workspace = true }

[dev-dependencies]
tempfile = "3"

[dependencies.goondan-types]
path = "../goondan-types"

[[bench]]
name = "load"
"#;
    use DependencyKind::*;
    let expected = [
        (Normal, "serde"),
        (Normal, "tokio"),
        (Normal, "nix"),
        (Dev, "tempfile"),
        (Normal, "goondan-types"),
    ];
    let found = declared_dependencies(manifest);
    let found: Vec<(DependencyKind, &str)> = found
        .iter()
        .map(|(kind, name)| (*kind, name.as_str()))
        .collect();
    assert_eq!(found, expected);
    assert_eq!(normal_dependencies(manifest), ["goondan-types"]);
}

#[test]
fn crate_names_are_found_only_as_crate_paths() {
    let cases = [
        ("use rand::RngExt;", "rand", true),
        ("#[tokio::test]", "tokio", true),
        ("#[derive(serde::Serialize)]", "serde", true),
        ("use nix;", "nix", true),
        ("extern crate libc;", "libc", true),
        ("let operand::x = 1;", "rand", false),
        ("serde_json::json!({})", "serde", false),
        ("let tokio = 1;", "tokio", false),
        ("fuse nix;", "nix", false),
    ];
    for (code, name, expected) in cases {
        assert_eq!(names_crate(code, name), expected, "{name} in {code:?}");
    }
}

/// The module path of a file under `crates/gdn/src` (`commands/run.rs` is
/// `commands::run`, `commands/mod.rs` is `commands`, `main.rs` the root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if path
        .last()
        .is_some_and(|last| last == "mod" || last == "main")
    {
        path.pop();
    }
    path
}

/// The modules of `gdn` that `code` (of the module `module`) names through
/// `crate::…` or `super::…` paths, among `known`.
fn named_modules(code: &str, module: &[String], known: &[Vec<String>]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        for (at, _) in code.match_indices(prefix) {
            // `goondan_host::crate::` cannot occur; `foo::super::` can't
            // either, so only a path that starts here counts.
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut path = base.clone();
            for segment in code[at + prefix.len()..].split("::") {
                let name: String = segment
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    break;
                }
                path.push(name.clone());
                if !known.contains(&path) {
                    path.pop();
                    break;
                }
                if segment.len() != name.len() {
                    break;
                }
            }
            if !path.is_empty() && path != module && !module.starts_with(&path) {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn gdn_modules_name_each_other_without_a_circle() {
    let src = workspace_root().join("crates/gdn/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: Vec<Vec<String>> = files.iter().map(|file| module_of(&src, file)).collect();
    let mut edges: std::collections::BTreeMap<
        Vec<String>,
        std::collections::BTreeSet<Vec<String>>,
    > = Default::default();
    for (file, module) in files.iter().zip(&modules) {
        // Unit tests may reach anywhere; STYLE.md puts them last.
        let name = file.file_name().unwrap().to_str().unwrap();
        let code = code_under(file.parent().unwrap(), &[name], true);
        edges
            .entry(module.clone())
            .or_default()
            .extend(named_modules(&code, module, &modules));
    }
    // Depth-first search with colors; a grey module met again is a circle.
    fn visit(
        module: &Vec<String>,
        edges: &std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>>,
        grey: &mut Vec<Vec<String>>,
        black: &mut std::collections::BTreeSet<Vec<String>>,
        circles: &mut Vec<String>,
    ) {
        if black.contains(module) {
            return;
        }
        if let Some(at) = grey.iter().position(|seen| seen == module) {
            let circle: Vec<String> = grey[at..]
                .iter()
                .chain(std::iter::once(module))
                .map(|path| path.join("::"))
                .collect();
            circles.push(circle.join(" -> "));
            return;
        }
        grey.push(module.clone());
        for next in edges.get(module).into_iter().flatten() {
            visit(next, edges, grey, black, circles);
        }
        grey.pop();
        black.insert(module.clone());
    }
    let mut circles = Vec::new();
    let mut black = std::collections::BTreeSet::new();
    for module in edges.keys() {
        visit(module, &edges, &mut Vec::new(), &mut black, &mut circles);
    }
    assert!(
        circles.is_empty(),
        "modules of gdn that name each other in a circle:\n{}",
        circles.join("\n")
    );
}

#[test]
fn module_references_are_read_as_paths() {
    let known: Vec<Vec<String>> = [
        vec!["commands"],
        vec!["commands", "run"],
        vec!["commands", "cluster"],
        vec!["render"],
    ]
    .iter()
    .map(|path| path.iter().map(|part| part.to_string()).collect())
    .collect();
    let run: Vec<String> = vec!["commands".into(), "run".into()];
    let code = "use super::cluster::ask;\nuse crate::render::error;\nlet x = goondan_host::cluster::client;\ncrate::commands::run::foo();";
    assert_eq!(
        named_modules(code, &run, &known),
        vec![
            vec!["render".to_string()],
            vec!["commands".to_string(), "cluster".to_string()],
        ]
    );
}
