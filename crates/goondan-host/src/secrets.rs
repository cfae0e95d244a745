//! Which secrets a child process receives: the orchestrator withholds
//! every secret variable (an API key, every variable a bundle reads
//! through `valueFrom.env`) from its children's environment and hands the
//! set ones over in the spawn handshake instead (`goondan_ipc::handshake`),
//! so no tool an agent runs inherits them.

use goondan_config::Bundle;
use goondan_types::Secrets;

/// The secrets a spawned child receives in its handshake, and every
/// secret variable name (set or not) removed from its exec environment.
/// The OTLP header variables count as secrets too: they usually carry the
/// collector's API key.
pub(crate) fn for_children(bundle: &Bundle) -> (Secrets, Vec<String>) {
    let defaults: Vec<&str> = goondan_model::DEFAULT_KEY_VARIABLES
        .iter()
        .chain(goondan_telemetry::OTEL_SECRET_VARIABLES)
        .copied()
        .collect();
    let secrets = bundle.secrets(&defaults);
    let withheld = bundle
        .env_references()
        .into_iter()
        .chain(defaults.iter().map(|name| name.to_string()))
        .collect();
    (secrets, withheld)
}

#[cfg(test)]
mod tests {
    use super::*;
    use goondan_config::{load_bundle, LoadOptions};

    const BUNDLE: &str = "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: llm
spec:
  provider: openai
  model: gpt-x
  apiKey:
    valueFrom:
      env: MY_KEY
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: solo
spec:
  modelConfig:
    modelRef: Model/llm
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/solo
  agents:
    - ref: Agent/solo
";

    #[test]
    fn children_are_handed_the_set_secrets_and_denied_every_secret_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("goondan.yaml"), BUNDLE).unwrap();
        std::fs::write(dir.path().join(".env"), "MY_KEY=sk-from-dotenv-1234\n").unwrap();
        let options = LoadOptions {
            inherit_process_env: false,
            ..LoadOptions::default()
        };
        let bundle = load_bundle(dir.path(), &options).unwrap().bundle.unwrap();
        let (secrets, withheld) = for_children(&bundle);
        assert_eq!(
            secrets.iter().collect::<Vec<_>>(),
            [("MY_KEY", "sk-from-dotenv-1234")]
        );
        assert_eq!(
            withheld,
            [
                "MY_KEY",
                "ANTHROPIC_API_KEY",
                "OPENAI_API_KEY",
                "GOOGLE_GENERATIVE_AI_API_KEY",
                "OTEL_EXPORTER_OTLP_HEADERS",
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            ]
        );
    }
}
