//! The envelope every resource shares: its kind, metadata and where it was
//! defined. Kind-specific specs live in [`crate::spec`].

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// One of the resource kinds: the original's eight, and `Eval` (issue 39).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// An LLM provider configuration.
    Model,
    /// An agent: model, prompt, tools, extensions.
    Agent,
    /// A set of agents plus execution policy.
    Swarm,
    /// Functions the LLM can call.
    Tool,
    /// Lifecycle middleware.
    Extension,
    /// An inbound protocol adapter.
    Connector,
    /// Binds a Connector to a Swarm.
    Connection,
    /// The project manifest.
    Package,
    /// Evaluation cases for `gdn eval`; ignored by `gdn run`.
    Eval,
}

impl Kind {
    /// All kinds, in the order the spec lists them.
    pub const ALL: [Kind; 9] = [
        Kind::Model,
        Kind::Agent,
        Kind::Swarm,
        Kind::Tool,
        Kind::Extension,
        Kind::Connector,
        Kind::Connection,
        Kind::Package,
        Kind::Eval,
    ];

    /// The kind as written in YAML.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Model => "Model",
            Kind::Agent => "Agent",
            Kind::Swarm => "Swarm",
            Kind::Tool => "Tool",
            Kind::Extension => "Extension",
            Kind::Connector => "Connector",
            Kind::Connection => "Connection",
            Kind::Package => "Package",
            Kind::Eval => "Eval",
        }
    }

    /// Parses a kind as written in YAML (case-sensitive).
    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `metadata` of a resource.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// Unique per kind (and package).
    pub name: String,
    /// Reserved for future selection; documentation only today.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Free-form notes that never change behavior.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// Where a resource was defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `None` for the bundle itself, or the package it came from (for
    /// example `@goondan/base`).
    pub package: Option<String>,
    /// The file, relative to the bundle root (or the package's own name for
    /// embedded resources).
    pub file: String,
    /// One-based index of the YAML document in `file`.
    pub document: usize,
    /// One-based line where the document starts.
    pub line: usize,
}

impl Origin {
    /// True when the resource is defined in the bundle, not in a package.
    pub fn is_local(&self) -> bool {
        self.package.is_none()
    }
}

/// A validated resource of one kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource<S> {
    /// Name, labels and annotations.
    pub metadata: Metadata,
    /// The kind-specific spec.
    pub spec: S,
    /// Where it was defined.
    pub origin: Origin,
}

impl<S> Resource<S> {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }
}
