//! [`Secrets`]: the resolved values of the environment variables a bundle
//! reads as secrets (every `valueFrom.env` and the providers' usual key
//! variables), and the one masking routine that keeps them out of text.
//!
//! This module holds no policy about where secrets come from (the
//! orchestrator collects them from the bundle's environment) or how they
//! travel (the spawn handshake in `goondan-ipc`); it only carries them and
//! masks them. `Debug` never prints a value.

use crate::JsonValue;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

/// Values shorter than this are not masked in tool output: a short value
/// (`1`, `true`, a test key) would turn ordinary text into markers, and a
/// real secret is never that short.
pub const MIN_MASKED_LEN: usize = 8;

/// Secret environment variables by name.
///
/// It serializes as a plain `{"NAME": "value"}` object: that is the wire
/// shape of the spawn handshake, the only place it is serialized.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secrets(BTreeMap<String, String>);

impl Secrets {
    /// No secrets.
    pub fn new() -> Self {
        Secrets::default()
    }

    /// Adds (or replaces) one variable.
    pub fn insert(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.insert(name.into(), value.into());
    }

    /// The value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Every variable, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// How many variables there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every occurrence of a secret value of at least
    /// [`MIN_MASKED_LEN`] bytes replaced by `[REDACTED:NAME]`. Longer
    /// values are replaced first, so a secret that contains another is
    /// masked whole. Borrows `text` when nothing was found.
    pub fn mask<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let mut masked = Cow::Borrowed(text);
        for (name, value) in self.maskable() {
            if let Cow::Owned(replaced) = mask_value(&masked, value, &marker(name)) {
                masked = Cow::Owned(replaced);
            }
        }
        masked
    }

    /// Masks every string of a JSON value (object keys included) in
    /// place, as [`Secrets::mask`] does. Returns true when something was
    /// replaced.
    pub fn mask_json(&self, value: &mut JsonValue) -> bool {
        if !self.0.values().any(|value| value.len() >= MIN_MASKED_LEN) {
            return false;
        }
        self.mask_json_inner(value)
    }

    fn mask_json_inner(&self, value: &mut JsonValue) -> bool {
        match value {
            JsonValue::String(text) => self.mask_string(text),
            JsonValue::Array(items) => items
                .iter_mut()
                .fold(false, |changed, item| self.mask_json_inner(item) | changed),
            JsonValue::Object(object) => {
                let mut changed = false;
                let keys: Vec<String> = object.keys().cloned().collect();
                for key in keys {
                    let masked_key = self.mask(&key);
                    if let Cow::Owned(masked_key) = masked_key {
                        if let Some(item) = object.remove(&key) {
                            object.insert(masked_key, item);
                            changed = true;
                        }
                    }
                }
                for item in object.values_mut() {
                    changed |= self.mask_json_inner(item);
                }
                changed
            }
            JsonValue::Null | JsonValue::Bool(_) | JsonValue::Number(_) => false,
        }
    }

    /// Masks one string in place; true when it changed.
    pub fn mask_string(&self, text: &mut String) -> bool {
        match self.mask(text) {
            Cow::Borrowed(_) => false,
            Cow::Owned(masked) => {
                *text = masked;
                true
            }
        }
    }

    /// The values long enough to mask, longest first.
    fn maskable(&self) -> Vec<(&str, &str)> {
        let mut values: Vec<(&str, &str)> = self
            .iter()
            .filter(|(_, value)| value.len() >= MIN_MASKED_LEN)
            .collect();
        values.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(b.0)));
        values
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Secrets {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Secrets(
            iter.into_iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
        )
    }
}

impl fmt::Debug for Secrets {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("Secrets")
            .field("names", &self.0.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The secrets [`mask_for_logs`] masks in this process.
static LOG_SECRETS: std::sync::OnceLock<Secrets> = std::sync::OnceLock::new();

/// Makes [`mask_for_logs`] mask `secrets` from now on, in this process.
/// A process that receives secrets (in its spawn handshake, or from its
/// environment) calls it once, before it logs anything that could hold
/// one; later calls change nothing.
pub fn mask_in_logs(secrets: &Secrets) {
    let _ = LOG_SECRETS.set(secrets.clone());
}

/// `text` with the secrets given to [`mask_in_logs`] masked: what every
/// log line goes through before it is written.
pub fn mask_for_logs(text: &str) -> Cow<'_, str> {
    match LOG_SECRETS.get() {
        Some(secrets) => secrets.mask(text),
        None => Cow::Borrowed(text),
    }
}

/// The marker that stands for the value of `name`.
fn marker(name: &str) -> String {
    format!("[REDACTED:{name}]")
}

/// `text` with every occurrence of `secret` replaced by `marker`; borrows
/// `text` when `secret` is empty or absent. The one replacement routine of
/// the workspace: provider errors (`ApiKey::scrub`) and tool results
/// ([`Secrets::mask`]) both call it.
pub fn mask_value<'t>(text: &'t str, secret: &str, marker: &str) -> Cow<'t, str> {
    if secret.is_empty() || !text.contains(secret) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(text.replace(secret, marker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secrets() -> Secrets {
        [
            ("MY_KEY", "sk-test-SECRET-9f3a7c2e1b"),
            ("INNER", "SECRET-9f3a"),
            ("SHORT", "abc"),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn masks_every_occurrence_longest_first_and_leaves_short_values() {
        let cases = [
            ("nothing here", "nothing here"),
            (
                "MY_KEY=sk-test-SECRET-9f3a7c2e1b\nagain sk-test-SECRET-9f3a7c2e1b",
                "MY_KEY=[REDACTED:MY_KEY]\nagain [REDACTED:MY_KEY]",
            ),
            ("only SECRET-9f3a here", "only [REDACTED:INNER] here"),
            ("abc stays abc", "abc stays abc"),
        ];
        for (input, expected) in cases {
            assert_eq!(secrets().mask(input), expected, "input: {input}");
        }
        assert!(matches!(secrets().mask("clean"), Cow::Borrowed(_)));
    }

    #[test]
    fn masks_json_strings_and_keys() {
        let mut value = json!({
            "stdout": "key=sk-test-SECRET-9f3a7c2e1b",
            "sk-test-SECRET-9f3a7c2e1b": [1, "SECRET-9f3a", null],
            "n": 3
        });
        assert!(secrets().mask_json(&mut value));
        assert_eq!(
            value,
            json!({
                "stdout": "key=[REDACTED:MY_KEY]",
                "[REDACTED:MY_KEY]": [1, "[REDACTED:INNER]", null],
                "n": 3
            })
        );
        assert!(!secrets().mask_json(&mut value));
    }

    #[test]
    fn debug_shows_names_only_and_the_wire_shape_is_a_plain_object() {
        let secrets = secrets();
        let debug = format!("{secrets:?}");
        assert!(
            debug.contains("MY_KEY") && !debug.contains("9f3a"),
            "{debug}"
        );
        let wire = serde_json::to_value(&secrets).unwrap();
        assert_eq!(wire["MY_KEY"], "sk-test-SECRET-9f3a7c2e1b");
        assert_eq!(serde_json::from_value::<Secrets>(wire).unwrap(), secrets);
    }
}
