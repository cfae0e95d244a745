//! What a model call costs: a [`ModelPrice`] per Model, from the Model's
//! own `spec.pricing` or from the vendored price list
//! (`prices/litellm-chat-prices.json`, see `prices/README.md` for its
//! source, license and date).
//!
//! The list is compiled into the binary as text; a lookup, which an agent
//! does once when it starts, parses only the entry it finds. Nothing
//! here counts tokens or keeps totals; that is the ledger's job
//! (`goondan_runtime::ledger`).

use goondan_config::spec::ModelPricing;
use goondan_types::TokenUsage;
use serde::Deserialize;

/// The vendored snapshot, verbatim.
const PRICE_LIST: &str = include_str!("../prices/litellm-chat-prices.json");

/// The price of one Model in US dollars per token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPrice {
    /// Per input (prompt) token.
    pub input_usd_per_token: f64,
    /// Per output (completion) token.
    pub output_usd_per_token: f64,
    /// Where the price came from.
    pub source: PriceSource,
}

/// Where a [`ModelPrice`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceSource {
    /// `Model.spec.pricing` in the bundle.
    ModelSpec,
    /// The vendored LiteLLM price list.
    PriceList,
}

impl ModelPrice {
    /// The price a Model's `spec.pricing` states (per million tokens).
    pub fn from_spec(pricing: &ModelPricing) -> Self {
        ModelPrice {
            input_usd_per_token: pricing.input_usd_per_million_tokens / 1_000_000.0,
            output_usd_per_token: pricing.output_usd_per_million_tokens / 1_000_000.0,
            source: PriceSource::ModelSpec,
        }
    }

    /// What `usage` costs at this price, in US dollars.
    pub fn cost_usd(&self, usage: &TokenUsage) -> f64 {
        usage.prompt_tokens as f64 * self.input_usd_per_token
            + usage.completion_tokens as f64 * self.output_usd_per_token
    }
}

/// One entry of the list, as far as it is read.
#[derive(Deserialize)]
struct ListEntry {
    litellm_provider: String,
    input_cost_per_token: f64,
    output_cost_per_token: f64,
}

/// The list's provider name for one of ours; `None` for providers that
/// call no paid API (`scripted`, `replay`).
fn list_provider(provider: &str) -> Option<&'static str> {
    match provider.to_ascii_lowercase().as_str() {
        "anthropic" => Some("anthropic"),
        "openai" => Some("openai"),
        "google" => Some("gemini"),
        _ => None,
    }
}

/// The price of `model` at `provider` in the vendored list, or `None`
/// when the list does not have it (or the provider is not a paid API).
///
/// The model id is tried as written, then with the list's `gemini/`
/// prefix for Google, then without a `models/` prefix (Gemini's own
/// spelling); an entry counts only when its provider matches, so an
/// OpenAI-compatible server named `openai` with a model id the list does
/// not know gets no price rather than someone else's.
pub fn list_price(provider: &str, model: &str) -> Option<ModelPrice> {
    let list_provider = list_provider(provider)?;
    let bare = model.strip_prefix("models/").unwrap_or(model);
    let candidates = [
        model.to_string(),
        bare.to_string(),
        format!("{list_provider}/{bare}"),
    ];
    candidates.iter().find_map(|key| {
        list_entry(key)
            .filter(|entry| entry.litellm_provider == list_provider)
            .map(|entry| ModelPrice {
                input_usd_per_token: entry.input_cost_per_token,
                output_usd_per_token: entry.output_cost_per_token,
                source: PriceSource::PriceList,
            })
    })
}

/// The entry of `key`, parsing only that entry: the snapshot is written
/// one top-level key per line (`\n "<key>": {`), so a text search finds
/// it without building the whole map at every agent start. A key with a
/// quote or backslash is never in the list.
fn list_entry(key: &str) -> Option<ListEntry> {
    if key.contains(['"', '\\']) {
        return None;
    }
    let needle = format!("\n \"{key}\": ");
    let start = PRICE_LIST.find(&needle)? + needle.len();
    let mut entries =
        serde_json::Deserializer::from_str(&PRICE_LIST[start..]).into_iter::<ListEntry>();
    entries.next()?.ok()
}

/// The price of a Model: its own `spec.pricing` when it has one, else the
/// vendored list's.
pub fn price_of(provider: &str, model: &str, pricing: Option<&ModelPricing>) -> Option<ModelPrice> {
    match pricing {
        Some(pricing) => Some(ModelPrice::from_spec(pricing)),
        None => list_price(provider, model),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_vendored_list_parses_and_covers_each_paid_provider() {
        let entries: HashMap<String, ListEntry> = serde_json::from_str(PRICE_LIST).unwrap();
        for provider in ["anthropic", "openai", "gemini"] {
            assert!(
                entries
                    .values()
                    .any(|entry| entry.litellm_provider == provider),
                "{provider} missing"
            );
        }
    }

    #[test]
    fn every_entry_is_found_by_its_key() {
        let entries: HashMap<String, ListEntry> = serde_json::from_str(PRICE_LIST).unwrap();
        for (key, expected) in &entries {
            let found = list_entry(key).unwrap_or_else(|| panic!("{key} not found"));
            assert_eq!(
                found.input_cost_per_token, expected.input_cost_per_token,
                "{key}"
            );
            assert_eq!(
                found.output_cost_per_token, expected.output_cost_per_token,
                "{key}"
            );
        }
        assert!(list_entry("gpt-4o\": {").is_none());
    }

    #[test]
    fn list_prices_are_found_by_provider_and_model() {
        let cases = [
            ("anthropic", "claude-sonnet-4-5", Some((3e-6, 1.5e-5))),
            ("openai", "gpt-4o-mini", Some((1.5e-7, 6e-7))),
            ("google", "gemini-2.5-pro", Some((1.25e-6, 1e-5))),
            ("google", "models/gemini-2.5-pro", Some((1.25e-6, 1e-5))),
            // The right model at the wrong provider has no price.
            ("openai", "claude-sonnet-4-5", None),
            ("scripted", "gpt-4o", None),
            ("anthropic", "no-such-model", None),
        ];
        for (provider, model, expected) in cases {
            let got = list_price(provider, model)
                .map(|price| (price.input_usd_per_token, price.output_usd_per_token));
            assert_eq!(got, expected, "{provider}/{model}");
        }
    }

    #[test]
    fn a_spec_price_wins_and_costs_per_million() {
        let pricing = ModelPricing {
            input_usd_per_million_tokens: 2.0,
            output_usd_per_million_tokens: 10.0,
        };
        let price = price_of("anthropic", "claude-sonnet-4-5", Some(&pricing)).unwrap();
        assert_eq!(price.source, PriceSource::ModelSpec);
        let usage = TokenUsage {
            prompt_tokens: 1_000_000,
            completion_tokens: 500_000,
            total_tokens: 1_500_000,
        };
        assert!((price.cost_usd(&usage) - 7.0).abs() < 1e-9);
    }
}
