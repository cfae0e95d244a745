//! How a Connection's events arrive: posted to a web server the connector
//! runs (pushed), or made by the connector itself (it polls a platform or
//! fires on a clock).
//!
//! Whoever places ConnectorProcesses asks this: a connector that is pushed
//! to may run on every host behind a load balancer (a platform's retry
//! that reaches another host carries the same delivery id), while one that
//! polls must run once. The answer comes from the table of built-in
//! connectors ([`Builtin`]) that also decides what a ConnectorProcess
//! runs, so the two cannot disagree. This module does not place anything.

use crate::host::Builtin;
use crate::ConnectorConfig;
use goondan_config::{Bundle, ConnectionView};
use goondan_types::Entry;

/// Whether `connection`'s connector is a web server platforms push to:
/// `builtin:webhook`, `github`, `slack`, `discord`, and `builtin:telegram`
/// when its Connection's `TELEGRAM_MODE` resolves to `webhook`. Every
/// other connector (Telegram long polling, cron, a script connector) makes
/// its own events.
///
/// The Connection's `config` and `secrets` are resolved against `bundle`
/// as far as they resolve: a value that does not resolve here reads as
/// unset, so the connector's default decides (a ConnectorProcess would
/// refuse to start on it anyway).
pub fn is_pushed_to(bundle: &Bundle, connection: ConnectionView<'_>) -> bool {
    let Ok(Entry::Native { name }) = Entry::parse(&connection.connector().spec.entry) else {
        return false;
    };
    let Some(builtin) = Builtin::from_name(&name) else {
        return false;
    };
    builtin.is_pushed_to(&settings(bundle, connection))
}

/// The Connection's `config` and `secrets`, each value that resolves.
fn settings(bundle: &Bundle, connection: ConnectionView<'_>) -> ConnectorConfig {
    let spec = &connection.resource().spec;
    let mut settings = ConnectorConfig::default();
    for (key, source) in &spec.config {
        if let Ok(value) = bundle.resolve(source) {
            settings.config.insert(key.clone(), value);
        }
    }
    for (key, source) in &spec.secrets {
        if let Ok(value) = bundle.resolve(source) {
            settings.secrets.insert(key.clone(), value);
        }
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One Connection per case, named after what it should be.
    const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: instant
spec:
  provider: scripted
  model: instant
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: echo
spec:
  modelConfig:
    modelRef: Model/instant
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/echo
  agents:
    - ref: Agent/echo
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: pushed-webhook
spec:
  connectorRef: Connector/webhook
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: pushed-github
spec:
  connectorRef: Connector/github
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: pushed-telegram-webhook
spec:
  connectorRef: Connector/telegram
  config:
    TELEGRAM_MODE:
      value: " Webhook "
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: polled-telegram-default
spec:
  connectorRef: Connector/telegram
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: polled-telegram-polling
spec:
  connectorRef: Connector/telegram
  config:
    TELEGRAM_MODE:
      value: polling
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: polled-cron
spec:
  connectorRef: Connector/cron
"#;

    #[test]
    fn web_servers_are_pushed_to_and_telegram_only_in_webhook_mode() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("goondan.yaml"), BUNDLE).unwrap();
        let options = goondan_config::LoadOptions {
            inherit_process_env: false,
            ..Default::default()
        };
        let outcome = goondan_config::load_bundle(dir.path(), &options).unwrap();
        let bundle = outcome
            .bundle
            .unwrap_or_else(|| panic!("the bundle loads: {:?}", outcome.diagnostics));
        let mut seen = 0;
        for connection in bundle.connections() {
            let name = connection.name().to_string();
            let expected = name.starts_with("pushed-");
            assert_eq!(is_pushed_to(&bundle, connection), expected, "{name}");
            seen += 1;
        }
        assert_eq!(seen, 6);
    }
}
