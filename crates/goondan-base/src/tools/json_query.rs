//! The `json-query` tool: `query`, `pick`, `count` and `flatten` over JSON
//! the model passes as a string.
//!
//! Paths use dots and brackets: `.`, `items[0].name`, `a.b[2]`,
//! `["key.with.dots"]`. A quoted bracket segment is always an object key;
//! an unquoted one is an array index on arrays and a key on objects.

use crate::args::{parse, whole_number};
use crate::error::BuiltinToolError;
use goondan_types::{JsonObject, JsonValue};
use serde::Deserialize;
use serde_json::json;

const QUERY: &str = "json-query__query";
const PICK: &str = "json-query__pick";
const COUNT: &str = "json-query__count";
const FLATTEN: &str = "json-query__flatten";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    data: String,
    #[serde(default)]
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PickArgs {
    data: String,
    keys: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlattenArgs {
    data: String,
    #[serde(default, deserialize_with = "whole_number")]
    depth: Option<u64>,
}

/// `query`: the value at `path` (default: the root).
pub fn query(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: PathArgs = parse(QUERY, raw)?;
    let data = parse_data(&parsed.data)?;
    let path = parsed.path.unwrap_or_else(|| ".".to_string());
    let found = resolve(&data, &parse_path(QUERY, &path)?);
    Ok(json!({
        "path": path,
        "found": found.is_some(),
        "value": found.cloned().unwrap_or(JsonValue::Null),
    }))
}

/// `pick`: the listed keys of an object; missing keys are left out.
pub fn pick(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: PickArgs = parse(PICK, raw)?;
    let data = parse_data(&parsed.data)?;
    let JsonValue::Object(object) = data else {
        return Err(shape("pick", "object", &data));
    };
    let result: JsonObject = parsed
        .keys
        .iter()
        .filter_map(|key| object.get(key).map(|value| (key.clone(), value.clone())))
        .collect();
    Ok(json!({"keys": parsed.keys, "result": result}))
}

/// `count`: elements of an array, keys of an object, characters of a
/// string, 1 for another scalar, 0 for null or nothing.
pub fn count(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: PathArgs = parse(COUNT, raw)?;
    let data = parse_data(&parsed.data)?;
    let path = parsed.path.unwrap_or_else(|| ".".to_string());
    let (count, kind) = match resolve(&data, &parse_path(COUNT, &path)?) {
        None | Some(JsonValue::Null) => (0, "null"),
        Some(JsonValue::Array(items)) => (items.len(), "array"),
        Some(JsonValue::Object(object)) => (object.len(), "object"),
        Some(JsonValue::String(text)) => (text.chars().count(), "string"),
        Some(JsonValue::Number(_)) => (1, "number"),
        Some(JsonValue::Bool(_)) => (1, "boolean"),
    };
    Ok(json!({"path": path, "count": count, "type": kind}))
}

/// `flatten`: nested arrays opened `depth` levels deep (default 1).
pub fn flatten(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: FlattenArgs = parse(FLATTEN, raw)?;
    let data = parse_data(&parsed.data)?;
    let JsonValue::Array(items) = data else {
        return Err(shape("flatten", "array", &data));
    };
    let depth = parsed.depth.unwrap_or(1);
    let mut result = Vec::new();
    flatten_into(items, depth, &mut result);
    Ok(json!({"depth": depth, "count": result.len(), "result": result}))
}

fn flatten_into(items: Vec<JsonValue>, depth: u64, into: &mut Vec<JsonValue>) {
    for item in items {
        match item {
            JsonValue::Array(inner) if depth > 0 => flatten_into(inner, depth - 1, into),
            other => into.push(other),
        }
    }
}

fn parse_data(text: &str) -> Result<JsonValue, BuiltinToolError> {
    serde_json::from_str(text).map_err(|error| BuiltinToolError::InvalidJson {
        field: "data",
        message: error.to_string(),
    })
}

fn shape(operation: &'static str, expected: &'static str, actual: &JsonValue) -> BuiltinToolError {
    BuiltinToolError::JsonShape {
        operation,
        expected,
        actual: match actual {
            JsonValue::Null => "null",
            JsonValue::Bool(_) => "boolean",
            JsonValue::Number(_) => "number",
            JsonValue::String(_) => "string",
            JsonValue::Array(_) => "array",
            JsonValue::Object(_) => "object",
        },
    }
}

/// One step of a path.
#[derive(Debug, Clone, PartialEq)]
enum Segment {
    /// A bare name or an unquoted bracket: index on arrays, key on objects.
    Plain(String),
    /// A quoted bracket: always a key.
    Quoted(String),
}

fn parse_path(tool: &str, path: &str) -> Result<Vec<Segment>, BuiltinToolError> {
    let invalid = |message: &str| crate::args::invalid(tool, format!("`path` {path:?}: {message}"));
    let mut segments = Vec::new();
    let mut chars = path.chars().peekable();
    let mut current = String::new();
    while let Some(character) = chars.next() {
        match character {
            '.' => {
                if !current.is_empty() {
                    segments.push(Segment::Plain(std::mem::take(&mut current)));
                }
            }
            '[' => {
                if !current.is_empty() {
                    segments.push(Segment::Plain(std::mem::take(&mut current)));
                }
                let quote = chars.next_if(|next| *next == '"' || *next == '\'');
                let mut inner = String::new();
                loop {
                    match chars.next() {
                        None => return Err(invalid("unclosed `[`")),
                        Some(close) if quote == Some(close) => {
                            if chars.next() != Some(']') {
                                return Err(invalid("expected `]` after the closing quote"));
                            }
                            break;
                        }
                        Some(']') if quote.is_none() => break,
                        Some(other) => inner.push(other),
                    }
                }
                segments.push(if quote.is_some() {
                    Segment::Quoted(inner)
                } else {
                    Segment::Plain(inner.trim().to_string())
                });
            }
            other => current.push(other),
        }
    }
    if !current.is_empty() {
        segments.push(Segment::Plain(current));
    }
    Ok(segments)
}

fn resolve<'a>(data: &'a JsonValue, segments: &[Segment]) -> Option<&'a JsonValue> {
    segments
        .iter()
        .try_fold(data, |value, segment| match (value, segment) {
            (JsonValue::Object(object), Segment::Plain(key) | Segment::Quoted(key)) => {
                object.get(key)
            }
            (JsonValue::Array(items), Segment::Plain(index)) => {
                items.get(index.parse::<usize>().ok()?)
            }
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    type Export = fn(&JsonObject) -> Result<JsonValue, BuiltinToolError>;

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    const DATA: &str =
        r#"{"items": [{"name": "a", "tags": ["x", "y"]}, {"name": "b"}], "a.b": 1, "n": null}"#;

    #[test]
    fn query_walks_dots_and_brackets() {
        let cases = [
            (".", json!(true)),
            ("items[0].name", json!("a")),
            (".items.1.name", json!("b")),
            ("items[0].tags[1]", json!("y")),
            ("[\"a.b\"]", json!(1)),
            ("items[5]", json!(null)),
            ("items.x", json!(null)),
        ];
        for (path, expected) in cases {
            let output = query(&object(json!({"data": DATA, "path": path}))).unwrap();
            if path == "." {
                assert_eq!(output["value"]["a.b"], json!(1));
            } else {
                assert_eq!(output["value"], expected, "{path}");
            }
        }
        let missing = query(&object(json!({"data": DATA, "path": "items[9]"}))).unwrap();
        assert_eq!(missing["found"], json!(false));
        let present_null = query(&object(json!({"data": DATA, "path": "n"}))).unwrap();
        assert_eq!(present_null["found"], json!(true));
    }

    #[test]
    fn pick_count_and_flatten() {
        let picked = pick(&object(json!({"data": DATA, "keys": ["n", "zzz", "a.b"]}))).unwrap();
        assert_eq!(picked["result"], json!({"n": null, "a.b": 1}));
        for (path, expected_count, kind) in [
            ("items", 2, "array"),
            (".", 3, "object"),
            ("items[0].name", 1, "string"),
            ("n", 0, "null"),
            ("a", 0, "null"),
        ] {
            let output = count(&object(json!({"data": DATA, "path": path}))).unwrap();
            assert_eq!(output["count"], json!(expected_count), "{path}");
            assert_eq!(output["type"], json!(kind), "{path}");
        }
        let nested = "[1, [2, [3, [4]]]]";
        let once = flatten(&object(json!({"data": nested}))).unwrap();
        assert_eq!(once["result"], json!([1, 2, [3, [4]]]));
        let deep = flatten(&object(json!({"data": nested, "depth": 10}))).unwrap();
        assert_eq!(deep["result"], json!([1, 2, 3, 4]));
        assert_eq!(deep["count"], json!(4));
    }

    #[test]
    fn bad_input_is_a_structured_error() {
        let cases: [(Export, JsonValue, &str); 6] = [
            (query, json!({}), "E_TOOL_INVALID_ARGS"),
            (query, json!({"data": "{not json"}), "E_JSON_PARSE"),
            (
                query,
                json!({"data": "{}", "path": "a[0"}),
                "E_TOOL_INVALID_ARGS",
            ),
            (pick, json!({"data": "[1]", "keys": ["a"]}), "E_JSON_SHAPE"),
            (
                pick,
                json!({"data": "{}", "keys": [1]}),
                "E_TOOL_INVALID_ARGS",
            ),
            (flatten, json!({"data": "{}"}), "E_JSON_SHAPE"),
        ];
        for (export, input, code) in cases {
            assert_eq!(
                export(&object(input.clone())).unwrap_err().code(),
                code,
                "{input}"
            );
        }
    }
}
