//! What keeps secrets (API keys, every variable a bundle reads through
//! `valueFrom.env`) away from the model and the tools it runs, on the
//! binary's side: which variables the orchestrator withholds from its
//! children and hands over in the spawn handshake instead, and marking the
//! processes that hold them non-dumpable. The handshake itself is
//! `goondan_ipc::handshake`; masking tool results is
//! `goondan_runtime::tool::mask_tool_result`.

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

/// Marks this process non-dumpable (Linux `PR_SET_DUMPABLE` 0): no core
/// dump, no `ptrace` by other processes of the same user, and its
/// `/proc/<pid>/environ` and `/proc/<pid>/mem` become unreadable to them,
/// so a tool the model runs cannot read the keys this process holds from
/// its parent's memory or environment. The flag is reset on `exec`, so
/// the children this process starts are not affected. Other platforms
/// have no such switch; there, secrets rely on the handshake and the
/// masking alone.
pub(crate) fn make_non_dumpable() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(error) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("warning: could not mark the process non-dumpable: {error}");
    }
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

    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[test]
    fn the_process_becomes_non_dumpable() {
        make_non_dumpable();
        assert!(!nix::sys::prctl::get_dumpable().unwrap());
    }
}
