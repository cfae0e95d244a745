//! The `text-transform` tool: `replace`, `slice`, `split`, `join`, `trim`
//! and `case`.
//!
//! Offsets count Unicode scalar values (what a model means by
//! "characters"), not bytes; negative `slice` offsets count from the end,
//! and `split` with `maxParts` returns only the first parts, as the
//! original's JavaScript did.

use crate::args::{invalid, parse, require_non_empty, signed_whole_number, whole_number};
use crate::error::BuiltinToolError;
use goondan_types::{JsonObject, JsonValue};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReplaceArgs {
    text: String,
    search: String,
    #[serde(default)]
    replacement: String,
    #[serde(default)]
    all: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SliceArgs {
    text: String,
    #[serde(default, deserialize_with = "signed_whole_number")]
    start: Option<i64>,
    #[serde(default, deserialize_with = "signed_whole_number")]
    end: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SplitArgs {
    text: String,
    #[serde(default)]
    delimiter: Option<String>,
    #[serde(default, deserialize_with = "whole_number")]
    max_parts: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Part {
    Text(String),
    Number(serde_json::Number),
    Flag(bool),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JoinArgs {
    parts: Vec<Part>,
    #[serde(default)]
    delimiter: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum TrimMode {
    Start,
    End,
    #[default]
    Both,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TrimArgs {
    text: String,
    #[serde(default)]
    mode: TrimMode,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Case {
    Upper,
    Lower,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseArgs {
    text: String,
    to: Case,
}

/// `replace`: the first occurrence of `search`, or all of them.
pub fn replace(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    const TOOL: &str = "text-transform__replace";
    let parsed: ReplaceArgs = parse(TOOL, raw)?;
    require_non_empty(TOOL, "search", &parsed.search)?;
    let occurrences = parsed.text.matches(&parsed.search).count();
    let (result, replacements) = if parsed.all {
        (
            parsed.text.replace(&parsed.search, &parsed.replacement),
            occurrences,
        )
    } else {
        (
            parsed.text.replacen(&parsed.search, &parsed.replacement, 1),
            occurrences.min(1),
        )
    };
    Ok(json!({"original": parsed.text, "result": result, "replacements": replacements}))
}

/// `slice`: characters from `start` (default 0) up to `end` (exclusive,
/// default the end); negative offsets count from the end.
pub fn slice(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: SliceArgs = parse("text-transform__slice", raw)?;
    let chars: Vec<char> = parsed.text.chars().collect();
    let length = chars.len() as i64;
    let clamp = |offset: i64| {
        let absolute = if offset < 0 { length + offset } else { offset };
        absolute.clamp(0, length) as usize
    };
    let start = clamp(parsed.start.unwrap_or(0));
    let end = clamp(parsed.end.unwrap_or(length)).max(start);
    let result: String = chars[start..end].iter().collect();
    Ok(json!({
        "original": parsed.text,
        "result": result,
        "start": start,
        "end": end,
        "length": end - start,
    }))
}

/// `split`: parts between delimiters (default a newline); an empty
/// delimiter splits into characters.
pub fn split(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: SplitArgs = parse("text-transform__split", raw)?;
    let delimiter = parsed.delimiter.unwrap_or_else(|| "\n".to_string());
    let all_parts: Vec<String> = if delimiter.is_empty() {
        parsed.text.chars().map(String::from).collect()
    } else {
        parsed
            .text
            .split(delimiter.as_str())
            .map(str::to_string)
            .collect()
    };
    let limit = parsed
        .max_parts
        .map_or(usize::MAX, |max| usize::try_from(max).unwrap_or(usize::MAX));
    let parts: Vec<String> = all_parts.into_iter().take(limit).collect();
    Ok(json!({"delimiter": delimiter, "count": parts.len(), "parts": parts}))
}

/// `join`: strings, numbers and booleans joined by `delimiter` (default a
/// newline).
pub fn join(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    // serde's message for an untagged enum names no index; this one does.
    if let Some(JsonValue::Array(parts)) = raw.get("parts") {
        if let Some(index) = parts
            .iter()
            .position(|part| part.is_array() || part.is_object() || part.is_null())
        {
            return Err(invalid(
                "text-transform__join",
                format!("`parts[{index}]` must be a string, number or boolean"),
            ));
        }
    }
    let parsed: JoinArgs = parse("text-transform__join", raw)?;
    let delimiter = parsed.delimiter.unwrap_or_else(|| "\n".to_string());
    let parts: Vec<String> = parsed
        .parts
        .into_iter()
        .map(|part| match part {
            Part::Text(text) => text,
            Part::Number(number) => number.to_string(),
            Part::Flag(flag) => flag.to_string(),
        })
        .collect();
    Ok(json!({"delimiter": delimiter, "count": parts.len(), "result": parts.join(&delimiter)}))
}

/// `trim`: whitespace off the start, the end or both (default).
pub fn trim(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: TrimArgs = parse("text-transform__trim", raw)?;
    let result = match parsed.mode {
        TrimMode::Start => parsed.text.trim_start(),
        TrimMode::End => parsed.text.trim_end(),
        TrimMode::Both => parsed.text.trim(),
    };
    let mode = match parsed.mode {
        TrimMode::Start => "start",
        TrimMode::End => "end",
        TrimMode::Both => "both",
    };
    Ok(json!({
        "original": parsed.text,
        "result": result,
        "mode": mode,
        "trimmedLength": parsed.text.chars().count() - result.chars().count(),
    }))
}

/// `case`: upper or lower case.
pub fn case(raw: &JsonObject) -> Result<JsonValue, BuiltinToolError> {
    let parsed: CaseArgs = parse("text-transform__case", raw)?;
    let (result, to) = match parsed.to {
        Case::Upper => (parsed.text.to_uppercase(), "upper"),
        Case::Lower => (parsed.text.to_lowercase(), "lower"),
    };
    Ok(json!({"original": parsed.text, "result": result, "to": to}))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Export = fn(&JsonObject) -> Result<JsonValue, BuiltinToolError>;

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn replace_first_or_all() {
        let first = replace(&object(
            json!({"text": "a-b-c", "search": "-", "replacement": "+"}),
        ))
        .unwrap();
        assert_eq!(first["result"], json!("a+b-c"));
        assert_eq!(first["replacements"], json!(1));
        let all = replace(&object(
            json!({"text": "a-b-c", "search": "-", "all": true}),
        ))
        .unwrap();
        assert_eq!(all["result"], json!("abc"));
        assert_eq!(all["replacements"], json!(2));
        let none = replace(&object(json!({"text": "abc", "search": "z"}))).unwrap();
        assert_eq!(none["replacements"], json!(0));
    }

    #[test]
    fn slice_counts_characters_and_negative_offsets() {
        for (start, end, expected) in [
            (json!(0), json!(2), "hé"),
            (json!(-3), JsonValue::Null, "llo"),
            (json!(1), json!(-1), "éll"),
            (json!(10), JsonValue::Null, ""),
            (json!(3), json!(1), ""),
        ] {
            let mut args = json!({"text": "héllo", "start": start});
            if !end.is_null() {
                args["end"] = end.clone();
            }
            let output = slice(&object(args)).unwrap();
            assert_eq!(output["result"], json!(expected), "{start} {end}");
        }
    }

    #[test]
    fn split_join_trim_case() {
        let parts = split(&object(
            json!({"text": "a,b,c", "delimiter": ",", "maxParts": 2}),
        ))
        .unwrap();
        assert_eq!(parts["parts"], json!(["a", "b"]));
        let lines = split(&object(json!({"text": "x\ny"}))).unwrap();
        assert_eq!(lines["count"], json!(2));
        let chars = split(&object(json!({"text": "hé", "delimiter": ""}))).unwrap();
        assert_eq!(chars["parts"], json!(["h", "é"]));
        let joined = join(&object(json!({"parts": ["a", 1, true], "delimiter": "-"}))).unwrap();
        assert_eq!(joined["result"], json!("a-1-true"));
        for (mode, expected) in [("start", "x  "), ("end", "  x"), ("both", "x")] {
            let output = trim(&object(json!({"text": "  x  ", "mode": mode}))).unwrap();
            assert_eq!(output["result"], json!(expected));
        }
        let upper = case(&object(json!({"text": "straße", "to": "upper"}))).unwrap();
        assert_eq!(upper["result"], json!("STRASSE"));
    }

    #[test]
    fn bad_input_is_a_structured_error() {
        let cases: [(Export, JsonValue); 7] = [
            (replace, json!({"text": "a", "search": ""})),
            (replace, json!({"text": "a"})),
            (slice, json!({"text": "a", "start": 0.5})),
            (join, json!({"parts": [["nested"]]})),
            (join, json!({"parts": "a,b"})),
            (trim, json!({"text": "a", "mode": "middle"})),
            (case, json!({"text": "a", "to": "title"})),
        ];
        for (export, input) in cases {
            let error = export(&object(input.clone())).unwrap_err();
            assert_eq!(error.code(), "E_TOOL_INVALID_ARGS", "{input}");
        }
    }
}
