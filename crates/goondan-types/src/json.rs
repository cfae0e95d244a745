//! JSON aliases used across the workspace (`shared-types.md` §1).

/// Any JSON value.
pub type JsonValue = serde_json::Value;

/// A JSON object with insertion order preserved.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;
