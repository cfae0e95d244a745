//! `load_bundle`: the three stages (parse, single-resource rules,
//! references) run over the whole bundle, every problem is collected, and
//! a [`Bundle`] is built only when none of them is an error.

mod evals;
mod misplaced;
mod packages;
mod parse;
mod resolve;
mod rules;

use crate::bundle::Bundle;
use crate::discover::{discover, BundleFile};
use crate::env::load_env;
use crate::error::LoadError;
use goondan_types::{Diagnostic, Secrets};
use std::path::{Path, PathBuf};

/// How to load a bundle.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// An extra env file (`--env-file`), applied over `.env.local` and
    /// `.env`; relative to the current directory.
    pub env_file: Option<PathBuf>,
    /// Start the environment from the process environment (true by
    /// default); tests turn it off to see only the env files.
    pub inherit_process_env: bool,
    /// Variables handed over by the spawn handshake: laid over the
    /// inherited process environment as if they were process variables
    /// (the env files still win), without ever entering this process's
    /// own environment, so the processes it starts never inherit them.
    pub process_env_overlay: Secrets,
    /// Where installed packages are unpacked (`<System Root>/packages`);
    /// needed only by a bundle whose Package depends on packages other
    /// than `@goondan/base`, which otherwise fails with
    /// `E_CONFIG_PACKAGE_NOT_FOUND`.
    pub packages_root: Option<PathBuf>,
    /// Parse every TypeScript and JavaScript entry and report a syntax
    /// error as `E_CONFIG_ENTRY_SYNTAX` (true by default). An agent or
    /// connector process loads a bundle its orchestrator already checked,
    /// and turns it off so it never runs (or faults in) the parser.
    pub check_script_syntax: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            env_file: None,
            inherit_process_env: true,
            process_env_overlay: Secrets::new(),
            packages_root: None,
            check_script_syntax: true,
        }
    }
}

/// What loading produced: the bundle when it has no error, and every
/// diagnostic (errors and warnings, ordered by file and line).
#[derive(Debug, Clone)]
pub struct LoadOutcome {
    /// The bundle, present exactly when no diagnostic is an error.
    pub bundle: Option<Bundle>,
    /// Every problem found.
    pub diagnostics: Vec<Diagnostic>,
}

impl LoadOutcome {
    /// The errors.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| d.is_error())
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics.iter().filter(|d| !d.is_error())
    }
}

/// Loads and validates the bundle at `path`: a folder (its `goondan.yaml`
/// and every recognized resource file below it) or a single YAML file.
///
/// Fails only when the bundle cannot be read at all; problems inside it
/// are returned as diagnostics, all of them, in one pass.
pub fn load_bundle(path: &Path, options: &LoadOptions) -> Result<LoadOutcome, LoadError> {
    let metadata = std::fs::metadata(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => LoadError::NotFound {
            path: path.to_path_buf(),
        },
        _ => LoadError::Io {
            path: path.to_path_buf(),
            source,
        },
    })?;
    let canonical = path.canonicalize().map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let (root, files) = if metadata.is_dir() {
        let discovered = discover(&canonical)?;
        if discovered.files.is_empty() {
            return Err(LoadError::Empty {
                path: path.to_path_buf(),
                nested: discovered.nested_projects,
            });
        }
        (canonical, discovered.files)
    } else {
        let root = canonical
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        let display = canonical
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let file = BundleFile {
            path: canonical,
            display,
            may_hold_package: true,
        };
        (root, vec![file])
    };

    let mut diagnostics = Vec::new();
    let env = load_env(
        &root,
        options.env_file.as_deref(),
        options.inherit_process_env,
        &options.process_env_overlay,
        &mut diagnostics,
    )?;
    let mut parsed = parse::Parsed::default();
    let n_before_parse = diagnostics.len();
    for file in &files {
        parse::read_file(file, &mut parsed, &mut diagnostics)?;
    }
    let parse_failed = diagnostics[n_before_parse..]
        .iter()
        .any(Diagnostic::is_error);
    if parsed.n_resource_documents == 0 && !parse_failed {
        diagnostics.push(empty_bundle(&files));
    }
    rules::Rules {
        root: &root,
        env: &env,
        check_script_syntax: options.check_script_syntax,
        diagnostics: &mut diagnostics,
    }
    .check_all(&parsed);
    evals::check_evals(&parsed, &mut diagnostics);
    let installed = packages::load_dependencies(
        &parsed,
        &packages::DependencySources {
            root: &root,
            packages_root: options.packages_root.as_deref(),
            env: &env,
        },
        &mut diagnostics,
    )?;
    let resolved = resolve::resolve(&parsed, installed, &root, &mut diagnostics);

    for diagnostic in &mut diagnostics {
        if diagnostic.suggestion.is_none() {
            if let Some(code) = crate::codes::Code::parse(&diagnostic.code) {
                diagnostic.suggestion = Some(code.default_suggestion().to_string());
            }
        }
    }
    let file_rank = |diagnostic: &Diagnostic| {
        diagnostic
            .file
            .as_ref()
            .and_then(|file| {
                files
                    .iter()
                    .position(|candidate| &candidate.display == file)
            })
            .unwrap_or(usize::MAX)
    };
    diagnostics.sort_by_key(|diagnostic| {
        (
            file_rank(diagnostic),
            diagnostic.line.unwrap_or(usize::MAX),
            diagnostic.column.unwrap_or(usize::MAX),
        )
    });
    let bundle = if diagnostics.iter().any(Diagnostic::is_error) {
        None
    } else {
        build(root, parsed, resolved, env)
    };
    Ok(LoadOutcome {
        bundle,
        diagnostics,
    })
}

/// The error for files that hold no resource: empty, or only comments,
/// `---` separators and documents without `kind`. Without it an empty
/// file would validate clean and `gdn run` would fail later, far from the
/// cause. An empty folder is refused earlier, as [`LoadError::Empty`];
/// both share the code.
fn empty_bundle(files: &[BundleFile]) -> Diagnostic {
    let names = files
        .iter()
        .map(|file| file.display.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let diagnostic = crate::codes::Code::BundleEmpty
        .diagnostic(format!(
            "no resource in {names}: the bundle is empty or holds only comments, `---` and documents without `kind`"
        ))
        .with_suggestion(
            "add resource documents (apiVersion: goondan.ai/v1, kind, metadata.name, spec), or run `gdn init` to create a project",
        );
    match files {
        [file] => diagnostic.with_file(file.display.clone()),
        _ => diagnostic,
    }
}

/// Assembles the bundle; `None` if a link is missing, which the stages
/// only allow together with an error.
fn build(
    root: PathBuf,
    parsed: parse::Parsed,
    resolved: resolve::Resolved,
    env: crate::env::EnvMap,
) -> Option<Bundle> {
    let offsets = |local: usize, base: usize| resolve::Offsets {
        base: local,
        package: local + base,
    };
    let tool_offsets = offsets(parsed.tools.len(), resolved.base.tools.len());
    let extension_offsets = offsets(parsed.extensions.len(), resolved.base.extensions.len());
    let connector_offsets = offsets(parsed.connectors.len(), resolved.base.connectors.len());
    let agent_links = resolved
        .agents
        .into_iter()
        .map(|links| links.map(|links| links.finish(tool_offsets, extension_offsets)))
        .collect::<Option<Vec<_>>>()?;
    let swarm_links = resolved
        .swarms
        .into_iter()
        .map(|links| links.map(resolve::PendingSwarm::finish))
        .collect::<Option<Vec<_>>>()?;
    let connection_links = resolved
        .connections
        .into_iter()
        .map(|links| links.map(|links| links.finish(connector_offsets)))
        .collect::<Option<Vec<_>>>()?;
    fn resources<S>(locals: Vec<parse::Local<S>>) -> Vec<crate::Resource<S>> {
        locals.into_iter().map(|local| local.resource).collect()
    }
    let mut tools = resources(parsed.tools);
    tools.extend(resolved.base.tools);
    tools.extend(resolved.packages.tools);
    let mut extensions = resources(parsed.extensions);
    extensions.extend(resolved.base.extensions);
    extensions.extend(resolved.packages.extensions);
    let mut connectors = resources(parsed.connectors);
    connectors.extend(resolved.base.connectors);
    connectors.extend(resolved.packages.connectors);
    Some(Bundle {
        root,
        package: parsed.package.map(|local| local.resource),
        models: resources(parsed.models),
        agents: resources(parsed.agents),
        swarms: resources(parsed.swarms),
        tools,
        extensions,
        connectors,
        connections: resources(parsed.connections),
        evals: resources(parsed.evals),
        agent_links,
        swarm_links,
        connection_links,
        env,
    })
}

#[cfg(test)]
mod tests {
    use super::parse::read_manifest;
    use super::rules::json_schema_problem;
    use crate::base_package::{BASE_PACKAGE, BUILTIN_PREFIX, MANIFESTS};
    use crate::resource::{Kind, Resource};
    use crate::spec::{ConnectorSpec, ExtensionSpec, ToolSpec};
    use std::collections::HashSet;

    fn entry_names<S>(resource: &Resource<S>, entry: &str, manifest_name: &str) {
        assert_eq!(resource.name(), manifest_name);
        assert_eq!(entry, format!("{BUILTIN_PREFIX}{manifest_name}"));
        assert_eq!(resource.origin.package.as_deref(), Some(BASE_PACKAGE));
    }

    /// The embedded JSON is generated from the YAML source; when they
    /// differ, this test rewrites the JSON and fails, so the next run (and
    /// the commit) carries the fresh file.
    #[test]
    fn base_manifest_json_matches_its_yaml() {
        let module = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/base_package");
        let mut stale = Vec::new();
        for manifest in MANIFESTS {
            let source = module
                .join(manifest.dir)
                .join(format!("{}.yaml", manifest.name));
            let yaml = std::fs::read_to_string(&source).unwrap();
            let mut documents = crate::yaml::parse(&yaml).unwrap();
            assert_eq!(documents.len(), 1, "{}", source.display());
            let tree = documents.remove(0).root.unwrap();
            let json = serde_json::to_string_pretty(&tree.to_json()).unwrap() + "\n";
            if json != manifest.json {
                let target = source.with_extension("json");
                std::fs::write(&target, json).unwrap();
                stale.push(target.display().to_string());
            }
        }
        assert!(
            stale.is_empty(),
            "regenerated from YAML, run the tests again: {stale:?}"
        );
    }

    #[test]
    fn every_base_manifest_is_valid() {
        let mut identities = HashSet::new();
        for manifest in MANIFESTS {
            assert!(
                identities.insert((manifest.kind, manifest.name)),
                "{} twice",
                manifest.name
            );
            match manifest.kind {
                Kind::Tool => {
                    let tool: Resource<ToolSpec> = read_manifest(manifest, BASE_PACKAGE).unwrap();
                    entry_names(&tool, &tool.spec.entry, manifest.name);
                    assert!(!tool.spec.exports.is_empty());
                    let mut names = HashSet::new();
                    for export in &tool.spec.exports {
                        assert!(
                            names.insert(&export.name),
                            "{}: export {} twice",
                            manifest.name,
                            export.name
                        );
                        assert!(!export.name.contains("__") && !export.description.is_empty());
                        assert_eq!(
                            json_schema_problem(&export.parameters),
                            None,
                            "{}__{}",
                            manifest.name,
                            export.name
                        );
                    }
                }
                Kind::Extension => {
                    let extension: Resource<ExtensionSpec> =
                        read_manifest(manifest, BASE_PACKAGE).unwrap();
                    entry_names(&extension, &extension.spec.entry, manifest.name);
                }
                Kind::Connector => {
                    let connector: Resource<ConnectorSpec> =
                        read_manifest(manifest, BASE_PACKAGE).unwrap();
                    entry_names(&connector, &connector.spec.entry, manifest.name);
                    let names: HashSet<_> = connector
                        .spec
                        .events
                        .iter()
                        .map(|event| &event.name)
                        .collect();
                    assert!(!names.is_empty() && names.len() == connector.spec.events.len());
                }
                other => panic!("unexpected kind {other} in @goondan/base"),
            }
        }
    }
}
