//! Which secrets a child process receives: the orchestrator withholds
//! every secret variable (an API key, every variable a bundle reads
//! through `valueFrom.env`) from its children's environment and hands
//! each child the set ones its own resources read in the spawn handshake
//! instead (`goondan_ipc::handshake`), so no tool an agent runs inherits
//! them and no agent holds another agent's key (issue 35).

use goondan_config::{AgentView, Bundle};
use goondan_orchestrator::{SecretsFor, SpawnRequest};
use goondan_types::Secrets;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Every secret variable name (set or not) removed from every child's
/// exec environment: the whole bundle's, so no child inherits a secret
/// that was not handed to it. The providers' default key variables and
/// the OTLP header variables (they usually carry the collector's API key)
/// count too.
pub(crate) fn withheld(bundle: &Bundle) -> Vec<String> {
    bundle
        .env_references()
        .into_iter()
        .chain(default_names().map(str::to_string))
        .collect()
}

/// Every secret value the bundle resolves: what the orchestrator masks in
/// its own log lines.
pub(crate) fn all(bundle: &Bundle) -> Secrets {
    bundle.secrets(&default_names().collect::<Vec<_>>())
}

fn default_names() -> impl Iterator<Item = &'static str> {
    goondan_model::DEFAULT_KEY_VARIABLES
        .iter()
        .chain(goondan_telemetry::OTEL_SECRET_VARIABLES)
        .copied()
}

/// The secrets each child is handed, by agent and by Connection, worked
/// out once per bundle and replaced on every reload (a reloaded agent may
/// read other variables than before).
#[derive(Clone, Default)]
pub(crate) struct ChildSecrets {
    by_child: Arc<RwLock<ByChild>>,
}

#[derive(Default)]
struct ByChild {
    agents: HashMap<String, Secrets>,
    connections: HashMap<String, Secrets>,
}

impl ChildSecrets {
    /// The secrets of `bundle`'s children.
    pub(crate) fn new(bundle: &Bundle) -> ChildSecrets {
        let child_secrets = ChildSecrets::default();
        child_secrets.replace(bundle);
        child_secrets
    }

    /// Switches to the children of `bundle` (a reload): processes started
    /// from now on get these.
    pub(crate) fn replace(&self, bundle: &Bundle) {
        let by_child = ByChild {
            agents: bundle
                .agents()
                .map(|agent| (agent.name().to_string(), for_agent(bundle, agent)))
                .collect(),
            connections: bundle
                .connections()
                .map(|connection| {
                    let names = connection.env_references();
                    let secrets = bundle.secret_values(names.iter().map(String::as_str));
                    (connection.name().to_string(), secrets)
                })
                .collect(),
        };
        // A poisoned lock only means a reload panicked mid-write; the map
        // is replaced whole, so the data in it is still consistent.
        *self
            .by_child
            .write()
            .unwrap_or_else(|poison| poison.into_inner()) = by_child;
    }

    /// What the child `request` names is handed; nothing for a name the
    /// bundle does not define.
    pub(crate) fn for_request(&self, request: &SpawnRequest) -> Secrets {
        let by_child = self
            .by_child
            .read()
            .unwrap_or_else(|poison| poison.into_inner());
        let found = match request {
            SpawnRequest::Agent { key, .. } => by_child.agents.get(&key.agent_name),
            SpawnRequest::Connector { connection } => by_child.connections.get(connection),
        };
        found.cloned().unwrap_or_default()
    }

    /// The spawner's view of it.
    pub(crate) fn spawner_view(&self) -> SecretsFor {
        let child_secrets = self.clone();
        Arc::new(move |request: &SpawnRequest| child_secrets.for_request(request))
    }
}

/// One agent's secrets: the variables its Model, Extensions and their
/// configs read, its own Model provider's default key variable, the OTLP
/// header variables (every agent exports spans) and the token variables
/// of the built-in bot tools it uses (they fall back to a Connection's
/// token, read from the handshake).
fn for_agent(bundle: &Bundle, agent: AgentView<'_>) -> Secrets {
    let references = agent.env_references();
    let provider_key = goondan_model::default_key_variable(&agent.model().spec.provider);
    let tool_variables = agent.tools().flat_map(|tool| {
        let variables: &[&str] = match tool.spec.entry.as_str() {
            "builtin:telegram" => &TELEGRAM_VARIABLES,
            "builtin:slack" => &SLACK_VARIABLES,
            _ => &[],
        };
        variables.iter().copied()
    });
    bundle.secret_values(
        references
            .iter()
            .map(String::as_str)
            .chain(provider_key)
            .chain(goondan_telemetry::OTEL_SECRET_VARIABLES.iter().copied())
            .chain(tool_variables),
    )
}

const TELEGRAM_VARIABLES: [&str; 5] = {
    use goondan_base::tools::telegram::{API_BASE_URL_ENV, TOKEN_ENV};
    [
        API_BASE_URL_ENV,
        TOKEN_ENV[0],
        TOKEN_ENV[1],
        TOKEN_ENV[2],
        TOKEN_ENV[3],
    ]
};

const SLACK_VARIABLES: [&str; 4] = {
    use goondan_base::tools::slack::{API_BASE_URL_ENV, TOKEN_ENV};
    [API_BASE_URL_ENV, TOKEN_ENV[0], TOKEN_ENV[1], TOKEN_ENV[2]]
};

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
        let child_secrets = ChildSecrets::new(&bundle);
        let secrets = child_secrets.for_request(&SpawnRequest::Agent {
            key: goondan_ipc::RoutingKey::new("solo", "default"),
            workdir: None,
        });
        let withheld = withheld(&bundle);
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

    /// Two agents with Models of different providers, one using the
    /// built-in `telegram` tool, and a Connection reading the bot token.
    const TWO_AGENTS: &str = "apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: model-a
spec:
  provider: openai
  model: gpt-x
  apiKey:
    valueFrom:
      env: KEY_A
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: model-b
spec:
  provider: anthropic
  model: claude-x
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: a
spec:
  modelConfig:
    modelRef: Model/model-a
  tools:
    - ref: Tool/telegram
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: b
spec:
  modelConfig:
    modelRef: Model/model-b
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/a
  agents:
    - ref: Agent/a
    - ref: Agent/b
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: tg
spec:
  connectorRef: Connector/telegram
  secrets:
    TELEGRAM_BOT_TOKEN:
      valueFrom:
        env: TELEGRAM_BOT_TOKEN
";

    fn agent(name: &str) -> SpawnRequest {
        SpawnRequest::Agent {
            key: goondan_ipc::RoutingKey::new(name, "default"),
            workdir: None,
        }
    }

    fn handed(child_secrets: &ChildSecrets, request: &SpawnRequest) -> Vec<(String, String)> {
        child_secrets
            .for_request(request)
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    /// Issue 35: each child is handed only its own resources' secrets;
    /// every secret name stays withheld from every child.
    #[test]
    fn each_child_is_handed_only_the_secrets_its_own_resources_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("goondan.yaml"), TWO_AGENTS).unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "KEY_A=sk-a\nOPENAI_API_KEY=sk-openai\nANTHROPIC_API_KEY=sk-ant\n\
             TELEGRAM_BOT_TOKEN=123:bot\nOTEL_EXPORTER_OTLP_HEADERS=x-key=otel\n",
        )
        .unwrap();
        let options = LoadOptions {
            inherit_process_env: false,
            ..LoadOptions::default()
        };
        let outcome = load_bundle(dir.path(), &options).unwrap();
        let bundle = outcome
            .bundle
            .unwrap_or_else(|| panic!("{:#?}", outcome.diagnostics));
        let child_secrets = ChildSecrets::new(&bundle);
        let pairs = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect()
        };
        // Sorted by name, as `Secrets` keeps them.
        assert_eq!(
            handed(&child_secrets, &agent("a")),
            pairs(&[
                ("KEY_A", "sk-a"),
                ("OPENAI_API_KEY", "sk-openai"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-key=otel"),
                ("TELEGRAM_BOT_TOKEN", "123:bot"),
            ])
        );
        assert_eq!(
            handed(&child_secrets, &agent("b")),
            pairs(&[
                ("ANTHROPIC_API_KEY", "sk-ant"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-key=otel"),
            ])
        );
        let connection = SpawnRequest::Connector {
            connection: "tg".into(),
        };
        assert_eq!(
            handed(&child_secrets, &connection),
            pairs(&[("TELEGRAM_BOT_TOKEN", "123:bot")])
        );
        assert!(handed(&child_secrets, &agent("unknown")).is_empty());
        let withheld = withheld(&bundle);
        for name in [
            "KEY_A",
            "TELEGRAM_BOT_TOKEN",
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
        ] {
            assert!(withheld.iter().any(|w| w == name), "{name}: {withheld:?}");
        }

        // A reload replaces the choice: agent b now reads KEY_A too.
        let reloaded = TWO_AGENTS.replacen(
            "  model: claude-x\n",
            "  model: claude-x\n  apiKey:\n    valueFrom:\n      env: KEY_A\n",
            1,
        );
        std::fs::write(dir.path().join("goondan.yaml"), reloaded).unwrap();
        let bundle = load_bundle(dir.path(), &options).unwrap().bundle.unwrap();
        child_secrets.replace(&bundle);
        assert!(handed(&child_secrets, &agent("b")).contains(&("KEY_A".into(), "sk-a".into())));
    }
}
