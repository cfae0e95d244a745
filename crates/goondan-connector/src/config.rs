//! A connector's settings: the Connection's `config` and `secrets`, already
//! resolved from their ValueSources, with typed readers that fail with the
//! key's name and a suggestion.

use goondan_types::Secrets;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// A setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("E_CONNECTOR_CONFIG: {key}: {problem} (help: {help})")]
pub struct ConnectorConfigError {
    /// The config or secret key.
    pub key: String,
    /// What is wrong with it.
    pub problem: String,
    /// What to do.
    pub help: String,
}

impl ConnectorConfigError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        "E_CONNECTOR_CONFIG"
    }
}

/// The resolved `config` and `secrets` of one Connection.
#[derive(Debug, Clone, Default)]
pub struct ConnectorConfig {
    /// `Connection.spec.config`, resolved.
    pub config: BTreeMap<String, String>,
    /// `Connection.spec.secrets`, resolved; masked wherever they are logged.
    pub secrets: Secrets,
}

impl ConnectorConfig {
    /// A non-empty config value.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.config
            .get(key)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The first non-empty secret among `names` (the original's aliases,
    /// in its order), as `(name, value)`.
    pub fn secret<'a>(&'a self, names: &[&'a str]) -> Option<(&'a str, &'a str)> {
        names.iter().find_map(|name| {
            self.secrets
                .get(name)
                .filter(|value| !value.is_empty())
                .map(|value| (*name, value))
        })
    }

    /// A setting the original reads from config or secrets alike: the
    /// non-empty config value of `key`, else the non-empty secret.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.value(key)
            .or_else(|| self.secrets.get(key).filter(|value| !value.is_empty()))
    }

    /// The first of `keys` that is set, as a port; `default` when none is.
    pub fn port(&self, keys: &[&str], default: u16) -> Result<u16, ConnectorConfigError> {
        let Some((key, text)) = keys.iter().find_map(|key| Some((*key, self.value(key)?))) else {
            return Ok(default);
        };
        match text.trim().parse::<u16>() {
            Ok(port) => Ok(port),
            Err(_) => Err(ConnectorConfigError {
                key: key.to_string(),
                problem: format!("{text:?} is not a port"),
                help: "use a number from 0 to 65535 (0 picks a free port)".into(),
            }),
        }
    }

    /// The address to listen on: `HOST`, loopback by default, because a
    /// port that faces the internet should be opened on purpose.
    pub fn host(&self) -> Result<IpAddr, ConnectorConfigError> {
        match self.value("HOST") {
            None => Ok(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            Some(text) => text.trim().parse().map_err(|_| ConnectorConfigError {
                key: "HOST".into(),
                problem: format!("{text:?} is not an IP address"),
                help: "use 127.0.0.1 (the default), 0.0.0.0 to listen on every interface, or one address".into(),
            }),
        }
    }

    /// A URL path from the first of `keys` that is set (a leading `/`
    /// added, trailing ones removed), else `default`.
    pub fn path(&self, keys: &[&str], default: &str) -> String {
        let raw = keys
            .iter()
            .find_map(|key| self.value(key))
            .unwrap_or(default)
            .trim();
        let trimmed = raw.trim_end_matches('/');
        if trimmed.is_empty() {
            "/".to_string()
        } else if trimmed.starts_with('/') {
            trimmed.to_string()
        } else {
            format!("/{trimmed}")
        }
    }

    /// A positive whole number, else `default`.
    pub fn number(&self, key: &str, default: u64) -> Result<u64, ConnectorConfigError> {
        match self.value(key) {
            None => Ok(default),
            Some(text) => match text.trim().parse::<u64>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(ConnectorConfigError {
                    key: key.to_string(),
                    problem: format!("{text:?} is not a positive whole number"),
                    help: format!("leave it out for the default, {default}"),
                }),
            },
        }
    }

    /// A number of seconds, else `default`.
    pub fn seconds(&self, key: &str, default: Duration) -> Result<Duration, ConnectorConfigError> {
        self.number(key, default.as_secs()).map(Duration::from_secs)
    }

    /// A yes/no setting (`true`/`false`, `1`/`0`, `yes`/`no`).
    pub fn flag(&self, key: &str) -> Result<bool, ConnectorConfigError> {
        match self.value(key).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(false),
            Some(v) if matches!(v.as_str(), "true" | "1" | "yes") => Ok(true),
            Some(v) if matches!(v.as_str(), "false" | "0" | "no") => Ok(false),
            Some(v) => Err(ConnectorConfigError {
                key: key.to_string(),
                problem: format!("{v:?} is not true or false"),
                help: "use true or false".into(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> ConnectorConfig {
        ConnectorConfig {
            config: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            secrets: Secrets::new(),
        }
    }

    #[test]
    fn readers_take_the_first_key_set_and_name_the_bad_one() {
        let c = config(&[("SLACK_WEBHOOK_PORT", "9000"), ("PORT", "1")]);
        assert_eq!(c.port(&["SLACK_WEBHOOK_PORT", "PORT"], 8787), Ok(9000));
        assert_eq!(config(&[]).port(&["PORT"], 8787), Ok(8787));
        let error = config(&[("PORT", "http")]).port(&["PORT"], 1).unwrap_err();
        assert_eq!(error.key, "PORT");
        assert!(
            error.to_string().starts_with("E_CONNECTOR_CONFIG: PORT"),
            "{error}"
        );
        assert!(config(&[("PORT", "70000")]).port(&["PORT"], 1).is_err());
    }

    #[test]
    fn host_is_loopback_unless_set() {
        assert_eq!(config(&[]).host().unwrap().to_string(), "127.0.0.1");
        assert_eq!(
            config(&[("HOST", "0.0.0.0")]).host().unwrap().to_string(),
            "0.0.0.0"
        );
        assert!(config(&[("HOST", "example.com")]).host().is_err());
    }

    #[test]
    fn paths_are_normalised() {
        assert_eq!(config(&[]).path(&["PATH"], "/"), "/");
        assert_eq!(config(&[("P", "hooks/in/")]).path(&["P"], "/"), "/hooks/in");
        assert_eq!(config(&[("P", "///")]).path(&["P"], "/x"), "/");
    }

    #[test]
    fn secrets_are_read_by_alias_in_order() {
        let mut c = config(&[]);
        c.secrets.insert("WEBHOOK_SECRET", "two");
        c.secrets.insert("SIGNING_SECRET", "");
        assert_eq!(
            c.secret(&["SIGNING_SECRET", "WEBHOOK_SECRET"]),
            Some(("WEBHOOK_SECRET", "two"))
        );
        assert_eq!(c.secret(&["OTHER"]), None);
    }

    #[test]
    fn settings_read_config_before_secrets() {
        let mut c = config(&[("A", "from-config"), ("EMPTY", "")]);
        c.secrets.insert("A", "from-secret");
        c.secrets.insert("B", "only-secret");
        c.secrets.insert("EMPTY", "secret-wins-over-empty");
        assert_eq!(c.setting("A"), Some("from-config"));
        assert_eq!(c.setting("B"), Some("only-secret"));
        assert_eq!(c.setting("EMPTY"), Some("secret-wins-over-empty"));
        assert_eq!(c.setting("C"), None);
    }

    #[test]
    fn numbers_and_flags_refuse_nonsense() {
        assert_eq!(config(&[("N", "5")]).number("N", 1), Ok(5));
        assert!(config(&[("N", "0")]).number("N", 1).is_err());
        assert!(config(&[("N", "-1")]).number("N", 1).is_err());
        assert_eq!(config(&[("F", "Yes")]).flag("F"), Ok(true));
        assert_eq!(config(&[]).flag("F"), Ok(false));
        assert!(config(&[("F", "maybe")]).flag("F").is_err());
    }
}
