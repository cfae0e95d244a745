//! Targeted edits of the dependency list in `goondan.yaml`'s Package
//! document: `gdn package add`, `update` and `remove` change only the
//! lines of `spec.dependencies` they must, and every other byte of the
//! file (comments, key order, quoting, blank lines, the other documents)
//! stays as the author wrote it.
//!
//! The edit is placed with the positions the YAML reader records for each
//! node (`goondan_config::yaml`), never by re-serializing the document: a
//! version is replaced in place in the quoting it had, a new entry is
//! written after the last one in the style of the first, and a removed
//! entry takes its own lines with it. A flow-style list (`[...]`) is
//! rewritten whole, in flow style, since its entries share lines.

use goondan_config::yaml::{self, Entry, Mark, Node, NodeValue};

/// Why an edit could not be placed; the caller reports it as an invalid
/// manifest.
pub(crate) type EditError = String;

/// The text with dependency `name` set to `range`: its version replaced
/// when it is listed, else a new entry appended.
pub(crate) fn set(text: &str, name: &str, range: &str) -> Result<String, EditError> {
    let source = Source::new(text);
    let package = first_document(text)?;
    let Some(spec) = package.get("spec") else {
        // No spec at all: a new one at the end of the Package document.
        let at = source.end_of_subtree(&package);
        let entry = format!(
            "spec:\n  dependencies:\n    - name: {}\n      version: {}\n",
            quoted(name, '"'),
            quoted(range, '"')
        );
        return Ok(source.insert_lines_after(at, &entry));
    };
    let Some(dependencies) = spec.get("dependencies") else {
        let NodeValue::Map(entries) = &spec.value else {
            return Err("the Package's spec is not a mapping".into());
        };
        let indent = entries.first().map_or(2, |entry| entry.key_mark.column - 1);
        let pad = " ".repeat(indent);
        let entry = format!(
            "{pad}dependencies:\n{pad}  - name: {}\n{pad}    version: {}\n",
            quoted(name, '"'),
            quoted(range, '"')
        );
        return Ok(source.insert_lines_after(source.end_of_subtree(spec), &entry));
    };
    let items = match &dependencies.value {
        NodeValue::Seq(items) => items.as_slice(),
        NodeValue::Null => &[],
        _ => return Err("the Package's spec.dependencies is not a list".into()),
    };
    if source.is_flow(dependencies) && items.is_empty() {
        // `dependencies: []` (as `gdn package add` creates it) becomes a
        // block list below the key; a comment after `[]` stays on the line.
        let line = dependencies.mark.line;
        let line_text = source.line_text(line);
        let emptied = line_text.replacen("[]", "", 1);
        let emptied = if emptied.trim_end().ends_with(':') {
            emptied.trim_end().to_string()
        } else {
            emptied.replacen(":  ", ": ", 1)
        };
        let key = dependencies_key_column(&package)?;
        let pad = " ".repeat(key - 1);
        let entry = format!(
            "{pad}  - name: {}\n{pad}    version: {}\n",
            quoted(name, '"'),
            quoted(range, '"')
        );
        let edited = source.replace_line(line, &emptied);
        return Ok(Source::new(&edited).insert_lines_after(line, &entry));
    }
    if source.is_flow(dependencies) {
        let mut listed = flow_entries(items);
        match listed.iter_mut().find(|(listed, _)| listed == name) {
            Some((_, version)) => *version = range.to_string(),
            None => listed.push((name.to_string(), range.to_string())),
        }
        return Ok(source.replace_flow(dependencies, &listed));
    }
    if let Some(item) = items.iter().find(|item| item_name(item) == Some(name)) {
        return match entry_of(item, "version") {
            Some(version) => Ok(source.replace_scalar(version.value.mark, range)),
            None => {
                // `- name: x` without a version: one line below the name.
                let name_entry = entry_of(item, "name").ok_or("an entry has no name")?;
                let pad = " ".repeat(name_entry.key_mark.column - 1);
                let line = format!("{pad}version: {}\n", quoted(range, '"'));
                Ok(source.insert_lines_after(source.end_of_subtree(item), &line))
            }
        };
    }
    let quote = items
        .first()
        .and_then(|item| entry_of(item, "name"))
        .and_then(|entry| source.quote_at(entry.value.mark))
        .unwrap_or('"');
    match items.last() {
        Some(last) => {
            let first = &items[0];
            let dash_column = source
                .dash_column(first.mark)
                .ok_or("an entry has no `-`")?;
            let pad = " ".repeat(dash_column - 1);
            let inner = " ".repeat(first.mark.column - dash_column - 1);
            let entry = format!(
                "{pad}-{inner}name: {}\n{pad} {inner}version: {}\n",
                quoted(name, quote),
                quoted(range, quote)
            );
            Ok(source.insert_lines_after(source.end_of_subtree(last), &entry))
        }
        None => {
            // `dependencies:` with nothing after it: entries below it.
            let NodeValue::Map(entries) = &spec.value else {
                return Err("the Package's spec is not a mapping".into());
            };
            let key = entries
                .iter()
                .find(|entry| entry.key == "dependencies")
                .ok_or("spec.dependencies went missing")?;
            let pad = " ".repeat(key.key_mark.column - 1);
            let entry = format!(
                "{pad}  - name: {}\n{pad}    version: {}\n",
                quoted(name, quote),
                quoted(range, quote)
            );
            Ok(source.insert_lines_after(key.key_mark.line, &entry))
        }
    }
}

/// The text without dependency `name`; `None` when it is not listed.
pub(crate) fn remove(text: &str, name: &str) -> Result<Option<String>, EditError> {
    let source = Source::new(text);
    let package = first_document(text)?;
    let Some(dependencies) = package
        .get("spec")
        .and_then(|spec| spec.get("dependencies"))
    else {
        return Ok(None);
    };
    let NodeValue::Seq(items) = &dependencies.value else {
        return Ok(None);
    };
    let Some(index) = items.iter().position(|item| item_name(item) == Some(name)) else {
        return Ok(None);
    };
    if source.is_flow(dependencies) {
        let mut listed = flow_entries(items);
        listed.retain(|(listed, _)| listed != name);
        return Ok(Some(source.replace_flow(dependencies, &listed)));
    }
    let first_line = items[index].mark.line;
    let last_line = match items.get(index + 1) {
        Some(next) => next.mark.line - 1,
        None => source.end_of_subtree(&items[index]),
    };
    let mut edited = source.without_lines(first_line, last_line);
    if items.len() == 1 {
        // The list is now empty: say so, or `dependencies:` would be null.
        let key_line = Source::new(&edited).line_text(dependencies_key_line(&package)?);
        let replaced = match key_line.find('#') {
            Some(comment) => format!(
                "{} []{}",
                key_line[..comment].trim_end(),
                &key_line[comment - 1..]
            ),
            None => format!("{} []", key_line.trim_end()),
        };
        edited = Source::new(&edited).replace_line(dependencies_key_line(&package)?, &replaced);
    }
    Ok(Some(edited))
}

fn first_document(text: &str) -> Result<Node, EditError> {
    yaml::parse(text)
        .map_err(|problem| problem.to_string())?
        .into_iter()
        .next()
        .and_then(|document| document.root)
        .ok_or_else(|| "goondan.yaml has no Package document".into())
}

fn dependencies_key(package: &Node) -> Result<Mark, EditError> {
    let spec = package.get("spec").ok_or("no spec")?;
    let NodeValue::Map(entries) = &spec.value else {
        return Err("the Package's spec is not a mapping".into());
    };
    entries
        .iter()
        .find(|entry| entry.key == "dependencies")
        .map(|entry| entry.key_mark)
        .ok_or_else(|| "no spec.dependencies".into())
}

fn dependencies_key_line(package: &Node) -> Result<usize, EditError> {
    dependencies_key(package).map(|mark| mark.line)
}

fn dependencies_key_column(package: &Node) -> Result<usize, EditError> {
    dependencies_key(package).map(|mark| mark.column)
}

fn entry_of<'n>(item: &'n Node, key: &str) -> Option<&'n Entry> {
    match &item.value {
        NodeValue::Map(entries) => entries.iter().find(|entry| entry.key == key),
        _ => None,
    }
}

fn item_name(item: &Node) -> Option<&str> {
    item.get("name").and_then(Node::as_str)
}

fn flow_entries(items: &[Node]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|item| {
            let field = |key| {
                item.get(key)
                    .and_then(Node::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (field("name"), field("version"))
        })
        .collect()
}

/// `value` as a YAML scalar in `quote` style (`"` or `'`).
fn quoted(value: &str, quote: char) -> String {
    if quote == '\'' {
        format!("'{}'", value.replace('\'', "''"))
    } else {
        serde_json::Value::String(value.to_string()).to_string()
    }
}

/// The file's text, addressed by the reader's one-based lines and
/// character columns.
struct Source<'t> {
    text: &'t str,
    /// Byte offset where each line starts (index 0 is line 1).
    line_starts: Vec<usize>,
}

impl<'t> Source<'t> {
    fn new(text: &'t str) -> Source<'t> {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(offset, _)| offset + 1));
        Source { text, line_starts }
    }

    fn n_lines(&self) -> usize {
        if self.text.ends_with('\n') {
            self.line_starts.len() - 1
        } else {
            self.line_starts.len()
        }
    }

    /// Line `line` without its line break.
    fn line_text(&self, line: usize) -> &'t str {
        let start = self.line_starts[line - 1];
        let end = self
            .line_starts
            .get(line)
            .map_or(self.text.len(), |next| next - 1);
        &self.text[start..end]
    }

    fn offset(&self, mark: Mark) -> usize {
        let start = self.line_starts[mark.line - 1];
        self.text[start..]
            .char_indices()
            .nth(mark.column - 1)
            .map_or(self.text.len(), |(offset, _)| start + offset)
    }

    fn is_flow(&self, node: &Node) -> bool {
        self.text[self.offset(node.mark)..].starts_with('[')
    }

    fn quote_at(&self, mark: Mark) -> Option<char> {
        self.text[self.offset(mark)..]
            .chars()
            .next()
            .filter(|first| matches!(first, '"' | '\''))
    }

    /// The column of the `-` that opens the sequence item starting at
    /// `mark`.
    fn dash_column(&self, mark: Mark) -> Option<usize> {
        let line = self.line_text(mark.line);
        let before: String = line.chars().take(mark.column - 1).collect();
        before
            .rfind('-')
            .map(|offset| before[..offset].chars().count() + 1)
    }

    /// The last line of `node`'s text: its deepest, latest node's line,
    /// then any further lines indented deeper than `node` (the rest of a
    /// multi-line scalar), not counting trailing blank or comment lines.
    fn end_of_subtree(&self, node: &Node) -> usize {
        fn last_line(node: &Node) -> usize {
            match &node.value {
                NodeValue::Seq(items) => items.iter().map(last_line).max(),
                NodeValue::Map(entries) => entries
                    .iter()
                    .map(|entry| last_line(&entry.value).max(entry.key_mark.line))
                    .max(),
                _ => None,
            }
            .unwrap_or(node.mark.line)
            .max(node.mark.line)
        }
        let mut end = last_line(node);
        let mut line = end + 1;
        while line <= self.n_lines() {
            let text = self.line_text(line);
            let trimmed = text.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                line += 1;
                continue;
            }
            let indent = text.chars().take_while(|c| *c == ' ').count();
            if indent + 1 > node.mark.column && !trimmed.starts_with("- ") && trimmed != "-" {
                end = line;
                line += 1;
            } else {
                break;
            }
        }
        end
    }

    fn insert_lines_after(&self, line: usize, lines: &str) -> String {
        let at = self
            .line_starts
            .get(line)
            .copied()
            .unwrap_or(self.text.len());
        let mut out = String::with_capacity(self.text.len() + lines.len() + 1);
        out.push_str(&self.text[..at]);
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(lines);
        out.push_str(&self.text[at..]);
        out
    }

    fn without_lines(&self, first: usize, last: usize) -> String {
        let start = self.line_starts[first - 1];
        let end = self
            .line_starts
            .get(last)
            .copied()
            .unwrap_or(self.text.len());
        format!("{}{}", &self.text[..start], &self.text[end..])
    }

    fn replace_line(&self, line: usize, with: &str) -> String {
        let start = self.line_starts[line - 1];
        let end = start + self.line_text(line).len();
        format!("{}{with}{}", &self.text[..start], &self.text[end..])
    }

    /// Replaces the scalar at `mark` with `value`, in the quoting it had
    /// (plain stays plain when `value` can be plain).
    fn replace_scalar(&self, mark: Mark, value: &str) -> String {
        let start = self.offset(mark);
        let rest = &self.text[start..];
        let (length, quote) = match rest.chars().next() {
            Some(quote @ ('"' | '\'')) => (
                rest[1..].find(quote).map_or(rest.len(), |close| close + 2),
                Some(quote),
            ),
            _ => {
                let line_end = rest.find('\n').unwrap_or(rest.len());
                let line = &rest[..line_end];
                let end = [" #", ", ", ",", "}", "]"]
                    .iter()
                    .filter_map(|stop| line.find(stop))
                    .min()
                    .unwrap_or(line.len());
                (line[..end].trim_end().len(), None)
            }
        };
        let written = match quote {
            Some(quote) => quoted(value, quote),
            None if plain_is_safe(value) => value.to_string(),
            None => quoted(value, '"'),
        };
        format!(
            "{}{written}{}",
            &self.text[..start],
            &self.text[start + length..]
        )
    }

    /// Rewrites the flow list starting at `node` with `entries`.
    fn replace_flow(&self, node: &Node, entries: &[(String, String)]) -> String {
        let start = self.offset(node.mark);
        let mut depth = 0usize;
        let mut quote: Option<char> = None;
        let mut end = self.text.len();
        for (offset, character) in self.text[start..].char_indices() {
            match (quote, character) {
                (Some(open), c) if c == open => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(character),
                (None, '[' | '{') => depth += 1,
                (None, ']' | '}') => {
                    depth -= 1;
                    if depth == 0 {
                        end = start + offset + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        let written = entries
            .iter()
            .map(|(name, version)| {
                format!(
                    "{{ name: {}, version: {} }}",
                    quoted(name, '"'),
                    quoted(version, '"')
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!("{}[{written}]{}", &self.text[..start], &self.text[end..])
    }
}

/// Whether `value` reads back as the same string when written plain: a
/// version range of digits, letters and `.^~+-`, not starting with a YAML
/// indicator.
fn plain_is_safe(value: &str) -> bool {
    !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '^' | '~' | '+' | '-'))
        && !value.starts_with('-')
        && !matches!(
            value,
            "true" | "false" | "null" | "yes" | "no" | "on" | "off"
        )
        && value.parse::<f64>().is_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMMENTED: &str = "# The project.
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: 'app'   # our app
spec:
  # what we use
  dependencies:
    - name: \"@goondan/base\"
      version: \"^1.0.0\"   # built in
    # tools from the registry
    - name: '@acme/calc'
      version: ^1.2.0
  version: 0.1.0
---
# the model
kind: Model
";

    fn names_and_versions(text: &str) -> Vec<(String, String)> {
        let package = first_document(text).unwrap();
        let NodeValue::Seq(items) = &package
            .get("spec")
            .unwrap()
            .get("dependencies")
            .unwrap()
            .value
        else {
            return Vec::new();
        };
        flow_entries(items)
    }

    #[test]
    fn updating_a_version_changes_only_that_scalar_in_its_quoting() {
        let edited = set(COMMENTED, "@acme/calc", "^1.3.0").unwrap();
        assert_eq!(
            edited,
            COMMENTED.replace("version: ^1.2.0", "version: ^1.3.0")
        );
        let edited = set(COMMENTED, "@goondan/base", ">=1 <3").unwrap();
        assert_eq!(
            edited,
            COMMENTED.replace("\"^1.0.0\"   # built in", "\">=1 <3\"   # built in")
        );
        let edited = set(COMMENTED, "@acme/calc", ">=2").unwrap();
        assert_eq!(
            edited,
            COMMENTED.replace("version: ^1.2.0", "version: \">=2\"")
        );
    }

    #[test]
    fn adding_appends_one_entry_after_the_last_in_the_first_ones_style() {
        let edited = set(COMMENTED, "@acme/new", "^2.0.0").unwrap();
        assert_eq!(
            edited,
            COMMENTED.replace(
                "      version: ^1.2.0\n",
                "      version: ^1.2.0\n    - name: \"@acme/new\"\n      version: \"^2.0.0\"\n"
            )
        );
        assert_eq!(names_and_versions(&edited).len(), 3);
    }

    #[test]
    fn removing_takes_the_entry_lines_and_an_empty_list_stays_a_list() {
        let edited = remove(COMMENTED, "@acme/calc").unwrap().unwrap();
        assert_eq!(
            edited,
            COMMENTED.replace("    - name: '@acme/calc'\n      version: ^1.2.0\n", "")
        );
        let edited = remove(&edited, "@goondan/base").unwrap().unwrap();
        assert!(
            edited
                .contains("  dependencies: []\n    # tools from the registry\n  version: 0.1.0\n"),
            "{edited}"
        );
        assert!(names_and_versions(&edited).is_empty());
        assert_eq!(remove(COMMENTED, "@nobody/x").unwrap(), None);
        // And adding to the empty list writes block entries below the key.
        let added = set(&edited, "@acme/calc", "^1.0.0").unwrap();
        assert_eq!(
            names_and_versions(&added),
            [("@acme/calc".to_string(), "^1.0.0".to_string())]
        );
        assert!(added.starts_with("# The project.\n"), "{added}");
    }

    #[test]
    fn a_flow_list_is_rewritten_in_flow_style_and_the_rest_kept() {
        let text = "kind: Package # p\nmetadata:\n  name: app\nspec:\n  dependencies: [{ name: a, version: '1' }] # ours\n  version: '1'\n";
        let added = set(text, "@acme/calc", "^1.0.0").unwrap();
        assert_eq!(
            added,
            text.replace(
                "[{ name: a, version: '1' }]",
                "[{ name: \"a\", version: \"1\" }, { name: \"@acme/calc\", version: \"^1.0.0\" }]"
            )
        );
        let removed = remove(&added, "@acme/calc").unwrap().unwrap();
        assert_eq!(
            names_and_versions(&removed),
            [("a".to_string(), "1".to_string())]
        );
        assert!(removed.ends_with("] # ours\n  version: '1'\n"), "{removed}");
    }

    #[test]
    fn an_empty_flow_list_becomes_a_block_list_and_comes_back_when_emptied() {
        for (line, after) in [
            (
                "  dependencies: [] # none yet\n",
                "  dependencies: # none yet\n",
            ),
            ("  dependencies: []\n", "  dependencies:\n"),
        ] {
            let text =
                format!("kind: Package\nmetadata:\n  name: app\nspec:\n{line}  version: '1'\n");
            let added = set(&text, "@acme/calc", "^1.0.0").unwrap();
            assert_eq!(
                added,
                text.replace(
                    line,
                    &format!("{after}    - name: \"@acme/calc\"\n      version: \"^1.0.0\"\n")
                )
            );
            assert_eq!(remove(&added, "@acme/calc").unwrap().unwrap(), text);
        }
    }

    #[test]
    fn a_missing_dependencies_key_or_spec_is_added_at_the_end_of_its_parent() {
        let text = "kind: Package\nmetadata:\n  name: app\nspec:\n  version: \"1\" # v\n---\nkind: Model\n";
        let added = set(text, "@acme/calc", "^1.0.0").unwrap();
        assert_eq!(
            added,
            text.replace(
                "# v\n",
                "# v\n  dependencies:\n    - name: \"@acme/calc\"\n      version: \"^1.0.0\"\n"
            )
        );
        let text = "kind: Package\nmetadata:\n  name: app\n";
        let added = set(text, "@acme/calc", "^1.0.0").unwrap();
        assert_eq!(names_and_versions(&added).len(), 1);
        assert!(added.starts_with(text));
    }
}
