//! Workspace rules that no compiler checks (STYLE.md §2):
//!
//! * crates follow the data flow and nothing depends rightward;
//! * every Rust file opens with a `//!` header saying what it owns;
//! * every library crate warns on missing docs and unreachable `pub`;
//! * every dependency a manifest names is used by the code it is for;
//! * no crate's modules name each other in a circle.

use std::collections::{BTreeMap, BTreeSet};
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
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let allowed = UNSAFE_ALLOWED
            .iter()
            .any(|(crate_name, _)| *crate_name == name);
        if !allowed && !text.contains("#![forbid(unsafe_code)]") {
            problems.push(format!(
                "{} needs no unsafe code, so it forbids it: `#![forbid(unsafe_code)]`",
                lib.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The library crates that hold `unsafe` code, and why; every other one
/// forbids it.
const UNSAFE_ALLOWED: &[(&str, &str)] = &[
    (
        "goondan-sandbox",
        "process isolation: between fork and exec, the bash helper's loop, peer credentials",
    ),
    (
        "goondan-base",
        "the bash tool asks the kernel for the effective uid and sets up its sandbox's child",
    ),
];

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

/// The module path of a file under a crate's `src` (`commands/run.rs` is
/// `commands::run`, `commands/mod.rs` is `commands`, `main.rs` or
/// `lib.rs` the root).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap().with_extension("");
    let mut path: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    let is_root = path.len() == 1 && (path[0] == "main" || path[0] == "lib");
    if is_root || path.last().is_some_and(|last| last == "mod") {
        path.pop();
    }
    path
}

/// The paths a use tree (or a plain path) at the start of `text` names,
/// each cut at its first segment that is not a plain name: `a::B` is
/// `[a, B]`, `{a::B, c::{self, d::E as F}}` is `[a, B]`, `[c]`,
/// `[c, d, E]`.
fn use_tree_paths(text: &str) -> Vec<Vec<String>> {
    fn is_ident(c: char) -> bool {
        c.is_alphanumeric() || c == '_'
    }
    /// Reads one tree below `prefix`; returns the text after it.
    fn tree<'t>(
        mut text: &'t str,
        mut prefix: Vec<String>,
        found: &mut Vec<Vec<String>>,
    ) -> &'t str {
        loop {
            text = text.trim_start();
            if let Some(mut rest) = text.strip_prefix('{') {
                loop {
                    rest = tree(rest, prefix.clone(), found).trim_start();
                    if let Some(after) = rest.strip_prefix(',') {
                        rest = after;
                    } else {
                        // `}`, or text this reader does not follow.
                        return rest.strip_prefix('}').unwrap_or(rest);
                    }
                }
            }
            let name: String = text.chars().take_while(|c| is_ident(*c)).collect();
            if name.is_empty() {
                if !prefix.is_empty() {
                    found.push(prefix);
                }
                return text;
            }
            text = &text[name.len()..];
            if name != "self" {
                prefix.push(name);
            }
            match text.strip_prefix("::") {
                Some(rest) => text = rest,
                None => {
                    found.push(prefix);
                    // `X as Y`: the alias names nothing new.
                    let rest = text.trim_start();
                    return match rest.strip_prefix("as ") {
                        Some(alias) => alias.trim_start().trim_start_matches(is_ident),
                        None => text,
                    };
                }
            }
        }
    }
    let mut found = Vec::new();
    tree(text, Vec::new(), &mut found);
    found
}

/// The modules of a crate that `code` (of the module `module`) names
/// through `crate::…`, `super::…` or `self::…` paths, use trees with
/// braces included, among `known`; an item the root re-exports
/// (`reexports`: `HostMode` for `pub use mode::HostMode`) names the
/// module it comes from. A module's own ancestors are left out:
/// a child naming its parent is one concept, not a circle.
fn named_modules(
    code: &str,
    module: &[String],
    known: &[Vec<String>],
    reexports: &BTreeMap<String, Vec<String>>,
) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let parent = module[..module.len().saturating_sub(1)].to_vec();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", parent),
        ("self::", module.to_vec()),
    ] {
        for (at, _) in code.match_indices(prefix) {
            // `goondan_host::crate::` cannot occur, and `super::super::`
            // is read from its first `super`: only a path that starts
            // here counts.
            let before = code[..at].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            for named in use_tree_paths(&code[at + prefix.len()..]) {
                let mut path = base.clone();
                let mut segments = named.iter().peekable();
                while segments.peek().is_some_and(|segment| *segment == "super") {
                    segments.next();
                    path.pop();
                }
                for segment in segments {
                    path.push(segment.clone());
                    if !known.contains(&path) {
                        path.pop();
                        // `crate::Thing` the root re-exports from a
                        // module names that module.
                        if let Some(target) = reexports.get(segment).filter(|_| path.is_empty()) {
                            path = target.clone();
                        }
                        break;
                    }
                }
                if !path.is_empty() && !module.starts_with(&path) && !found.contains(&path) {
                    found.push(path);
                }
            }
        }
    }
    found
}

/// Which modules of the crate under `src` name which: every `.rs` file
/// is a module, its unit tests left out (they may reach anywhere;
/// STYLE.md puts them last).
fn module_graph(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: Vec<Vec<String>> = files.iter().map(|file| module_of(src, file)).collect();
    let code_of = |file: &PathBuf| {
        let name = file.file_name().unwrap().to_str().unwrap();
        code_under(file.parent().unwrap(), &[name], true)
    };
    let mut reexports = BTreeMap::new();
    for (file, _) in files
        .iter()
        .zip(&modules)
        .filter(|(_, module)| module.is_empty())
    {
        let code = code_of(file);
        for (at, _) in code.match_indices("pub use ") {
            for named in use_tree_paths(&code[at + "pub use ".len()..]) {
                let segments = named.strip_prefix(&["crate".to_string()]).unwrap_or(&named);
                let mut target = Vec::new();
                for segment in segments {
                    target.push(segment.clone());
                    if !modules.contains(&target) {
                        target.pop();
                        break;
                    }
                }
                if let Some(item) = segments.last().filter(|_| target.len() < segments.len()) {
                    if !target.is_empty() {
                        reexports.insert(item.clone(), target);
                    }
                }
            }
        }
    }
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (file, module) in files.iter().zip(&modules) {
        edges
            .entry(module.clone())
            .or_default()
            .extend(named_modules(&code_of(file), module, &modules, &reexports));
    }
    edges
}

/// The graph of which sibling subtrees name which: an edge from `a::x`
/// to `b::y` is one from `a` to `b`, the children of their closest
/// common ancestor, for what a subtree's modules name, the subtree names.
/// So `a::x -> b` and `b -> a` are a circle even though `a` itself names
/// nothing. A module naming its own descendant is no edge here.
fn sibling_graph(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut lifted: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, targets) in edges {
        lifted.entry(from.clone()).or_default();
        for to in targets {
            let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            lifted
                .entry(from[..=common].to_vec())
                .or_default()
                .insert(to[..=common].to_vec());
        }
    }
    lifted
}

/// A set of modules that name each other in a circle (a strongly
/// connected component of more than one module), with one circle
/// through them to show.
#[derive(Debug, PartialEq, Eq)]
struct Circle {
    /// The modules, sorted, as `a::b`.
    modules: Vec<String>,
    /// One way around, as `a -> b -> a`.
    example: String,
}

/// The circles among the modules of a graph.
fn circles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Circle> {
    let reachable = |from: &Vec<String>| -> BTreeSet<Vec<String>> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&Vec<String>> = edges.get(from).into_iter().flatten().collect();
        while let Some(next) = todo.pop() {
            if seen.insert(next.clone()) {
                todo.extend(edges.get(next).into_iter().flatten());
            }
        }
        seen
    };
    let reach: BTreeMap<&Vec<String>, BTreeSet<Vec<String>>> = edges
        .keys()
        .map(|module| (module, reachable(module)))
        .collect();
    let mut placed = BTreeSet::new();
    let mut found = Vec::new();
    for module in edges.keys() {
        if placed.contains(module) || !reach[module].contains(module) {
            continue;
        }
        let component: BTreeSet<Vec<String>> = reach[module]
            .iter()
            .filter(|other| reach.get(other).is_some_and(|back| back.contains(module)))
            .cloned()
            .collect();
        if component.len() < 2 {
            // A module naming itself through `crate::` is no circle.
            continue;
        }
        placed.extend(component.iter().cloned());
        // The shortest way from `module` back to itself, breadth first.
        let mut came_from: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([module.clone()]);
        'search: while let Some(at) = queue.pop_front() {
            for next in edges.get(&at).into_iter().flatten() {
                if !component.contains(next) || came_from.contains_key(next) {
                    continue;
                }
                came_from.insert(next.clone(), at.clone());
                if next == module {
                    break 'search;
                }
                queue.push_back(next.clone());
            }
        }
        let mut way = vec![module.clone()];
        let mut at = came_from[module].clone();
        while at != *module {
            way.push(at.clone());
            at = came_from[&at].clone();
        }
        way.push(module.clone());
        way.reverse();
        found.push(Circle {
            modules: component.iter().map(|path| path.join("::")).collect(),
            example: way
                .iter()
                .map(|path| path.join("::"))
                .collect::<Vec<_>>()
                .join(" -> "),
        });
    }
    found
}

/// Circles a crate still has, as debt: `(crate, its modules, why)`. Each
/// entry must match a circle the check finds exactly, so it can only
/// shrink: breaking part of it means writing the smaller set here, and
/// breaking all of it means removing the entry. A new circle anywhere
/// fails.
const MODULE_CIRCLES_ALLOWED: &[(&str, &[&str], &str)] = &[];

/// Every member of the workspace: the crates and the fuzz targets.
fn workspace_member_dirs() -> Vec<PathBuf> {
    let mut dirs = crate_dirs();
    let fuzz = workspace_root().join("fuzz");
    if fuzz.join("Cargo.toml").exists() {
        dirs.push(fuzz);
    }
    dirs
}

#[test]
fn no_crate_s_modules_name_each_other_in_a_circle() {
    let mut problems = Vec::new();
    let mut allowed_seen = Vec::new();
    for dir in workspace_member_dirs() {
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        for circle in circles(&sibling_graph(&module_graph(&src))) {
            let allowed = MODULE_CIRCLES_ALLOWED
                .iter()
                .position(|(owner, modules, _)| {
                    *owner == name
                        && modules
                            .iter()
                            .copied()
                            .eq(circle.modules.iter().map(String::as_str))
                });
            match allowed {
                Some(entry) => allowed_seen.push(entry),
                None => problems.push(format!(
                    "{name}: {} name each other in a circle ({})",
                    circle.modules.join(", "),
                    circle.example
                )),
            }
        }
    }
    for (entry, (owner, modules, _)) in MODULE_CIRCLES_ALLOWED.iter().enumerate() {
        if !allowed_seen.contains(&entry) {
            problems.push(format!(
                "MODULE_CIRCLES_ALLOWED names {owner}: {}, which is no longer that circle; shrink or remove the entry",
                modules.join(", ")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "modules that name each other in a circle (move what both need into a module below both):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_circle_check_finds_a_circle_in_its_fixture() {
    // `a` and `b` name each other (`a` through a use tree with braces),
    // `c` names its own child `d`, and `c::d` reaches `a` through
    // `super::super` without being named back; `a`'s unit tests and
    // `b`'s doc comment name more, which does not count. `e::f` names
    // `g` and `g` names `e`: `e` itself names nothing, but its subtree
    // and `g` are a circle all the same.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tidy/circle/src");
    let graph = module_graph(&src);
    let path = |text: &str| -> Vec<String> {
        text.split("::")
            .filter(|part| !part.is_empty())
            .map(str::to_string)
            .collect()
    };
    let graph_of = |table: &[(&str, &[&str])]| -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
        table
            .iter()
            .map(|(module, names)| (path(module), names.iter().map(|name| path(name)).collect()))
            .collect()
    };
    assert_eq!(
        graph,
        graph_of(&[
            ("", &[]),
            ("a", &["b"]),
            ("b", &["a"]),
            ("c", &["c::d"]),
            ("c::d", &["a"]),
            ("e", &[]),
            ("e::f", &["g"]),
            ("g", &["e"]),
        ])
    );
    let siblings = sibling_graph(&graph);
    assert_eq!(
        siblings,
        graph_of(&[
            ("", &[]),
            ("a", &["b"]),
            ("b", &["a"]),
            ("c", &["a"]),
            ("c::d", &[]),
            ("e", &["g"]),
            ("e::f", &[]),
            ("g", &["e"]),
        ])
    );
    assert_eq!(circles(&graph), [circle(&["a", "b"], "a -> b -> a")]);
    assert_eq!(
        circles(&siblings),
        [
            circle(&["a", "b"], "a -> b -> a"),
            circle(&["e", "g"], "e -> g -> e"),
        ]
    );
}

fn circle(modules: &[&str], example: &str) -> Circle {
    Circle {
        modules: modules.iter().map(|module| module.to_string()).collect(),
        example: example.to_string(),
    }
}

#[test]
fn module_references_are_read_as_paths() {
    let known: Vec<Vec<String>> = [
        vec!["commands"],
        vec!["commands", "run"],
        vec!["commands", "cluster"],
        vec!["render"],
        vec!["store"],
    ]
    .iter()
    .map(|path| path.iter().map(|part| part.to_string()).collect())
    .collect();
    let run: Vec<String> = vec!["commands".into(), "run".into()];
    let reexports = BTreeMap::from([("Store".to_string(), vec!["store".to_string()])]);
    let cases = [
        ("use super::cluster::ask;", vec!["commands::cluster"]),
        ("use crate::render::error;", vec!["render"]),
        ("let x = goondan_host::cluster::client;", vec![]),
        ("crate::commands::run::foo();", vec![]),
        (
            "use crate::{render::{self, error as e}, store::Store};",
            vec!["render", "store"],
        ),
        ("use super::super::store;", vec!["store"]),
        (
            "use crate::{commands::cluster, Emitter};",
            vec!["commands::cluster"],
        ),
        ("crate::render::Thing::<T>::new()", vec!["render"]),
        ("use crate::{Store, Unknown};", vec!["store"]),
    ];
    for (code, expected) in cases {
        let expected: Vec<Vec<String>> = expected
            .iter()
            .map(|path| path.split("::").map(str::to_string).collect())
            .collect();
        assert_eq!(
            named_modules(code, &run, &known, &reexports),
            expected,
            "{code}"
        );
    }
}
