//! `tool-search`: a meta tool (`tool-search__search` by default) that
//! searches the tool catalog by words, and a `step` middleware that
//! narrows the catalog of later Steps to the last selection.
//!
//! The state (`extensions/<name>.json`) holds the selection, the last query
//! and a snapshot of the full catalog, taken by the step middleware before
//! it narrows anything, so a later search still sees every tool.

use super::parse_config;
use futures_util::future::BoxFuture;
use goondan_runtime::extension::ExtensionState;
use goondan_runtime::pipeline::{LayerResult, MiddlewareOptions};
use goondan_runtime::tool::ToolOutcome;
use goondan_runtime::{
    Extension, ExtensionApi, ExtensionInitError, Middleware, StepContext, StepNext, ToolContext,
    ToolFailure, ToolHandler,
};
use goondan_types::{JsonObject, JsonValue, ToolCatalogItem};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;

/// `spec.config` of `tool-search`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolSearchConfig {
    /// The meta tool's catalog name (`resource__export`).
    pub tool_name: String,
    /// The most results one search returns.
    pub max_results: usize,
    /// Shorter queries return nothing.
    pub min_query_length: usize,
    /// Whether a search's results narrow the catalog of later Steps.
    pub persist_selection: bool,
}

impl Default for ToolSearchConfig {
    fn default() -> Self {
        ToolSearchConfig {
            tool_name: "tool-search__search".into(),
            max_results: 10,
            min_query_length: 1,
            persist_selection: true,
        }
    }
}

/// A catalog item as the state keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotItem {
    /// The tool name.
    pub name: String,
    /// Its description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The extension's saved state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ToolSearchState {
    /// Tools the last search selected; empty means no narrowing.
    pub selected_tools: Vec<String>,
    /// The last query.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_query: Option<String>,
    /// The full catalog as of the latest Step.
    pub catalog_snapshot: Vec<SnapshotItem>,
}

impl ToolSearchState {
    fn load(state: &ExtensionState) -> Self {
        // A state file from another version or edited by hand is not worth
        // failing a Step over: start fresh.
        serde_json::from_value(state.get()).unwrap_or_default()
    }

    fn save(&self, state: &ExtensionState) {
        state.set(serde_json::to_value(self).expect("the state serializes"));
    }
}

/// The extension.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToolSearch;

impl Extension for ToolSearch {
    fn register(
        &self,
        api: &mut ExtensionApi<'_>,
        config: &JsonValue,
    ) -> Result<(), ExtensionInitError> {
        let config: ToolSearchConfig = parse_config(api.name(), config)?;
        if config.max_results == 0 {
            return Err(ExtensionInitError::new(
                "tool-search: maxResults must be at least 1",
            ));
        }
        let item = ToolCatalogItem {
            name: config.tool_name.clone(),
            description: Some(
                "Search the available tools by words in their names and descriptions; the results become the tools offered in the next steps."
                    .into(),
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words describing the tool you need."},
                    "limit": {"type": "number", "description": "The most results to return."}
                },
                "required": ["query"],
                "additionalProperties": false
            })
            .as_object()
            .cloned(),
            source: None,
        };
        let handler = Arc::new(SearchHandler {
            config: config.clone(),
            state: api.state().clone(),
        });
        api.tools().register(item, handler)?;
        let layer = Arc::new(ToolSearchLayer {
            config,
            state: api.state().clone(),
        });
        api.pipeline()
            .register::<StepContext>(layer, MiddlewareOptions::default());
        Ok(())
    }
}

/// The meta tool.
struct SearchHandler {
    config: ToolSearchConfig,
    state: ExtensionState,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    #[serde(default)]
    limit: Option<f64>,
}

impl SearchHandler {
    fn search(&self, args: JsonObject) -> ToolOutcome {
        let parsed: SearchArgs =
            serde_json::from_value(JsonValue::Object(args)).map_err(|error| {
                ToolFailure::new(
                    "E_TOOL_INVALID_ARGS",
                    format!("invalid arguments for {}: {error}", self.config.tool_name),
                )
                .with_name("ToolInputError")
                .with_suggestion("Pass {\"query\": \"words\"} and optionally a numeric limit.")
            })?;
        let normalized = parsed.query.trim().to_lowercase();
        if normalized.chars().count() < self.config.min_query_length {
            return Ok(json!({"query": parsed.query, "results": [], "selectedTools": []}));
        }
        let limit = parsed
            .limit
            .filter(|limit| limit.is_finite() && *limit >= 1.0)
            .map_or(self.config.max_results, |limit| {
                (limit as usize).min(self.config.max_results)
            });
        let mut state = ToolSearchState::load(&self.state);
        let results = rank(
            &state.catalog_snapshot,
            &normalized,
            &self.config.tool_name,
            limit,
        );
        let selected: Vec<String> = results.iter().map(|item| item.name.clone()).collect();
        if self.config.persist_selection {
            state.selected_tools = selected.clone();
            state.last_query = Some(parsed.query.clone());
            state.save(&self.state);
        }
        Ok(json!({"query": parsed.query, "results": results, "selectedTools": selected}))
    }
}

impl ToolHandler for SearchHandler {
    fn call<'a>(&'a self, _ctx: &'a ToolContext, args: JsonObject) -> BoxFuture<'a, ToolOutcome> {
        Box::pin(async move { self.search(args) })
    }
}

/// Items matching any word of `query`, most matching words first; ties keep
/// catalog order. The search tool itself is never a result.
fn rank(
    snapshot: &[SnapshotItem],
    query: &str,
    search_tool: &str,
    limit: usize,
) -> Vec<SnapshotItem> {
    let words: Vec<&str> = query.split_whitespace().collect();
    let mut scored: Vec<(usize, &SnapshotItem)> = snapshot
        .iter()
        .filter(|item| item.name != search_tool)
        .filter_map(|item| {
            let haystack = format!(
                "{} {}",
                item.name.to_lowercase(),
                item.description.as_deref().unwrap_or("").to_lowercase()
            );
            let score = words.iter().filter(|word| haystack.contains(*word)).count();
            (score > 0).then_some((score, item))
        })
        .collect();
    scored.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
    scored
        .into_iter()
        .take(limit)
        .map(|(_, item)| item.clone())
        .collect()
}

/// The `step` middleware.
#[derive(Debug, Clone)]
pub struct ToolSearchLayer {
    config: ToolSearchConfig,
    state: ExtensionState,
}

impl ToolSearchLayer {
    fn narrow(&self, catalog: &mut Vec<ToolCatalogItem>) {
        let mut state = ToolSearchState::load(&self.state);
        state.catalog_snapshot = catalog
            .iter()
            .map(|item| SnapshotItem {
                name: item.name.clone(),
                description: item.description.clone(),
            })
            .collect();
        if self.config.persist_selection && !state.selected_tools.is_empty() {
            catalog.retain(|item| {
                item.name == self.config.tool_name || state.selected_tools.contains(&item.name)
            });
        }
        state.save(&self.state);
    }
}

impl Middleware<StepContext> for ToolSearchLayer {
    fn handle<'a>(
        &'a self,
        ctx: &'a mut StepContext,
        next: StepNext<'a>,
    ) -> BoxFuture<'a, LayerResult<StepContext>> {
        Box::pin(async move {
            self.narrow(&mut ctx.tool_catalog);
            next.run(ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, description: &str) -> ToolCatalogItem {
        ToolCatalogItem {
            name: name.into(),
            description: Some(description.into()),
            parameters: None,
            source: None,
        }
    }

    fn catalog() -> Vec<ToolCatalogItem> {
        vec![
            item("bash__exec", "Run a shell command"),
            item("file-system__read", "Read a file"),
            item("file-system__write", "Write a file"),
            item("http-fetch__get", "HTTP GET request"),
            item("tool-search__search", "Search tools"),
        ]
    }

    fn parts(config: ToolSearchConfig) -> (SearchHandler, ToolSearchLayer) {
        let state = ExtensionState::new("tool-search", JsonValue::Null);
        (
            SearchHandler {
                config: config.clone(),
                state: state.clone(),
            },
            ToolSearchLayer { config, state },
        )
    }

    fn object(value: JsonValue) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_search_narrows_later_steps_and_still_sees_everything() {
        let (handler, layer) = parts(ToolSearchConfig::default());
        let mut first = catalog();
        layer.narrow(&mut first);
        assert_eq!(first.len(), 5, "nothing selected yet");
        let output = handler
            .search(object(json!({"query": "write file"})))
            .unwrap();
        assert_eq!(
            output["selectedTools"],
            json!(["file-system__write", "file-system__read"])
        );
        let mut second = catalog();
        layer.narrow(&mut second);
        let names: Vec<&str> = second.iter().map(|item| item.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "file-system__read",
                "file-system__write",
                "tool-search__search"
            ]
        );
        // The snapshot is the full catalog, so another search finds bash.
        let again = handler
            .search(object(json!({"query": "shell", "limit": 1})))
            .unwrap();
        assert_eq!(again["selectedTools"], json!(["bash__exec"]));
    }

    #[test]
    fn short_queries_limits_and_no_persistence() {
        let (handler, layer) = parts(ToolSearchConfig {
            min_query_length: 3,
            persist_selection: false,
            ..ToolSearchConfig::default()
        });
        layer.narrow(&mut catalog());
        assert_eq!(
            handler.search(object(json!({"query": "ab"}))).unwrap()["results"],
            json!([])
        );
        let output = handler.search(object(json!({"query": "file"}))).unwrap();
        assert_eq!(output["results"].as_array().unwrap().len(), 2);
        let mut next = catalog();
        layer.narrow(&mut next);
        assert_eq!(next.len(), 5, "selection not persisted");
        let error = handler.search(object(json!({"q": "x"}))).unwrap_err();
        assert_eq!(error.code, "E_TOOL_INVALID_ARGS");
    }

    #[test]
    fn config_is_parsed_strictly() {
        let parsed: ToolSearchConfig =
            parse_config("tool-search", &json!({"maxResults": 3})).unwrap();
        assert_eq!(parsed.max_results, 3);
        assert!(parse_config::<ToolSearchConfig>("tool-search", &json!({"max": 3})).is_err());
    }
}
