//! A small YAML-to-JSON reader for the scripted provider's rules file,
//! built on `saphyr-parser` (the parser the config loader uses, so the
//! binary carries one YAML implementation).
//!
//! Scalars follow the YAML 1.2 core schema: plain `null`/`~`/empty, booleans
//! and numbers are typed, everything quoted is a string. Only the first
//! document is read. Anchors and aliases work; merge keys do not.

use goondan_types::{JsonObject, JsonValue};
use saphyr_parser::{Event, Parser, ScalarStyle};
use std::collections::HashMap;

/// Parses the first YAML document of `text`; the error carries a line.
pub(crate) fn parse(text: &str) -> Result<JsonValue, String> {
    enum Frame {
        Sequence(Vec<JsonValue>, usize),
        Mapping(JsonObject, Option<String>, usize),
    }
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: HashMap<usize, JsonValue> = HashMap::new();
    let mut root: Option<JsonValue> = None;
    for item in Parser::new_from_str(text) {
        let (event, span) =
            item.map_err(|error| format!("line {}: {}", error.marker().line(), error.info()))?;
        let line = span.start.line();
        let (value, anchor) = match event {
            Event::Scalar(value, style, anchor, tag) => {
                let is_str_tag = tag.as_ref().is_some_and(|tag| tag.suffix == "str");
                let value = if style == ScalarStyle::Plain && !is_str_tag {
                    plain_scalar(&value)
                } else {
                    JsonValue::String(value.into_owned())
                };
                (value, anchor)
            }
            Event::Alias(anchor) => {
                let value = anchors
                    .get(&anchor)
                    .cloned()
                    .ok_or_else(|| format!("line {line}: alias to an unknown anchor"))?;
                (value, 0)
            }
            Event::SequenceStart(anchor, _) => {
                stack.push(Frame::Sequence(Vec::new(), anchor));
                continue;
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Frame::Mapping(JsonObject::new(), None, anchor));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Frame::Sequence(items, anchor)) => (JsonValue::Array(items), anchor),
                Some(Frame::Mapping(object, _, anchor)) => (JsonValue::Object(object), anchor),
                None => return Err(format!("line {line}: unbalanced collection end")),
            },
            Event::DocumentEnd if root.is_some() => break,
            _ => continue,
        };
        if anchor > 0 {
            anchors.insert(anchor, value.clone());
        }
        match stack.last_mut() {
            None => {
                root = Some(value);
            }
            Some(Frame::Sequence(items, _)) => items.push(value),
            Some(Frame::Mapping(object, pending_key, _)) => match pending_key.take() {
                Some(key) => {
                    object.insert(key, value);
                }
                None => {
                    let key = match value {
                        JsonValue::String(text) => text,
                        JsonValue::Null => "null".to_string(),
                        JsonValue::Bool(_) | JsonValue::Number(_) => value.to_string(),
                        _ => return Err(format!("line {line}: mapping keys must be scalars")),
                    };
                    *pending_key = Some(key);
                }
            },
        }
    }
    Ok(root.unwrap_or(JsonValue::Null))
}

fn plain_scalar(text: &str) -> JsonValue {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return JsonValue::Null,
        "true" | "True" | "TRUE" => return JsonValue::Bool(true),
        "false" | "False" | "FALSE" => return JsonValue::Bool(false),
        _ => {}
    }
    if let Ok(integer) = text.parse::<i64>() {
        return JsonValue::from(integer);
    }
    let looks_numeric = text
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))
        && text.chars().any(|c| c.is_ascii_digit());
    if looks_numeric {
        if let Some(number) = text
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            return JsonValue::Number(number);
        }
    }
    JsonValue::String(text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_become_json() {
        let text = r#"
rules:
  - name: greet
    when: { user: { contains: "hi" } }
    reply:
      text: |
        Hello
        there
      n: 3
      ratio: 0.5
      quoted: "42"
      flag: true
      nothing: ~
      list: [a, 'b', 7]
  - &base
    name: fallback
  - *base
"#;
        assert_eq!(
            parse(text).unwrap(),
            json!({"rules": [
                {"name": "greet", "when": {"user": {"contains": "hi"}}, "reply": {
                    "text": "Hello\nthere\n", "n": 3, "ratio": 0.5, "quoted": "42",
                    "flag": true, "nothing": null, "list": ["a", "b", 7]
                }},
                {"name": "fallback"},
                {"name": "fallback"}
            ]})
        );
    }

    #[test]
    fn errors_carry_a_line() {
        let error = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(error.contains("line"), "{error}");
    }
}
