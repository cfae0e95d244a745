//! Strict parsing of tool-call arguments into typed structs.
//!
//! Each export declares a `#[serde(deny_unknown_fields)]` struct; this
//! module turns the model's JSON object into it, or into a
//! [`BuiltinToolError::InvalidArguments`] that names the field. It also
//! holds the few value readers every tool needs (whole numbers that a model
//! may spell `30000.0`, non-empty strings).

use crate::error::BuiltinToolError;
use goondan_types::{JsonObject, JsonValue};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};

/// Parses `args` into `T`, reporting the first problem against `tool`.
pub(crate) fn parse<T: DeserializeOwned>(
    tool: &str,
    args: &JsonObject,
) -> Result<T, BuiltinToolError> {
    serde_json::from_value(JsonValue::Object(args.clone())).map_err(|error| {
        BuiltinToolError::InvalidArguments {
            tool: tool.to_string(),
            message: error.to_string(),
        }
    })
}

/// Builds the error for a value that parsed but breaks a rule.
pub(crate) fn invalid(tool: &str, message: impl Into<String>) -> BuiltinToolError {
    BuiltinToolError::InvalidArguments {
        tool: tool.to_string(),
        message: message.into(),
    }
}

/// Fails when a required string is empty, which serde alone accepts.
pub(crate) fn require_non_empty(
    tool: &str,
    field: &str,
    value: &str,
) -> Result<(), BuiltinToolError> {
    if value.is_empty() {
        return Err(invalid(
            tool,
            format!("`{field}` must be a non-empty string"),
        ));
    }
    Ok(())
}

/// Reads an optional non-negative whole number; models often send `5000.0`
/// for `5000`, which plain `u64` would refuse.
pub(crate) fn whole_number<'de, D>(deserializer: D) -> Result<Option<u64>, D::Error>
where
    D: Deserializer<'de>,
{
    let Some(value) = Option::<f64>::deserialize(deserializer)? else {
        return Ok(None);
    };
    if !value.is_finite() || value < 0.0 || value.fract() != 0.0 || value > u64::MAX as f64 {
        return Err(D::Error::custom(format!(
            "expected a non-negative whole number, got {value}"
        )));
    }
    Ok(Some(value as u64))
}

/// Reads an optional whole number that may be negative (text offsets).
pub(crate) fn signed_whole_number<'de, D>(deserializer: D) -> Result<Option<i64>, D::Error>
where
    D: Deserializer<'de>,
{
    let Some(value) = Option::<f64>::deserialize(deserializer)? else {
        return Ok(None);
    };
    if !value.is_finite() || value.fract() != 0.0 || value.abs() > i64::MAX as f64 {
        return Err(D::Error::custom(format!(
            "expected a whole number, got {value}"
        )));
    }
    Ok(Some(value as i64))
}

/// A JSON object whose values must be strings, numbers or booleans
/// (environment variables, HTTP headers), turned into string pairs.
pub(crate) fn primitive_map(
    tool: &str,
    field: &str,
    object: Option<&JsonObject>,
) -> Result<Vec<(String, String)>, BuiltinToolError> {
    let Some(object) = object else {
        return Ok(Vec::new());
    };
    object
        .iter()
        .map(|(key, value)| {
            let text = match value {
                JsonValue::String(text) => text.clone(),
                JsonValue::Number(number) => number.to_string(),
                JsonValue::Bool(flag) => flag.to_string(),
                _ => {
                    return Err(invalid(
                        tool,
                        format!("`{field}.{key}` must be a string, number or boolean"),
                    ))
                }
            };
            Ok((key.clone(), text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Sample {
        name: String,
        #[serde(default, deserialize_with = "whole_number")]
        timeout_ms: Option<u64>,
    }

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn parse_names_the_offending_field() {
        let cases = [
            (json!({}), "missing field `name`"),
            (json!({"name": 1}), "invalid type"),
            (json!({"name": "a", "extra": true}), "unknown field `extra`"),
            (json!({"name": "a", "timeoutMs": 1.5}), "whole number"),
            (json!({"name": "a", "timeoutMs": -1}), "whole number"),
        ];
        for (args, expected) in cases {
            let error = parse::<Sample>("t__x", &object(args)).unwrap_err();
            assert_eq!(error.code(), "E_TOOL_INVALID_ARGS");
            assert!(error.to_string().contains(expected), "{error}");
        }
        let parsed: Sample =
            parse("t__x", &object(json!({"name": "a", "timeoutMs": 5000.0}))).unwrap();
        assert_eq!(parsed.timeout_ms, Some(5000));
    }

    #[test]
    fn primitive_maps_stringify_scalars_and_refuse_the_rest() {
        let map = object(json!({"A": "x", "B": 2, "C": true}));
        let pairs = primitive_map("t__x", "env", Some(&map)).unwrap();
        assert_eq!(pairs[1], ("B".to_string(), "2".to_string()));
        let bad = object(json!({"A": {"nested": 1}}));
        let error = primitive_map("t__x", "env", Some(&bad)).unwrap_err();
        assert!(error.to_string().contains("`env.A`"));
    }
}
