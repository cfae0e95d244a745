//! ValueSource, ValueFrom and SecretRef (`shared-types.md` §3): a literal
//! value or a pointer to an environment variable or a secret.
//!
//! The exclusivity rules (`value` xor `valueFrom`, `env` xor `secretRef`)
//! are checked by the config loader so that it can report them with a field
//! path; these types only carry the shape.

use serde::{Deserialize, Serialize};

/// A value given inline or taken from elsewhere.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueSource {
    /// The literal value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where to read the value from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueFrom>,
}

/// An environment variable or a secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueFrom {
    /// The name of an environment variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A key of a Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// A key inside a `Secret/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    /// `Secret/<name>`.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The key inside the secret.
    pub key: String,
}
