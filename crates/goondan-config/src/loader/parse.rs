//! Stage one of loading: files to typed resources. Reads each file under
//! the size limit, parses its documents, classifies them by `kind`, checks
//! `apiVersion` and Package placement, and deserializes each strictly into
//! its spec type, remembering where every resource came from so later
//! stages can point at a line.

use super::misplaced::{self, parse_unknown_field, Step};
use crate::base_package::BaseManifest;
use crate::codes::Code;
use crate::discover::BundleFile;
use crate::error::LoadError;
use crate::resource::{Kind, Metadata, Origin, Resource};
use crate::spec::{
    AgentSpec, ConnectionSpec, ConnectorSpec, EvalSpec, ExtensionSpec, ModelSpec, PackageSpec,
    SwarmSpec, ToolSpec,
};
use crate::suggest::closest;
use crate::yaml::{self, Node, NodeValue, YamlProblem};
use goondan_types::{Diagnostic, API_VERSION};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

/// Where a resource was written, with its parsed tree for locating fields.
#[derive(Debug)]
pub(crate) struct Site {
    pub(crate) file: String,
    /// One-based document index in `file`.
    pub(crate) document: usize,
    pub(crate) tree: Node,
    /// `Kind/name`.
    pub(crate) label: String,
}

impl Site {
    /// A diagnostic located at `field` of this resource (empty: the
    /// document itself).
    pub(crate) fn at(&self, code: Code, message: impl Into<String>, field: &str) -> Diagnostic {
        self.locate(code.diagnostic(message), field, false)
    }

    fn locate(&self, diagnostic: Diagnostic, field: &str, key_position: bool) -> Diagnostic {
        let mark = self.tree.locate(field, key_position);
        let diagnostic = diagnostic
            .with_file(self.file.clone())
            .with_resource(self.label.clone())
            .with_location(mark.line, mark.column)
            .with_document(self.document);
        if field.is_empty() {
            diagnostic
        } else {
            diagnostic.with_field(field)
        }
    }

    /// `file:line` of the resource, for "defined here" hints.
    pub(crate) fn place(&self) -> String {
        format!("{}:{}", self.file, self.tree.mark.line)
    }
}

/// A resource read from the bundle, with its site.
#[derive(Debug)]
pub(crate) struct Local<S> {
    pub(crate) resource: Resource<S>,
    pub(crate) site: Site,
}

/// Everything stage one produced.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub(crate) package: Option<Local<PackageSpec>>,
    pub(crate) models: Vec<Local<ModelSpec>>,
    pub(crate) agents: Vec<Local<AgentSpec>>,
    pub(crate) swarms: Vec<Local<SwarmSpec>>,
    pub(crate) tools: Vec<Local<ToolSpec>>,
    pub(crate) extensions: Vec<Local<ExtensionSpec>>,
    pub(crate) connectors: Vec<Local<ConnectorSpec>>,
    pub(crate) connections: Vec<Local<ConnectionSpec>>,
    pub(crate) evals: Vec<Local<EvalSpec>>,
    /// Resources whose document failed to load, by kind and name, so a
    /// reference to one is not reported a second time as missing. The
    /// kind is `None` when the document's own `kind` was not one: the
    /// author meant some kind, and a reference of any kind to that name
    /// would only repeat the one mistake.
    pub(crate) broken: Vec<(Option<Kind>, String)>,
    /// Documents that declared a `kind`, loadable or not; zero means the
    /// bundle holds nothing to validate.
    pub(crate) n_resource_documents: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Envelope<S> {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    metadata: Metadata,
    spec: S,
}

/// Reads one file into `parsed`. IO failures stop loading; everything else
/// becomes a diagnostic.
pub(crate) fn read_file(
    file: &BundleFile,
    parsed: &mut Parsed,
    diagnostics: &mut Vec<Diagnostic>,
) -> Result<(), LoadError> {
    let io_error = |source| LoadError::Io {
        path: file.path.clone(),
        source,
    };
    let size = std::fs::metadata(&file.path).map_err(io_error)?.len();
    if size > yaml::MAX_FILE_BYTES {
        diagnostics.push(
            Code::YamlLimit
                .diagnostic(format!(
                    "{} is {size} bytes; YAML files may not exceed {} bytes (1 MiB)",
                    file.display,
                    yaml::MAX_FILE_BYTES
                ))
                .with_file(file.display.clone())
                .with_suggestion("split the resources over several files"),
        );
        return Ok(());
    }
    let bytes = std::fs::read(&file.path).map_err(io_error)?;
    let Ok(text) = String::from_utf8(bytes) else {
        diagnostics.push(
            Code::YamlSyntax
                .diagnostic(format!("{} is not valid UTF-8", file.display))
                .with_file(file.display.clone()),
        );
        return Ok(());
    };
    read_text(&text, file, parsed, diagnostics);
    Ok(())
}

fn read_text(
    text: &str,
    file: &BundleFile,
    parsed: &mut Parsed,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let documents = match yaml::parse(text) {
        Ok(documents) => documents,
        Err(problem) => {
            let (code, message, mark, suggestion) = match problem {
                YamlProblem::Syntax { message, mark } => (
                    Code::YamlSyntax,
                    format!("{} is not valid YAML: {message}", file.display),
                    mark,
                    "fix the YAML at the position shown",
                ),
                YamlProblem::Limit { message, mark } => (
                    Code::YamlLimit,
                    format!("{} was refused: {message}", file.display),
                    mark,
                    "keep files under 1 MiB, 100 documents and 128 levels, and use anchors sparingly",
                ),
            };
            diagnostics.push(
                code.diagnostic(message)
                    .with_file(file.display.clone())
                    .with_location(mark.line, mark.column)
                    .with_suggestion(suggestion),
            );
            return;
        }
    };
    for (index, document) in documents.into_iter().enumerate() {
        let Some(tree) = document.root else {
            continue;
        };
        let origin = Origin {
            package: None,
            file: file.display.clone(),
            document: index + 1,
            line: document.mark.line,
        };
        let first_document = index == 0;
        read_document(
            tree,
            origin,
            file.may_hold_package && first_document,
            parsed,
            diagnostics,
        );
    }
}

/// Classifies and deserializes one document.
fn read_document(
    tree: Node,
    origin: Origin,
    may_be_package: bool,
    parsed: &mut Parsed,
    diagnostics: &mut Vec<Diagnostic>,
) {
    if !matches!(tree.value, NodeValue::Map(_)) {
        return;
    }
    let Some(kind_node) = tree.get("kind") else {
        // Not a Goondan resource (`bundle.md` §2.2.4).
        return;
    };
    parsed.n_resource_documents += 1;
    let name = tree
        .get("metadata")
        .and_then(|metadata| metadata.get("name"))
        .and_then(Node::as_str)
        .unwrap_or("?")
        .to_string();
    let kind_text = kind_node.as_str().unwrap_or("").to_string();
    let site = Site {
        file: origin.file.clone(),
        document: origin.document,
        label: format!("{kind_text}/{name}"),
        tree,
    };
    let kind_text = kind_text.as_str();
    let Some(kind) = Kind::parse(kind_text) else {
        let mut diagnostic = site.at(
            Code::UnknownKind,
            format!("`{kind_text}` is not a resource kind"),
            "kind",
        );
        let known = Kind::ALL.map(Kind::as_str);
        diagnostic = match closest(kind_text, known) {
            Some(kind) => diagnostic.with_suggestion(format!("did you mean {kind}?")),
            None => diagnostic.with_suggestion(format!("use one of {}", known.join(", "))),
        };
        diagnostics.push(diagnostic);
        parsed.broken.push((None, name));
        return;
    };
    match site.tree.get("apiVersion").and_then(Node::as_str) {
        Some(API_VERSION) => {}
        found => {
            let message = match found {
                Some(other) => format!("apiVersion `{other}` is not supported"),
                None => "apiVersion is missing".to_string(),
            };
            diagnostics.push(
                site.at(Code::ApiVersion, message, "apiVersion")
                    .with_suggestion(format!("set `apiVersion: {API_VERSION}`")),
            );
            parsed.broken.push((Some(kind), name));
            return;
        }
    }
    if kind == Kind::Package && parsed.package.is_some() {
        diagnostics.push(
            site.at(
                Code::PackagePosition,
                "a bundle has at most one Package; another one was already loaded",
                "kind",
            )
            .with_suggestion("keep a single Package, at the top of goondan.yaml"),
        );
        return;
    }
    if kind == Kind::Package && !may_be_package {
        diagnostics.push(
            site.at(
                Code::PackagePosition,
                "a Package document may only be the first document of goondan.yaml",
                "kind",
            )
            .with_suggestion(
                "move it to the top of goondan.yaml; a bundle has at most one Package",
            ),
        );
        return;
    }
    let json = site.tree.to_json();
    let errors_before = diagnostics.len();
    match kind {
        Kind::Model => push(json, site, origin, &mut parsed.models, diagnostics),
        Kind::Agent => push(json, site, origin, &mut parsed.agents, diagnostics),
        Kind::Swarm => push(json, site, origin, &mut parsed.swarms, diagnostics),
        Kind::Tool => push(json, site, origin, &mut parsed.tools, diagnostics),
        Kind::Extension => push(json, site, origin, &mut parsed.extensions, diagnostics),
        Kind::Connector => push(json, site, origin, &mut parsed.connectors, diagnostics),
        Kind::Connection => push(json, site, origin, &mut parsed.connections, diagnostics),
        Kind::Eval => push(json, site, origin, &mut parsed.evals, diagnostics),
        Kind::Package => {
            let mut packages = Vec::new();
            push(json, site, origin, &mut packages, diagnostics);
            parsed.package = packages.pop();
        }
    }
    if diagnostics.len() > errors_before {
        parsed.broken.push((Some(kind), name));
    }
}

fn push<S: DeserializeOwned>(
    json: Value,
    site: Site,
    origin: Origin,
    into: &mut Vec<Local<S>>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    match deserialize::<S>(json, &site) {
        Ok((metadata, spec)) => into.push(Local {
            resource: Resource {
                metadata,
                spec,
                origin,
            },
            site,
        }),
        Err(diagnostic) => diagnostics.push(*diagnostic),
    }
}

fn deserialize<S: DeserializeOwned>(
    json: Value,
    site: &Site,
) -> Result<(Metadata, S), Box<Diagnostic>> {
    match serde_path_to_error::deserialize::<_, Envelope<S>>(json) {
        Ok(envelope) => Ok((envelope.metadata, envelope.spec)),
        Err(error) => Err(Box::new(schema_diagnostic(&error, site, &first_error::<S>))),
    }
}

/// serde's message for the first error deserializing `json` as a `S`
/// resource (`None`: it deserialized), without its position.
fn first_error<S: DeserializeOwned>(json: Value) -> Option<String> {
    serde_json::from_value::<Envelope<S>>(json)
        .err()
        .map(|error| without_position(&error.to_string()))
}

fn without_position(message: &str) -> String {
    message
        .split(" at line ")
        .next()
        .unwrap_or(message)
        .to_string()
}

/// The path of `error` as steps through the document, or `None` when it
/// passes through what the document does not spell (an enum variant).
fn steps(error: &serde_path_to_error::Error<serde_json::Error>) -> Option<Vec<Step>> {
    error
        .path()
        .iter()
        .map(|segment| match segment {
            serde_path_to_error::Segment::Seq { index } => Some(Step::Index(*index)),
            serde_path_to_error::Segment::Map { key } => Some(Step::Key(key.clone())),
            serde_path_to_error::Segment::Enum { .. } | serde_path_to_error::Segment::Unknown => {
                None
            }
        })
        .collect()
}

/// The object `unknown` was written in: the error's path, or the path
/// without its last step when that is the field itself.
fn container_of(document: &Value, path: &[Step], unknown: &str) -> Option<Vec<Step>> {
    let holds = |at: &[Step]| {
        at.iter()
            .try_fold(document, |value, step| match step {
                Step::Key(key) => value.get(key),
                Step::Index(index) => value.get(index),
            })
            .and_then(Value::as_object)
            .is_some_and(|fields| fields.contains_key(unknown))
    };
    match path.split_last() {
        Some((Step::Key(last), parent)) if last == unknown && holds(parent) => {
            Some(parent.to_vec())
        }
        _ if holds(path) => Some(path.to_vec()),
        _ => None,
    }
}

/// Turns a serde error into a located schema diagnostic with a friendlier
/// message and, for unknown fields, where the field belongs when it is
/// only mis-indented, else a "did you mean".
fn schema_diagnostic(
    error: &serde_path_to_error::Error<serde_json::Error>,
    site: &Site,
    first_error: &dyn Fn(Value) -> Option<String>,
) -> Diagnostic {
    let mut field = String::new();
    for segment in error.path().iter() {
        match segment {
            serde_path_to_error::Segment::Seq { index } => field.push_str(&format!("[{index}]")),
            serde_path_to_error::Segment::Map { key } => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(key);
            }
            serde_path_to_error::Segment::Enum { variant } => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(variant);
            }
            serde_path_to_error::Segment::Unknown => {}
        }
    }
    let raw = without_position(&error.inner().to_string());
    if let Some((unknown, expected)) = parse_unknown_field(&raw) {
        let where_ = if field.is_empty() || field.ends_with(&unknown) {
            field.clone()
        } else {
            format!("{field}.{unknown}")
        };
        let parent = where_
            .strip_suffix(&unknown)
            .map(|parent| parent.trim_end_matches('.'))
            .unwrap_or("");
        let message = if parent.is_empty() {
            format!("unknown field `{unknown}`")
        } else {
            format!("unknown field `{unknown}` in {parent}")
        };
        // A name this object does not take but an enclosing or a sibling
        // one does was written at the wrong indentation: removing it, as
        // "allowed fields are …" would have it, loses what was meant.
        let document = site.tree.to_json();
        let misplaced = steps(error)
            .and_then(|path| container_of(&document, &path, &unknown))
            .and_then(|container| {
                misplaced::home(&document, &container, &unknown, first_error)
                    .map(|home| misplaced::suggestion(&unknown, &container, &home))
            });
        let suggestion = match misplaced {
            Some(suggestion) => suggestion,
            None => match closest(&unknown, expected.iter().map(String::as_str)) {
                Some(candidate) => format!("did you mean `{candidate}`?"),
                None if expected.is_empty() => "remove it; this object takes no fields".to_string(),
                None => format!("remove it; allowed fields are {}", expected.join(", ")),
            },
        };
        return site
            .locate(Code::Schema.diagnostic(message), &where_, true)
            .with_suggestion(suggestion);
    }
    if let Some(missing) = raw
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        let where_ = if field.is_empty() {
            missing.to_string()
        } else {
            format!("{field}.{missing}")
        };
        return site
            .at(
                Code::Schema,
                format!("{} is missing the required field {where_}", site.label),
                &where_,
            )
            .with_suggestion(format!("add `{missing}`"));
    }
    let message = if raw.contains("untagged enum ExtensionEntry") {
        "expected an extension reference: `ref: Kind/name` (optionally with a `config` object), \
         a `Kind/name` string or { kind, name, package? }"
            .to_string()
    } else if raw.contains("untagged enum RefEntry") {
        "expected a reference: `ref: Kind/name`, a `Kind/name` string or { kind, name, package? }"
            .to_string()
    } else if raw.contains("untagged enum ObjectRefLike") {
        "expected a reference: a `Kind/name` string or { kind, name, package?, apiVersion? }"
            .to_string()
    } else {
        raw
    };
    let subject = if field.is_empty() {
        "the document".to_string()
    } else {
        field.clone()
    };
    site.at(Code::Schema, format!("{subject}: {message}"), &field)
        .with_suggestion("compare the field with the kind's schema in resources.md")
}

/// Parses an embedded `@goondan/base` manifest. Its JSON is part of the
/// binary and covered by tests, so a failure here is a build defect and
/// reported as a diagnostic against the package rather than a panic.
pub(crate) fn read_manifest<S: DeserializeOwned>(
    manifest: &BaseManifest,
    package: &str,
) -> Result<Resource<S>, Box<Diagnostic>> {
    let file = format!("{package}/{}", manifest.name);
    let json: Value = serde_json::from_str(manifest.json).map_err(|error| {
        Box::new(
            Code::Schema
                .diagnostic(format!(
                    "built-in manifest {}/{} is broken: {error}",
                    manifest.kind, manifest.name
                ))
                .with_file(file.clone()),
        )
    })?;
    // There is no YAML tree to point into; a located error would name the
    // embedded file only.
    let site = Site {
        file: file.clone(),
        document: 1,
        label: format!("{}/{}", manifest.kind, manifest.name),
        tree: Node {
            value: NodeValue::Null,
            mark: yaml::Mark::default(),
        },
    };
    let (metadata, spec) = deserialize::<S>(json, &site)?;
    Ok(Resource {
        metadata,
        spec,
        origin: Origin {
            package: Some(package.to_string()),
            file,
            document: 1,
            line: 1,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (Parsed, Vec<Diagnostic>) {
        let file = BundleFile {
            path: "goondan.yaml".into(),
            display: "goondan.yaml".into(),
            may_hold_package: true,
        };
        let mut parsed = Parsed::default();
        let mut diagnostics = Vec::new();
        read_text(text, &file, &mut parsed, &mut diagnostics);
        (parsed, diagnostics)
    }

    #[test]
    fn unknown_field_points_at_the_key_and_suggests() {
        let (_, diagnostics) = read(
            "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: a\nspec:\n  modelConfig:\n    modelRf: Model/m\n",
        );
        assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
        let diagnostic = &diagnostics[0];
        assert_eq!(diagnostic.code, "E_CONFIG_SCHEMA");
        assert_eq!(
            diagnostic.field.as_deref(),
            Some("spec.modelConfig.modelRf")
        );
        assert_eq!((diagnostic.line, diagnostic.column), (Some(7), Some(5)));
        assert_eq!(
            diagnostic.suggestion.as_deref(),
            Some("did you mean `modelRef`?")
        );
    }

    /// Issue 49 #5: a field only mis-indented is moved, not removed.
    #[test]
    fn a_mis_indented_field_is_moved_not_removed() {
        let suggestion = |text: &str| {
            let (_, diagnostics) = read(text);
            assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
            diagnostics[0].suggestion.clone().unwrap_or_default()
        };
        // Too deep: `tools` is a field of the Agent's spec.
        assert_eq!(
            suggestion(
                "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: a\nspec:\n  modelConfig:\n    modelRef: Model/m\n    tools:\n      - ref: Tool/t\n"
            ),
            "`tools` is a field of spec, not a field of spec.modelConfig: indent it less, into spec"
        );
        // Too shallow: `maxStepsPerTurn` belongs under the policy beside it.
        assert_eq!(
            suggestion(
                "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata:\n  name: s\nspec:\n  entryAgent: Agent/a\n  agents:\n    - ref: Agent/a\n  policy:\n    shutdown:\n      gracePeriodSeconds: 5\n  maxStepsPerTurn: 4\n"
            ),
            "`maxStepsPerTurn` is a field of spec.policy, not a field of spec: indent it under `policy`"
        );
        // Two levels too deep, inside a list item's neighbour.
        assert_eq!(
            suggestion(
                "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata:\n  name: s\nspec:\n  entryAgent: Agent/a\n  agents:\n    - ref: Agent/a\n  policy:\n    shutdown:\n      gracePeriodSeconds: 5\n      instanceKey: k\n"
            ),
            "`instanceKey` is a field of spec, not a field of spec.policy.shutdown: indent it less, into spec"
        );
        // A name no object takes is still to be removed.
        assert!(suggestion(
            "apiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: a\nspec:\n  modelConfig:\n    modelRef: Model/m\n  flavour: mild\n"
        )
        .starts_with("remove it; allowed fields are"));
    }

    #[test]
    fn documents_without_kind_and_empty_documents_are_ignored() {
        let (parsed, diagnostics) = read("---\n---\nfoo: bar\n---\n# only a comment\n");
        assert!(diagnostics.is_empty());
        assert!(parsed.models.is_empty());
    }

    #[test]
    fn wrong_type_reports_the_field_path() {
        let (_, diagnostics) = read(
            "apiVersion: goondan.ai/v1\nkind: Swarm\nmetadata:\n  name: s\nspec:\n  entryAgent: Agent/a\n  agents:\n    - ref: Agent/a\n  policy:\n    maxStepsPerTurn: many\n",
        );
        assert_eq!(
            diagnostics[0].field.as_deref(),
            Some("spec.policy.maxStepsPerTurn")
        );
        assert_eq!(diagnostics[0].line, Some(10));
    }
}
