//! Resource references (`shared-types.md` §2): `"Kind/name"` strings, the
//! object form and the `{ ref: ... }` wrapper YAML authors prefer.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A resolved-or-not reference to a resource by kind and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectRef {
    /// The resource kind, for example `Tool`.
    pub kind: String,
    /// The resource name.
    pub name: String,
    /// Restricts the lookup to one package (for example `@goondan/base`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    /// The apiVersion the target must have, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
}

/// Why a `"Kind/name"` string is not a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRefParseError {
    /// The text that failed to parse.
    pub input: String,
}

impl fmt::Display for ObjectRefParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a reference; expected the form `Kind/name`",
            self.input
        )
    }
}

impl std::error::Error for ObjectRefParseError {}

impl ObjectRef {
    /// Builds a reference without package or apiVersion.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef {
            kind: kind.into(),
            name: name.into(),
            package: None,
            api_version: None,
        }
    }

    /// Parses the `"Kind/name"` shorthand. Both halves must be non-empty and
    /// the name may not contain another `/`.
    pub fn parse(text: &str) -> Result<Self, ObjectRefParseError> {
        let error = || ObjectRefParseError {
            input: text.to_string(),
        };
        let (kind, name) = text.split_once('/').ok_or_else(error)?;
        if kind.is_empty() || name.is_empty() || name.contains('/') {
            return Err(error());
        }
        Ok(ObjectRef::new(kind, name))
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.name)?;
        if let Some(package) = &self.package {
            write!(f, " (package {package})")?;
        }
        Ok(())
    }
}

/// A reference as written: the `"Kind/name"` string or the object form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ObjectRefLike {
    /// `"Kind/name"`.
    Text(String),
    /// `{ kind, name, package?, apiVersion? }`.
    Object(ObjectRef),
}

impl ObjectRefLike {
    /// Normalizes either form into an [`ObjectRef`].
    pub fn to_object_ref(&self) -> Result<ObjectRef, ObjectRefParseError> {
        match self {
            ObjectRefLike::Text(text) => ObjectRef::parse(text),
            ObjectRefLike::Object(object) => Ok(object.clone()),
        }
    }
}

/// The `{ ref: ObjectRefLike }` wrapper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefItem {
    /// The wrapped reference.
    #[serde(rename = "ref")]
    pub reference: ObjectRefLike,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_shorthand_and_rejects_malformed() {
        assert_eq!(
            ObjectRef::parse("Tool/bash").unwrap(),
            ObjectRef::new("Tool", "bash")
        );
        for bad in ["Tool", "/bash", "Tool/", "Tool/a/b", ""] {
            assert!(ObjectRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn object_form_round_trips() {
        let value = json!({"kind": "Tool", "name": "bash", "package": "@goondan/base", "apiVersion": "goondan.ai/v1"});
        let parsed: ObjectRefLike = serde_json::from_value(value.clone()).unwrap();
        let object = parsed.to_object_ref().unwrap();
        assert_eq!(object.package.as_deref(), Some("@goondan/base"));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), value);
        let item: RefItem = serde_json::from_value(json!({"ref": "Agent/coder"})).unwrap();
        assert_eq!(item.reference.to_object_ref().unwrap().name, "coder");
    }
}
