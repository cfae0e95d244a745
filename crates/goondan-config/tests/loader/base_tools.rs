//! The parameters of every `@goondan/base` Tool, as a bundle resolves them,
//! are what model providers receive: each must compile as a JSON Schema
//! and name only identifier-like properties, and every description must
//! arrive whole. A comma inside an unquoted flow-mapping scalar splits a
//! description into a cut sentence plus a junk key beside it; JSON Schema
//! ignores unknown keywords, so neither the meta-schema nor the compiler
//! notices, and this test checks keywords and descriptions itself.

use super::{load, VALID};
use goondan_config::{builtin_names, Kind, BASE_PACKAGE};
use serde_json::Value;

/// The JSON Schema (2020-12) keywords a tool's parameters may use; any
/// other key in a schema object is junk a provider would receive.
const KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$defs",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "items",
    "prefixItems",
    "maxItems",
    "minItems",
    "uniqueItems",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "required",
    "maxProperties",
    "minProperties",
    "dependentRequired",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
];

/// True for names that match `^[A-Za-z_][A-Za-z0-9_]*$`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|rest| rest.is_ascii_alphanumeric() || rest == '_')
}

/// A description is whole when it is a non-empty sentence; a split one
/// ends at the comma, so it lacks its final full stop.
fn description_problem(description: Option<&Value>) -> Option<String> {
    match description {
        None => Some("has no description".to_string()),
        Some(Value::String(text)) if text.trim().is_empty() => {
            Some("has an empty description".to_string())
        }
        Some(Value::String(text)) if !text.trim_end().ends_with('.') => Some(format!(
            "has a description cut short (no final full stop): {text:?}"
        )),
        Some(Value::String(_)) => None,
        Some(other) => Some(format!("has a description that is not a string: {other}")),
    }
}

/// Collects what is wrong with the schema at `at`, descending into
/// `properties` and `items`. `described` says whether this schema must
/// carry a description of its own (properties and array items do; the
/// top-level parameters are described by the export).
fn schema_problems(schema: &Value, at: &str, described: bool, problems: &mut Vec<String>) {
    let Some(object) = schema.as_object() else {
        problems.push(format!("{at} is not a schema object: {schema}"));
        return;
    };
    for key in object.keys() {
        if !KEYWORDS.contains(&key.as_str()) {
            problems.push(format!(
                "{at} has a key that is no JSON Schema keyword: {key:?}"
            ));
        }
    }
    if described || object.contains_key("description") {
        if let Some(problem) = description_problem(object.get("description")) {
            problems.push(format!("{at} {problem}"));
        }
    }
    let properties = match object.get("properties") {
        None => None,
        Some(Value::Object(properties)) => Some(properties),
        Some(other) => {
            problems.push(format!("{at}.properties is not an object: {other}"));
            None
        }
    };
    if let Some(properties) = properties {
        for (name, property) in properties {
            let path = format!("{at}.properties.{name}");
            if !is_identifier(name) {
                problems.push(format!("{path}: the property name is not an identifier"));
            }
            schema_problems(property, &path, true, problems);
        }
    }
    if let Some(required) = object.get("required") {
        let names = required.as_array().map(|names| {
            names
                .iter()
                .map(|name| name.as_str().unwrap_or_default())
                .collect::<Vec<_>>()
        });
        match names {
            None => problems.push(format!("{at}.required is not an array: {required}")),
            Some(names) => {
                for name in names {
                    if !properties.is_some_and(|properties| properties.contains_key(name)) {
                        problems.push(format!(
                            "{at}.required names {name:?}, which is not a property"
                        ));
                    }
                }
            }
        }
    }
    match object.get("items") {
        None => {}
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                schema_problems(item, &format!("{at}.items[{index}]"), true, problems);
            }
        }
        Some(items) => schema_problems(items, &format!("{at}.items"), true, problems),
    }
}

/// A bundle whose agent uses every built-in Tool, so the loader resolves
/// each of them from the embedded manifests.
fn bundle_using_every_base_tool() -> tempfile::TempDir {
    let mut tools = String::from("  tools:\n");
    for name in builtin_names(Kind::Tool) {
        tools.push_str(&format!(
            "    - kind: Tool\n      name: {name}\n      package: \"{BASE_PACKAGE}\"\n"
        ));
    }
    let text = VALID.replace(
        "    modelRef: Model/main\n",
        &format!("    modelRef: Model/main\n{tools}"),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    dir
}

#[test]
fn every_base_tool_sends_providers_a_valid_schema_with_identifier_properties_and_whole_descriptions(
) {
    let dir = bundle_using_every_base_tool();
    let outcome = load(dir.path());
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    let bundle = outcome.bundle.unwrap();
    let tools: Vec<_> = bundle.agent("a").unwrap().tools().collect();
    assert_eq!(tools.len(), builtin_names(Kind::Tool).count());

    let mut problems = Vec::new();
    let mut n_exports = 0;
    for tool in tools {
        assert_eq!(tool.origin.package.as_deref(), Some(BASE_PACKAGE));
        for export in &tool.spec.exports {
            n_exports += 1;
            let at = format!("{}__{}", tool.name(), export.name);
            if let Some(problem) =
                description_problem(Some(&Value::String(export.description.clone())))
            {
                problems.push(format!("{at} {problem}"));
            }
            let parameters = Value::Object(export.parameters.clone());
            if let Err(error) = jsonschema::meta::validate(&parameters) {
                problems.push(format!("{at}: not valid against the meta-schema: {error}"));
            }
            if let Err(error) = jsonschema::validator_for(&parameters) {
                problems.push(format!("{at}: does not compile: {error}"));
            }
            if parameters["type"] != "object" {
                problems.push(format!("{at}: the top-level type is not \"object\""));
            }
            schema_problems(
                &parameters,
                &format!("{at}.parameters"),
                false,
                &mut problems,
            );
        }
    }
    assert!(n_exports > 0);
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn identifier_check_refuses_split_description_keys() {
    for good in ["url", "timeoutMs", "_private", "a1"] {
        assert!(is_identifier(good), "{good}");
    }
    for bad in ["", "0 to 300 seconds.", "1st", "max-bytes", "a b"] {
        assert!(!is_identifier(bad), "{bad}");
    }
}
