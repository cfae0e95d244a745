//! The embedded `@goondan/base` package: manifests of the built-in tools,
//! extensions and connectors, compiled into the binary as YAML.
//!
//! The YAML files beside this module are the source. The binary embeds the
//! JSON twin of each (generated from the YAML and kept in sync by the
//! test `base_manifest_json_matches_its_yaml`), because JSON parses an
//! order of magnitude faster than YAML. Only names live in a static table;
//! a manifest is parsed when a reference in the bundle actually resolves
//! to it, so `gdn validate` on a bundle that uses two built-ins parses two
//! small documents, not twenty.
//! The implementations behind `builtin:<name>` live in `goondan-base`; this
//! module only describes them.

use crate::resource::Kind;

/// The package name references use (`package: "@goondan/base"`).
pub const BASE_PACKAGE: &str = "@goondan/base";

/// One built-in manifest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BaseManifest {
    pub(crate) kind: Kind,
    /// The folder of its YAML source, relative to this module (only the
    /// test that regenerates the JSON reads it).
    #[cfg(test)]
    pub(crate) dir: &'static str,
    pub(crate) name: &'static str,
    /// The manifest as JSON, generated from `<dir>/<name>.yaml`.
    pub(crate) json: &'static str,
}

macro_rules! manifest {
    ($kind:ident, $dir:literal, $name:literal) => {
        BaseManifest {
            kind: Kind::$kind,
            #[cfg(test)]
            dir: $dir,
            name: $name,
            json: include_str!(concat!($dir, "/", $name, ".json")),
        }
    };
}

/// Every manifest of `@goondan/base`.
pub(crate) const MANIFESTS: &[BaseManifest] = &[
    manifest!(Tool, "tools", "bash"),
    manifest!(Tool, "tools", "file-system"),
    manifest!(Tool, "tools", "http-fetch"),
    manifest!(Tool, "tools", "json-query"),
    manifest!(Tool, "tools", "text-transform"),
    manifest!(Tool, "tools", "wait"),
    manifest!(Tool, "tools", "agents"),
    manifest!(Tool, "tools", "self-restart"),
    manifest!(Tool, "tools", "telegram"),
    manifest!(Tool, "tools", "slack"),
    manifest!(Extension, "extensions", "logging"),
    manifest!(Extension, "extensions", "message-window"),
    manifest!(Extension, "extensions", "message-compaction"),
    manifest!(Extension, "extensions", "context-message"),
    manifest!(Extension, "extensions", "tool-search"),
    manifest!(Extension, "extensions", "required-tools-guard"),
    manifest!(Extension, "extensions", "tool-approval"),
    manifest!(Extension, "extensions", "inter-agent-response-format"),
    manifest!(Extension, "extensions", "mcp"),
    manifest!(Extension, "extensions", "a2a"),
    manifest!(Connector, "connectors", "cli"),
    manifest!(Connector, "connectors", "webhook"),
    manifest!(Connector, "connectors", "cron"),
    manifest!(Connector, "connectors", "telegram"),
    manifest!(Connector, "connectors", "telegram-polling"),
    manifest!(Connector, "connectors", "slack"),
    manifest!(Connector, "connectors", "discord"),
    manifest!(Connector, "connectors", "github"),
];

/// The manifest of a built-in, if there is one.
pub(crate) fn find(kind: Kind, name: &str) -> Option<&'static BaseManifest> {
    MANIFESTS
        .iter()
        .find(|manifest| manifest.kind == kind && manifest.name == name)
}

/// Names of the built-ins of one kind, in table order.
pub fn builtin_names(kind: Kind) -> impl Iterator<Item = &'static str> {
    MANIFESTS
        .iter()
        .filter(move |manifest| manifest.kind == kind)
        .map(|manifest| manifest.name)
}

/// The prefix of entries that name a built-in implementation (one
/// definition, in `goondan-types`, for the loader and the runtime).
pub use goondan_types::entry::BUILTIN_PREFIX;

/// The name of the built-in extension that injects `Agent.spec.prompt`.
pub(crate) const PROMPT_CONSUMER: &str = "context-message";

/// The extension that enforces `Agent.spec.requiredTools`.
pub(crate) const REQUIRED_TOOLS_GUARD: &str = "required-tools-guard";
