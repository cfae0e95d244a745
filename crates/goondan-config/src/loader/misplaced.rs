//! Where a field that is unknown where it stands belongs, when it is only
//! mis-indented: a field of an enclosing object written a level too deep,
//! or one of a sibling object written a level too shallow. The spec types
//! themselves answer: a key no schema has, put first into a candidate
//! object, makes serde name the fields that object takes, so this knows
//! every kind's schema without keeping a copy of it. It does not judge
//! typos (`suggest::closest` does) and never changes the document it was
//! given. The reading of serde's "unknown field" message is here too,
//! below `parse`, which asks it first.

use serde_json::{Map, Value};

/// Splits serde's "unknown field `x`, expected one of `a`, `b`" message.
pub(super) fn parse_unknown_field(message: &str) -> Option<(String, Vec<String>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (name, rest) = rest.split_once('`')?;
    let expected = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect();
    Some((name.to_string(), expected))
}

/// One step of a field path through a document's JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// A field of an object.
    Key(String),
    /// An item of a list.
    Index(usize),
}

/// A key that no schema takes, so a strict object refuses it first and
/// lists the fields it expected instead.
const PROBE: &str = "\u{1}goondan-probe";

/// How a field's place relates to where it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Relation {
    /// An object that holds the one it was written in: indent it less.
    Enclosing,
    /// An object beside it: indent it under that object's key.
    Sibling,
}

/// Where a mis-indented field belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Home {
    /// The object that takes the field.
    pub(super) path: Vec<Step>,
    /// How it relates to where the field was written.
    pub(super) relation: Relation,
}

/// The object of `document` that takes `unknown`, written in `container`
/// which does not, looking first at the enclosing objects (nearest first),
/// then at the objects beside it. `first_error` deserializes a document
/// and answers the message of the first error (`None`: it deserialized).
/// `None` when no candidate takes the field, or when another error of the
/// document comes first and hides the answer.
pub(super) fn home(
    document: &Value,
    container: &[Step],
    unknown: &str,
    first_error: &dyn Fn(Value) -> Option<String>,
) -> Option<Home> {
    let mut without = document.clone();
    match value_mut(&mut without, container)? {
        Value::Object(fields) => fields.shift_remove(unknown)?,
        _ => return None,
    };
    let enclosing = (0..container.len())
        .rev()
        .map(|length| (container[..length].to_vec(), Relation::Enclosing));
    let siblings = match value(&without, container)? {
        Value::Object(fields) => fields
            .iter()
            .filter(|(_, field)| field.is_object())
            .map(|(key, _)| {
                let mut path = container.to_vec();
                path.push(Step::Key(key.clone()));
                (path, Relation::Sibling)
            })
            .collect(),
        _ => Vec::new(),
    };
    enclosing
        .chain(siblings)
        .find(|(path, _)| takes(&without, path, unknown, first_error))
        .map(|(path, relation)| Home { path, relation })
}

/// Whether the object at `path` of `document` is strict and names
/// `unknown` among its fields without holding one already.
fn takes(
    document: &Value,
    path: &[Step],
    unknown: &str,
    first_error: &dyn Fn(Value) -> Option<String>,
) -> bool {
    let mut probed = document.clone();
    let Some(Value::Object(fields)) = value_mut(&mut probed, path) else {
        return false;
    };
    if fields.contains_key(unknown) {
        return false;
    }
    // First, so the object refuses it before it reads (and perhaps
    // fails on) any of its own fields.
    let mut with_probe = Map::new();
    with_probe.insert(PROBE.to_string(), Value::Null);
    with_probe.extend(std::mem::take(fields));
    *fields = with_probe;
    let Some(message) = first_error(probed) else {
        return false;
    };
    match parse_unknown_field(&message) {
        Some((name, expected)) => name == PROBE && expected.iter().any(|field| field == unknown),
        None => false,
    }
}

fn value<'a>(document: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(document, |at, step| match step {
        Step::Key(key) => at.get(key),
        Step::Index(index) => at.get(index),
    })
}

fn value_mut<'a>(document: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(document, |at, step| match step {
        Step::Key(key) => at.get_mut(key),
        Step::Index(index) => at.get_mut(index),
    })
}

/// `path` as the loader writes field paths (`spec.tools[0].config`).
pub(super) fn display(path: &[Step]) -> String {
    let mut text = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(key);
            }
            Step::Index(index) => text.push_str(&format!("[{index}]")),
        }
    }
    text
}

/// The suggestion for `unknown`, written in `container`, whose place is
/// `home`.
pub(super) fn suggestion(unknown: &str, container: &[Step], home: &Home) -> String {
    let written_in = if container.is_empty() {
        "a top-level field".to_string()
    } else {
        format!("a field of {}", display(container))
    };
    match home.relation {
        Relation::Enclosing if home.path.is_empty() => {
            format!("`{unknown}` is a top-level field, not {written_in}: indent it less, to the top level")
        }
        Relation::Enclosing => {
            let place = display(&home.path);
            format!(
                "`{unknown}` is a field of {place}, not {written_in}: indent it less, into {place}"
            )
        }
        Relation::Sibling => {
            let key = match home.path.last() {
                Some(Step::Key(key)) => key.clone(),
                _ => display(&home.path),
            };
            format!(
                "`{unknown}` is a field of {}, not {written_in}: indent it under `{key}`",
                display(&home.path)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Root {
        spec: Spec,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Spec {
        model_ref: Option<String>,
        policy: Option<Policy>,
        labels: Option<std::collections::BTreeMap<String, String>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Policy {
        max_steps: Option<u32>,
        retry: Option<Retry>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Retry {
        attempts: Option<u32>,
    }

    fn first_error(document: Value) -> Option<String> {
        serde_json::from_value::<Root>(document)
            .err()
            .map(|error| error.to_string())
    }

    fn key(name: &str) -> Step {
        Step::Key(name.to_string())
    }

    fn check(document: Value, container: &[Step], unknown: &str, expected: Option<&str>) {
        let found = home(&document, container, unknown, &first_error)
            .map(|home| suggestion(unknown, container, &home));
        assert_eq!(found.as_deref(), expected, "{document}");
    }

    #[test]
    fn a_field_of_the_enclosing_object_written_too_deep() {
        check(
            json!({"spec": {"policy": {"retry": {"attempts": 2, "maxSteps": 3}}}}),
            &[key("spec"), key("policy"), key("retry")],
            "maxSteps",
            Some("`maxSteps` is a field of spec.policy, not a field of spec.policy.retry: indent it less, into spec.policy"),
        );
        check(
            json!({"spec": {"policy": {"modelRef": "m"}}}),
            &[key("spec"), key("policy")],
            "modelRef",
            Some("`modelRef` is a field of spec, not a field of spec.policy: indent it less, into spec"),
        );
        check(
            json!({"spec": {"policy": {"spec": {}}}}),
            &[key("spec"), key("policy")],
            "spec",
            None,
        );
    }

    #[test]
    fn a_field_of_a_sibling_object_written_too_shallow() {
        check(
            json!({"spec": {"policy": {"maxSteps": 3}, "retry": {"attempts": 1}}}),
            &[key("spec")],
            "retry",
            Some(
                "`retry` is a field of spec.policy, not a field of spec: indent it under `policy`",
            ),
        );
    }

    #[test]
    fn no_home_for_a_field_no_object_takes_or_one_already_there() {
        check(
            json!({"spec": {"policy": {"nonsense": 1}}}),
            &[key("spec"), key("policy")],
            "nonsense",
            None,
        );
        // The enclosing object has its own `modelRef`: a second one is
        // not a mis-indent.
        check(
            json!({"spec": {"modelRef": "a", "policy": {"modelRef": "b"}}}),
            &[key("spec"), key("policy")],
            "modelRef",
            None,
        );
        // A free-form map (`labels`) takes any key, so it names no fields
        // and is never offered.
        check(
            json!({"spec": {"labels": {}, "attempts": 1}}),
            &[key("spec")],
            "attempts",
            None,
        );
    }
}
