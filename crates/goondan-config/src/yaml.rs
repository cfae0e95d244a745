//! Safe YAML reading: turns one file's text into located document trees,
//! enforcing the bundle limits while parsing, and converts a tree to JSON
//! for typed deserialization.
//!
//! It owns the limits of `bundle.md` §6 (size, document count, alias
//! expansion) plus a nesting cap. The parser is `saphyr-parser`, a pull
//! parser that never recurses and hands out one event at a time with its
//! position; the tree is built here with an explicit stack, so a hostile
//! file can neither overflow the stack nor make us allocate before a limit
//! fires. It knows nothing about resources or kinds.
//!
//! It is public because every YAML file Goondan reads goes through it: the
//! bundle loader here, and the scripted provider's rules file in
//! `goondan-model`. One reader means one set of limits and one scalar
//! schema; a second copy had drifted (no alias budget, no depth cap).
//!
//! ```
//! use goondan_config::yaml;
//! let documents = yaml::parse("rules:\n  - name: a\n")?;
//! let root = documents[0].root.as_ref().expect("one non-empty document");
//! assert_eq!(root.to_json(), serde_json::json!({"rules": [{"name": "a"}]}));
//! # Ok::<(), yaml::YamlProblem>(())
//! ```

use crate::codes::Code;
use saphyr_parser::{Event, Parser, ScalarStyle, ScanError, Span};
use serde_json::{Map, Number, Value};
use std::borrow::Cow;
use std::collections::HashMap;

/// Largest YAML file accepted, in bytes (checked before reading).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Most documents one YAML file may hold.
pub const MAX_DOCUMENTS: usize = 100;
/// Deepest nesting of sequences and mappings accepted.
pub const MAX_DEPTH: usize = 128;
/// How many times the parsed node count aliases may expand a file to.
pub const MAX_ALIAS_EXPANSION: usize = 10;

/// A one-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mark {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1.
    pub column: usize,
}

impl Mark {
    fn of(span: &Span) -> Mark {
        Mark {
            line: span.start.line(),
            column: span.start.col() + 1,
        }
    }
}

/// A located YAML node.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// What the node holds.
    pub value: NodeValue,
    /// Where the node starts.
    pub mark: Mark,
}

/// The resolved value of a node (YAML 1.2 core schema).
#[derive(Debug, Clone, PartialEq)]
pub enum NodeValue {
    /// `null`, `~`, or nothing.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A whole number (decimal, `0x` hex or `0o` octal).
    Int(i64),
    /// Any other number, `.inf` and `.nan` included.
    Float(f64),
    /// A quoted scalar, a `!!str` one, or a plain one that is nothing else.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in the order written; keys are unique.
    Map(Vec<Entry>),
}

/// One mapping entry with the position of its key.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The key, as text.
    pub key: String,
    /// Where the key is written.
    pub key_mark: Mark,
    /// The value.
    pub value: Node,
}

/// One document of a file.
#[derive(Debug)]
pub struct Document {
    /// The root node; `None` for an empty document.
    pub root: Option<Node>,
    /// Where the document starts.
    pub mark: Mark,
}

/// Why a file could not be turned into documents.
///
/// `Display` gives the position and the message; callers add the file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum YamlProblem {
    /// The text is not YAML.
    #[error("line {}, column {}: {message}", mark.line, mark.column)]
    Syntax {
        /// What is wrong.
        message: String,
        /// Where.
        mark: Mark,
    },
    /// The text breaks a safety limit (size, documents, nesting, aliases).
    #[error("line {}, column {}: {message}", mark.line, mark.column)]
    Limit {
        /// Which limit, with its value.
        message: String,
        /// Where the limit fired.
        mark: Mark,
    },
}

impl YamlProblem {
    /// The stable code: `E_CONFIG_YAML_SYNTAX` or `E_CONFIG_YAML_LIMIT`.
    pub fn code(&self) -> Code {
        match self {
            YamlProblem::Syntax { .. } => Code::YamlSyntax,
            YamlProblem::Limit { .. } => Code::YamlLimit,
        }
    }

    /// How to fix it.
    pub fn suggestion(&self) -> &'static str {
        self.code().default_suggestion()
    }
}

enum Frame {
    Seq {
        items: Vec<Node>,
        mark: Mark,
        anchor: usize,
        weight: usize,
    },
    Map {
        entries: Vec<Entry>,
        pending_key: Option<(String, Mark)>,
        mark: Mark,
        anchor: usize,
        weight: usize,
    },
}

struct Builder {
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Node, usize)>,
    documents: Vec<Document>,
    current: Option<(Mark, Option<Node>)>,
    parsed_nodes: usize,
    expanded_nodes: usize,
}

/// Parses `text` into documents, or reports the first problem.
///
/// Text longer than [`MAX_FILE_BYTES`] is refused before parsing; callers
/// reading a file should also stop reading past that size (the loader
/// checks the file's length first), so a huge file is never loaded.
pub fn parse(text: &str) -> Result<Vec<Document>, YamlProblem> {
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(YamlProblem::Limit {
            message: format!("YAML files may not exceed {MAX_FILE_BYTES} bytes (1 MiB)"),
            mark: Mark { line: 1, column: 1 },
        });
    }
    let mut builder = Builder {
        stack: Vec::new(),
        anchors: HashMap::new(),
        documents: Vec::new(),
        current: None,
        parsed_nodes: 0,
        expanded_nodes: 0,
    };
    let mut parser = Parser::new_from_str(text);
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(syntax)?;
        if builder.handle(event, &span)? {
            break;
        }
    }
    Ok(builder.documents)
}

fn syntax(error: ScanError) -> YamlProblem {
    let mark = Mark {
        line: error.marker().line(),
        column: error.marker().col() + 1,
    };
    // The scanner looks ahead of the parser and has its own nesting cap;
    // hitting it is the same limit as ours, not a syntax error.
    if error.info().contains("recursion limit") {
        return YamlProblem::Limit {
            message: format!("nesting is too deep ({})", error.info()),
            mark,
        };
    }
    YamlProblem::Syntax {
        message: error.info().to_string(),
        mark,
    }
}

impl Builder {
    /// Handles one event; returns true at the end of the stream.
    fn handle(&mut self, event: Event<'_>, span: &Span) -> Result<bool, YamlProblem> {
        let mark = Mark::of(span);
        match event {
            Event::StreamEnd => return Ok(true),
            Event::Nothing | Event::StreamStart => {}
            Event::DocumentStart(_) => {
                if self.documents.len() >= MAX_DOCUMENTS {
                    return Err(YamlProblem::Limit {
                        message: format!("the file holds more than {MAX_DOCUMENTS} YAML documents"),
                        mark,
                    });
                }
                self.current = Some((mark, None));
            }
            Event::DocumentEnd => {
                if let Some((mark, root)) = self.current.take() {
                    self.documents.push(Document { root, mark });
                }
            }
            Event::Alias(id) => {
                let Some((node, weight)) = self.anchors.get(&id) else {
                    return Err(YamlProblem::Syntax {
                        message: "alias refers to an unknown anchor".into(),
                        mark,
                    });
                };
                let weight = *weight;
                self.parsed_nodes += 1;
                self.expanded_nodes += weight;
                // Checked before cloning, so a billion-laughs file fails
                // while its expansion is still small.
                if self.expanded_nodes > MAX_ALIAS_EXPANSION * self.parsed_nodes.max(1) {
                    return Err(YamlProblem::Limit {
                        message: format!(
                            "alias expansion exceeds {MAX_ALIAS_EXPANSION} times the size of the file (a YAML bomb?)"
                        ),
                        mark,
                    });
                }
                let mut node = node.clone();
                node.mark = mark;
                self.attach(node, weight, 0)?;
            }
            Event::Scalar(text, style, anchor, tag) => {
                self.parsed_nodes += 1;
                self.expanded_nodes += 1;
                let forced_string = tag.as_ref().is_some_and(|tag| tag.suffix == "str");
                if let Some(Frame::Map {
                    pending_key: pending_key @ None,
                    ..
                }) = self.stack.last_mut()
                {
                    *pending_key = Some((text.into_owned(), mark));
                    return Ok(false);
                }
                let value = if style == ScalarStyle::Plain && !forced_string {
                    resolve_plain(text)
                } else {
                    NodeValue::Str(text.into_owned())
                };
                self.attach(Node { value, mark }, 1, anchor)?;
            }
            Event::SequenceStart(anchor, _) => {
                self.open(
                    Frame::Seq {
                        items: Vec::new(),
                        mark,
                        anchor,
                        weight: 1,
                    },
                    mark,
                )?;
            }
            Event::MappingStart(anchor, _) => {
                self.open(
                    Frame::Map {
                        entries: Vec::new(),
                        pending_key: None,
                        mark,
                        anchor,
                        weight: 1,
                    },
                    mark,
                )?;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = self.stack.pop() else {
                    return Err(YamlProblem::Syntax {
                        message: "unbalanced collection end".into(),
                        mark,
                    });
                };
                let (node, weight, anchor) = match frame {
                    Frame::Seq {
                        items,
                        mark,
                        anchor,
                        weight,
                    } => (
                        Node {
                            value: NodeValue::Seq(items),
                            mark,
                        },
                        weight,
                        anchor,
                    ),
                    Frame::Map {
                        entries,
                        mark,
                        anchor,
                        weight,
                        ..
                    } => (
                        Node {
                            value: NodeValue::Map(entries),
                            mark,
                        },
                        weight,
                        anchor,
                    ),
                };
                self.attach(node, weight, anchor)?;
            }
        }
        Ok(false)
    }

    fn open(&mut self, frame: Frame, mark: Mark) -> Result<(), YamlProblem> {
        if let Some(Frame::Map {
            pending_key: None, ..
        }) = self.stack.last()
        {
            return Err(YamlProblem::Syntax {
                message: "mapping keys must be plain scalars, not collections".into(),
                mark,
            });
        }
        if self.stack.len() >= MAX_DEPTH {
            return Err(YamlProblem::Limit {
                message: format!("nesting is deeper than {MAX_DEPTH} levels"),
                mark,
            });
        }
        self.parsed_nodes += 1;
        self.expanded_nodes += 1;
        self.stack.push(frame);
        Ok(())
    }

    fn attach(&mut self, node: Node, weight: usize, anchor: usize) -> Result<(), YamlProblem> {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), weight));
        }
        match self.stack.last_mut() {
            None => {
                if let Some((_, root)) = self.current.as_mut() {
                    *root = Some(node);
                }
            }
            Some(Frame::Seq {
                items,
                weight: total,
                ..
            }) => {
                *total += weight;
                items.push(node);
            }
            Some(Frame::Map {
                entries,
                pending_key,
                weight: total,
                ..
            }) => match pending_key.take() {
                None => {
                    // Only an alias can reach here as a key: scalars are
                    // taken as keys directly and collections are refused
                    // when they open.
                    let key = scalar_text(&node.value).ok_or_else(|| YamlProblem::Syntax {
                        message: "mapping keys must be plain scalars, not collections".into(),
                        mark: node.mark,
                    })?;
                    *pending_key = Some((key, node.mark));
                }
                Some((key, key_mark)) => {
                    if entries.iter().any(|entry| entry.key == key) {
                        return Err(YamlProblem::Syntax {
                            message: format!("duplicate mapping key `{key}`"),
                            mark: key_mark,
                        });
                    }
                    *total += weight;
                    entries.push(Entry {
                        key,
                        key_mark,
                        value: node,
                    });
                }
            },
        }
        Ok(())
    }
}

fn scalar_text(value: &NodeValue) -> Option<String> {
    match value {
        NodeValue::Null => Some("null".into()),
        NodeValue::Bool(flag) => Some(flag.to_string()),
        NodeValue::Int(number) => Some(number.to_string()),
        NodeValue::Float(number) => Some(number.to_string()),
        NodeValue::Str(text) => Some(text.clone()),
        NodeValue::Seq(_) | NodeValue::Map(_) => None,
    }
}

/// Resolves a plain scalar by the YAML 1.2 core schema.
fn resolve_plain(text: Cow<'_, str>) -> NodeValue {
    match text.as_ref() {
        "" | "~" | "null" | "Null" | "NULL" => return NodeValue::Null,
        "true" | "True" | "TRUE" => return NodeValue::Bool(true),
        "false" | "False" | "FALSE" => return NodeValue::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return NodeValue::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return NodeValue::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return NodeValue::Float(f64::NAN),
        _ => {}
    }
    if let Some(int) = parse_int(&text) {
        return NodeValue::Int(int);
    }
    if looks_like_float(&text) {
        if let Ok(float) = text.parse::<f64>() {
            return NodeValue::Float(float);
        }
    }
    NodeValue::Str(text.into_owned())
}

fn parse_int(text: &str) -> Option<i64> {
    if let Some(hex) = text.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    if let Some(octal) = text.strip_prefix("0o") {
        return i64::from_str_radix(octal, 8).ok();
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn looks_like_float(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let mantissa_ok = {
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        (!whole.is_empty() || !fraction.is_empty())
            && whole.bytes().all(|byte| byte.is_ascii_digit())
            && fraction.bytes().all(|byte| byte.is_ascii_digit())
    };
    let exponent_ok = exponent.is_none_or(|exponent| {
        let digits = exponent.strip_prefix(['-', '+']).unwrap_or(exponent);
        !digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

impl Node {
    /// Converts the tree to JSON. Non-finite floats become strings, since
    /// JSON cannot hold them.
    pub fn to_json(&self) -> Value {
        match &self.value {
            NodeValue::Null => Value::Null,
            NodeValue::Bool(flag) => Value::Bool(*flag),
            NodeValue::Int(number) => Value::Number((*number).into()),
            NodeValue::Float(number) => Number::from_f64(*number)
                .map(Value::Number)
                .unwrap_or_else(|| Value::String(number.to_string())),
            NodeValue::Str(text) => Value::String(text.clone()),
            NodeValue::Seq(items) => Value::Array(items.iter().map(Node::to_json).collect()),
            NodeValue::Map(entries) => {
                let mut map = Map::with_capacity(entries.len());
                for entry in entries {
                    map.insert(entry.key.clone(), entry.value.to_json());
                }
                Value::Object(map)
            }
        }
    }

    /// The value of a mapping key.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            NodeValue::Map(entries) => entries
                .iter()
                .find(|entry| entry.key == key)
                .map(|entry| &entry.value),
            _ => None,
        }
    }

    /// The text of a string scalar.
    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            NodeValue::Str(text) => Some(text),
            _ => None,
        }
    }

    /// The position of the deepest node along a field path such as
    /// `spec.tools[0].ref`; a path ending in an absent key points at its
    /// parent. With `key_position`, a final mapping key reports where the
    /// key is written rather than its value.
    pub fn locate(&self, path: &str, key_position: bool) -> Mark {
        let mut node = self;
        let mut mark = self.mark;
        for segment in split_path(path) {
            let next = match (&node.value, segment) {
                (NodeValue::Map(entries), Segment::Key(key)) => {
                    entries.iter().find(|entry| entry.key == key).map(|entry| {
                        (
                            &entry.value,
                            if key_position {
                                entry.key_mark
                            } else {
                                entry.value.mark
                            },
                        )
                    })
                }
                (NodeValue::Seq(items), Segment::Index(index)) => {
                    items.get(index).map(|item| (item, item.mark))
                }
                _ => None,
            };
            match next {
                Some((child, child_mark)) => {
                    node = child;
                    mark = child_mark;
                }
                None => break,
            }
        }
        mark
    }
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

fn split_path(path: &str) -> Vec<Segment<'_>> {
    let mut segments = Vec::new();
    for part in path.split('.').filter(|part| !part.is_empty()) {
        let (key, mut rest) = match part.find('[') {
            Some(at) => (&part[..at], &part[at..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            segments.push(Segment::Key(key));
        }
        while let Some(stripped) = rest.strip_prefix('[') {
            let Some(close) = stripped.find(']') else {
                break;
            };
            if let Ok(index) = stripped[..close].parse() {
                segments.push(Segment::Index(index));
            }
            rest = &stripped[close + 1..];
        }
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(text: &str) -> Node {
        let mut documents = parse(text).unwrap();
        assert_eq!(documents.len(), 1);
        documents.remove(0).root.unwrap()
    }

    #[test]
    fn resolves_core_schema_scalars() {
        let node = one(
            "a: 1\nb: -2.5\nc: true\nd: ~\ne: '1'\nf: 0x1F\ng: hello\nh: 1e3\ni: !!str 12\nj: .5\n",
        );
        assert_eq!(
            node.to_json(),
            json!({"a": 1, "b": -2.5, "c": true, "d": null, "e": "1", "f": 31, "g": "hello", "h": 1000.0, "i": "12", "j": 0.5})
        );
    }

    #[test]
    fn multi_document_files_keep_empty_documents_as_null() {
        let documents = parse("a: 1\n---\n---\nb: 2\n").unwrap();
        assert_eq!(documents.len(), 3);
        assert!(
            documents[1].root.is_none()
                || documents[1].root.as_ref().unwrap().value == NodeValue::Null
        );
        assert_eq!(documents[2].mark.line, 3);
    }

    #[test]
    fn locates_fields_by_path() {
        let node = one("spec:\n  tools:\n    - ref: Tool/a\n    - ref: Tool/b\n");
        assert_eq!(
            node.locate("spec.tools[1].ref", false),
            Mark {
                line: 4,
                column: 12
            }
        );
        assert_eq!(
            node.locate("spec.tools[1].ref", true),
            Mark { line: 4, column: 7 }
        );
        assert_eq!(
            node.locate("spec.missing", false),
            node.get("spec").unwrap().mark
        );
    }

    #[test]
    fn aliases_expand_within_the_budget() {
        let node = one("base: &b {x: 1, y: 2}\ncopy: *b\n");
        assert_eq!(
            node.to_json(),
            json!({"base": {"x": 1, "y": 2}, "copy": {"x": 1, "y": 2}})
        );
    }

    #[test]
    fn refuses_duplicate_keys_and_collection_keys() {
        assert!(matches!(
            parse("a: 1\na: 2\n"),
            Err(YamlProblem::Syntax { .. })
        ));
        assert!(matches!(
            parse("? [a]\n: 1\n"),
            Err(YamlProblem::Syntax { .. })
        ));
    }

    #[test]
    fn reports_syntax_errors_with_a_position() {
        let Err(YamlProblem::Syntax { mark, .. }) = parse("a: [1, 2\nb: 3\n") else {
            panic!("expected a syntax error");
        };
        assert!(mark.line >= 1);
    }

    /// Ten anchors, each a list of ten aliases of the previous one: a
    /// billion strings if expanded.
    fn billion_laughs() -> String {
        let mut text = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..10 {
            let previous = format!("*a{}", level - 1);
            let items = [previous.as_str(); 10].join(", ");
            text.push_str(&format!("a{level}: &a{level} [{items}]\n"));
        }
        text
    }

    #[test]
    fn a_billion_laughs_is_refused_before_it_expands() {
        let started = std::time::Instant::now();
        let problem = parse(&billion_laughs()).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let YamlProblem::Limit { message, mark } = &problem else {
            panic!("expected a limit, got {problem:?}");
        };
        assert!(message.contains("alias expansion"), "{message}");
        assert!(mark.line <= 3, "fires early: {mark:?}");
        assert_eq!(problem.code(), Code::YamlLimit);
    }

    #[test]
    fn nesting_deeper_than_the_cap_is_a_limit_not_a_crash() {
        for depth in [MAX_DEPTH + 1, 100_000] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let problem = parse(&text).unwrap_err();
            assert_eq!(problem.code(), Code::YamlLimit, "depth {depth}: {problem}");
        }
        let within = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(&within).is_ok());
    }

    #[test]
    fn text_over_the_size_limit_is_refused_before_parsing() {
        let text = format!("a: '{}'\n", "x".repeat(MAX_FILE_BYTES as usize));
        let problem = parse(&text).unwrap_err();
        assert_eq!(problem.code(), Code::YamlLimit);
        assert!(problem.to_string().contains("1048576 bytes"), "{problem}");
    }

    #[test]
    fn problems_show_their_position_and_suggest_a_fix() {
        let problem = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(problem.code(), Code::YamlSyntax);
        assert_eq!(
            problem.to_string(),
            "line 2, column 1: duplicate mapping key `a`"
        );
        assert_eq!(problem.suggestion(), "fix the YAML at the position shown");
    }
}
