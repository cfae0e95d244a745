//! The typed view of a loaded bundle, exercised on the shipped examples
//! and on small bundles: resolved refs, base package lookups, defaults,
//! env precedence and the ValueSource resolver.

use super::{load, workspace_root, VALID};
use goondan_config::{load_bundle, Code, LoadOptions, BASE_PACKAGE};
use std::time::Duration;

#[test]
fn examples_validate_clean() {
    for example in ["single-agent", "two-agents"] {
        let outcome = load(&workspace_root().join("examples").join(example));
        assert!(
            outcome.diagnostics.is_empty(),
            "{example}: {:#?}",
            outcome.diagnostics
        );
        assert!(outcome.bundle.is_some(), "{example}");
    }
}

#[test]
fn two_agents_example_resolves_refs_prompts_and_connections() {
    let bundle = load(&workspace_root().join("examples/two-agents"))
        .bundle
        .unwrap();
    assert_eq!(bundle.package().unwrap().name(), "two-agents");
    let swarm = bundle.default_swarm().unwrap();
    assert_eq!(swarm.instance_key(), "default");
    assert_eq!(swarm.max_steps_per_turn(), 12);
    assert_eq!(swarm.shutdown_grace(), Duration::from_secs(300));
    assert_eq!(swarm.entry_agent().name(), "coordinator");
    let names: Vec<_> = swarm.agents().map(|agent| agent.name()).collect();
    assert_eq!(names, ["coordinator", "researcher"]);

    let coordinator = bundle.agent("coordinator").unwrap();
    assert_eq!(coordinator.model().spec.provider, "scripted");
    let tool = coordinator.tools().next().unwrap();
    assert_eq!(
        (tool.name(), tool.origin.package.as_deref()),
        ("agents", Some(BASE_PACKAGE))
    );
    assert_eq!(tool.spec.entry, "builtin:agents");
    assert_eq!(tool.spec.error_message_limit_or_default(), 1500);
    let extensions: Vec<_> = coordinator.extensions().map(|e| e.name()).collect();
    assert_eq!(extensions, ["context-message", "message-window"]);
    assert_eq!(
        coordinator.extensions().next().unwrap().spec.config["includeAgentPrompt"],
        serde_json::json!(true)
    );
    assert!(coordinator
        .system_prompt()
        .unwrap()
        .contains("agents__request"));

    let connection = bundle.connections().next().unwrap();
    assert_eq!(connection.connector().name(), "cli");
    assert_eq!(connection.swarm().name(), "default");
    let (rule, agent) = connection.rules().next().unwrap();
    assert_eq!(
        rule.matcher.as_ref().unwrap().event.as_deref(),
        Some("stdin_message")
    );
    assert_eq!(agent.name(), "coordinator");
    // Only what the bundle uses is materialized from @goondan/base.
    assert_eq!(bundle.tools().len(), 2);
    assert_eq!(bundle.connectors().len(), 1);
}

#[test]
fn package_scoped_ref_picks_the_builtin_over_a_local_namesake() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID.replace(
        "    modelRef: Model/main\n",
        "    modelRef: Model/main\n  tools:\n    - kind: Tool\n      name: bash\n      package: \"@goondan/base\"\n    - Tool/wait\n",
    ) + "---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: bash
spec:
  entry: builtin:bash
  errorMessageLimit: 50
  exports:
    - name: exec
      description: Local flavour.
      parameters: { type: object }
";
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let outcome = load(dir.path());
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    let bundle = outcome.bundle.unwrap();
    let tools: Vec<_> = bundle.agent("a").unwrap().tools().collect();
    assert_eq!(tools[0].origin.package.as_deref(), Some(BASE_PACKAGE));
    assert_eq!(tools[0].spec.error_message_limit_or_default(), 1200);
    assert_eq!(tools[1].name(), "wait");
    assert_eq!(bundle.agent("a").unwrap().system_prompt(), None);
    let swarm = bundle.swarm("default").unwrap();
    assert_eq!(swarm.max_steps_per_turn(), 32, "default maxStepsPerTurn");
    assert_eq!(swarm.max_live_processes(), 256, "default maxLive");
    assert_eq!(
        swarm.idle_passivation(),
        Some(std::time::Duration::from_secs(900)),
        "default idleSeconds"
    );
}

/// `policy.processes` (issue 16 #14): read like `policy.queues`, and
/// `idleSeconds: 0` turns idle passivation off.
#[test]
fn swarm_process_policy_is_read_with_zero_idle_seconds_meaning_never() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("goondan.yaml"),
        "apiVersion: goondan.ai/v1\nkind: Model\nmetadata:\n  name: main\nspec:\n  provider: scripted\n  model: demo\n---\napiVersion: goondan.ai/v1\nkind: Agent\nmetadata:\n  name: a\nspec:\n  modelConfig:\n    modelRef: Model/main\n---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata:\n  name: default\nspec:\n  entryAgent: Agent/a\n  agents:\n    - ref: Agent/a\n  policy:\n    processes:\n      maxLive: 3\n      idleSeconds: 0\n",
    )
    .unwrap();
    let outcome = load(dir.path());
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    let bundle = outcome.bundle.unwrap();
    let swarm = bundle.swarm("default").unwrap();
    assert_eq!(swarm.max_live_processes(), 3);
    assert_eq!(swarm.idle_passivation(), None);
}

#[test]
fn split_files_load_deterministically_with_a_single_file_mode() {
    let dir = tempfile::tempdir().unwrap();
    let documents: Vec<&str> = VALID.split("---\n").collect();
    std::fs::create_dir_all(dir.path().join("nested")).unwrap();
    std::fs::write(dir.path().join("goondan.yaml"), documents[2]).unwrap();
    std::fs::write(dir.path().join("models.yml"), documents[0]).unwrap();
    std::fs::write(dir.path().join("nested/agents.yaml"), documents[1]).unwrap();
    std::fs::write(dir.path().join("docker-compose.yaml"), "services: [broken").unwrap();
    let outcome = load(dir.path());
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    let bundle = outcome.bundle.unwrap();
    assert_eq!(
        bundle.agent("a").unwrap().resource().origin.file,
        "nested/agents.yaml"
    );
    // A single file is loaded alone: the Swarm's agent is then missing.
    let single = load(&dir.path().join("goondan.yaml"));
    assert_eq!(single.diagnostics[0].code, "E_CONFIG_REF_NOT_FOUND");
}

#[test]
fn value_from_env_inside_extension_configs_counts_as_a_secret_reference() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID.replace(
        "    modelRef: Model/main\n",
        "    modelRef: Model/main\n  extensions:\n    - ref: {kind: Extension, name: mcp, package: \"@goondan/base\"}\n      config:\n        servers:\n          web:\n            url: http://127.0.0.1:1/mcp\n            headers:\n              Authorization: {valueFrom: {env: WEB_TOKEN}}\n          fs:\n            command: x\n            env:\n              A: {valueFrom: {env: FS_KEY}}\n",
    );
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let outcome = load(dir.path());
    let bundle = outcome
        .bundle
        .unwrap_or_else(|| panic!("{:#?}", outcome.diagnostics));
    assert_eq!(
        bundle.env_references().into_iter().collect::<Vec<_>>(),
        ["FS_KEY", "WEB_TOKEN"]
    );
}

#[test]
fn env_files_follow_cli_precedence_and_feed_the_resolver() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID.replace(
        "  model: demo\n",
        "  model: demo\n  apiKey:\n    valueFrom:\n      env: DEMO_KEY\n",
    );
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    std::fs::write(dir.path().join(".env"), "DEMO_KEY=from-env\n").unwrap();
    std::fs::write(dir.path().join(".env.local"), "DEMO_KEY=from-local\n").unwrap();
    let custom = dir.path().join("ci.env");
    std::fs::write(&custom, "DEMO_KEY=from-flag\n").unwrap();
    let options = LoadOptions {
        env_file: Some(custom),
        inherit_process_env: false,
        ..LoadOptions::default()
    };
    let bundle = load_bundle(dir.path(), &options).unwrap().bundle.unwrap();
    let api_key = bundle.model("main").unwrap().spec.api_key.clone().unwrap();
    assert_eq!(bundle.resolve(&api_key).unwrap(), "from-flag");
    assert_eq!(
        bundle.env_references().into_iter().collect::<Vec<_>>(),
        ["DEMO_KEY"]
    );
    let secrets = bundle.secrets(&["UNSET_DEFAULT_KEY"]);
    assert_eq!(
        secrets.iter().collect::<Vec<_>>(),
        [("DEMO_KEY", "from-flag")]
    );
    let without_flag = load(dir.path()).bundle.unwrap();
    assert_eq!(without_flag.resolve(&api_key).unwrap(), "from-local");

    std::fs::remove_file(dir.path().join(".env")).unwrap();
    std::fs::remove_file(dir.path().join(".env.local")).unwrap();
    let outcome = load(dir.path());
    assert_eq!(outcome.warnings().count(), 1);
    let bundle = outcome.bundle.expect("a missing variable only warns");
    let error = bundle.resolve(&api_key).unwrap_err();
    assert_eq!(error.code(), Code::EnvMissing);
    assert!(error.suggestion().unwrap().contains("DEMO_KEY"));
}

#[test]
fn errors_are_collected_in_one_pass_and_nothing_is_partially_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID
        .replace("provider: scripted", "provider: anthropc")
        .replace("entryAgent: Agent/a", "entryAgent: Agent/b")
        + "---\napiVersion: goondan.ai/v1\nkind: Extension\nmetadata:\n  name: e\nspec:\n  entry: /abs/path.js\n";
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let outcome = load(dir.path());
    assert!(outcome.bundle.is_none());
    let codes = super::codes(&outcome);
    assert_eq!(
        codes,
        [
            "E_CONFIG_UNSUPPORTED_PROVIDER",
            "E_CONFIG_REF_NOT_FOUND",
            "E_CONFIG_PATH_ESCAPE"
        ],
        "ordered by line: {:#?}",
        outcome.diagnostics
    );
    let provider = &outcome.diagnostics[0];
    assert_eq!(
        provider.suggestion.as_deref(),
        Some("did you mean `anthropic`?")
    );
    assert_eq!((provider.line, provider.column), (Some(6), Some(13)));
    assert_eq!(provider.resource.as_deref(), Some("Model/main"));
    assert!(provider
        .help_url
        .as_deref()
        .unwrap()
        .ends_with("E_CONFIG_UNSUPPORTED_PROVIDER"));
}

/// `Agent.spec.extensions[]` may carry `config` (the original's samples
/// do): it is merged over the Extension's own `spec.config` for that
/// agent, the agent's top-level keys winning; a plain ref keeps the
/// Extension's config; an entry with other fields is a schema error.
#[test]
fn an_agents_extension_config_is_merged_over_the_extensions_own() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID.replace(
        "    modelRef: Model/main\n",
        "    modelRef: Model/main\n  extensions:\n    - ref:\n        kind: Extension\n        name: guard\n      config:\n        requiredTools: [agents__send]\n        extra: 1\n    - ref: Extension/guard\n    - ref: Extension/message-window\n      config: { maxMessages: 4 }\n",
    ) + "---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: guard
spec:
  entry: builtin:required-tools-guard
  config:
    requiredTools: [wait__seconds]
    errorMessage: keep me
";
    std::fs::write(dir.path().join("goondan.yaml"), &text).unwrap();
    let outcome = load(dir.path());
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    let bundle = outcome.bundle.unwrap();
    let agent = bundle.agent("a").unwrap();
    let configs: Vec<_> = agent.extension_configs().collect();
    assert_eq!(
        serde_json::Value::Object(configs[0].clone()),
        serde_json::json!({"requiredTools": ["agents__send"], "errorMessage": "keep me", "extra": 1})
    );
    assert_eq!(
        serde_json::Value::Object(configs[1].clone()),
        serde_json::json!({"requiredTools": ["wait__seconds"], "errorMessage": "keep me"})
    );
    assert_eq!(configs[2]["maxMessages"], serde_json::json!(4));

    let bad = text.replace(
        "      config: { maxMessages: 4 }\n",
        "      confg: { maxMessages: 4 }\n",
    );
    std::fs::write(dir.path().join("goondan.yaml"), bad).unwrap();
    let outcome = load(dir.path());
    let error = outcome
        .diagnostics
        .iter()
        .find(|d| d.code == Code::Schema.as_str())
        .unwrap_or_else(|| panic!("{:#?}", outcome.diagnostics));
    assert!(
        error.message.contains("optionally with a `config` object"),
        "{}",
        error.message
    );
}

/// `Agent.spec.requiredTools` (the original's samples use it): each name
/// must be a tool the agent has; the names reach the agent's
/// `required-tools-guard`, which is appended when the agent lists none.
#[test]
fn required_tools_reach_the_guard_which_is_added_when_missing() {
    let dir = tempfile::tempdir().unwrap();
    let with_tools = |extra: &str| {
        VALID.replace(
            "    modelRef: Model/main\n",
            &format!("    modelRef: Model/main\n  tools:\n    - ref: Tool/wait\n    - ref: Tool/agents\n{extra}"),
        )
    };
    let load_agent = |text: String| {
        std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
        load(dir.path())
    };

    let outcome = load_agent(with_tools("  requiredTools: [wait__seconds]\n"));
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    let bundle = outcome.bundle.unwrap();
    let agent = bundle.agent("a").unwrap();
    let names: Vec<_> = agent.extensions().map(|e| e.name()).collect();
    assert_eq!(names, ["required-tools-guard"]);
    let configs: Vec<_> = agent.extension_configs().collect();
    assert_eq!(
        configs[0]["requiredTools"],
        serde_json::json!(["wait__seconds"])
    );

    // A listed guard keeps its place and its own names come first.
    let outcome = load_agent(with_tools(
        "  requiredTools: [agents__send, wait__seconds]\n  extensions:\n    - ref: Extension/required-tools-guard\n      config: { requiredTools: [wait__seconds], errorMessage: call one }\n    - ref: Extension/message-window\n",
    ));
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    let bundle = outcome.bundle.unwrap();
    let agent = bundle.agent("a").unwrap();
    let names: Vec<_> = agent.extensions().map(|e| e.name()).collect();
    assert_eq!(names, ["required-tools-guard", "message-window"]);
    let configs: Vec<_> = agent.extension_configs().collect();
    assert_eq!(
        serde_json::Value::Object(configs[0].clone()),
        serde_json::json!({"requiredTools": ["wait__seconds", "agents__send"], "errorMessage": "call one"})
    );

    let outcome = load_agent(with_tools("  requiredTools: [wait__second]\n"));
    let error = outcome
        .diagnostics
        .iter()
        .find(|d| d.code == "E_CONFIG_REQUIRED_TOOL_MISSING")
        .unwrap_or_else(|| panic!("{:#?}", outcome.diagnostics));
    assert_eq!(error.field.as_deref(), Some("spec.requiredTools[0]"));
    assert_eq!(
        error.suggestion.as_deref(),
        Some("did you mean `wait__seconds`?")
    );
}

/// `valueFrom.secretRef` reads the variables the original reads
/// (`GOONDAN_SECRET_<NAME>_<KEY>`, ...); they count as secrets (handed
/// over the handshake, withheld from children's environment), and an
/// unset one is a warning at validation and an error when needed.
#[test]
fn secret_refs_read_their_variables_and_count_as_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let text = VALID.replace(
        "  model: demo\n",
        "  model: demo\n  apiKey:\n    valueFrom:\n      secretRef:\n        ref: Secret/demo-keys\n        key: api_key\n",
    );
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let options = LoadOptions {
        inherit_process_env: false,
        ..LoadOptions::default()
    };
    let outcome = load_bundle(dir.path(), &options).unwrap();
    let warning = outcome
        .diagnostics
        .iter()
        .find(|d| d.code == "W_CONFIG_ENV_MISSING")
        .unwrap_or_else(|| panic!("{:#?}", outcome.diagnostics));
    assert!(
        warning
            .suggestion
            .as_deref()
            .unwrap()
            .contains("GOONDAN_SECRET_DEMO_KEYS_API_KEY"),
        "{warning:?}"
    );
    let bundle = outcome.bundle.unwrap();
    let api_key = bundle.model("main").unwrap().spec.api_key.clone().unwrap();
    let error = bundle.resolve(&api_key).unwrap_err();
    assert_eq!(error.code(), Code::SecretUnavailable);

    std::fs::write(dir.path().join(".env"), "SECRET_DEMO_KEYS=sk-from-secret\n").unwrap();
    let bundle = load_bundle(dir.path(), &options).unwrap().bundle.unwrap();
    assert_eq!(bundle.resolve(&api_key).unwrap(), "sk-from-secret");
    assert!(bundle
        .env_references()
        .contains("GOONDAN_SECRET_DEMO_KEYS_API_KEY"));
    assert_eq!(
        bundle.secrets(&[]).iter().collect::<Vec<_>>(),
        [("SECRET_DEMO_KEYS", "sk-from-secret")]
    );
}

#[test]
fn script_tools_and_extensions_that_a_plugin_host_can_run_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tools")).unwrap();
    for file in ["calc.mjs", "calc.py", "weather.ts", "onion.js"] {
        std::fs::write(dir.path().join("tools").join(file), "").unwrap();
    }
    let executable = dir.path().join("tools/calc");
    std::fs::write(&executable, "#!/bin/sh\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&executable, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut text = VALID.to_string();
    for (n, entry) in ["calc.mjs", "calc.py", "weather.ts", "calc"]
        .iter()
        .enumerate()
    {
        text += &format!(
            "---\napiVersion: goondan.ai/v1\nkind: Tool\nmetadata:\n  name: t{n}\nspec:\n  entry: ./tools/{entry}\n  exports:\n    - name: run\n      description: Runs.\n      parameters:\n        type: object\n"
        );
    }
    text += "---\napiVersion: goondan.ai/v1\nkind: Extension\nmetadata:\n  name: onion\nspec:\n  entry: ./tools/onion.js\n";
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let outcome = load(dir.path());
    assert_eq!(
        super::codes(&outcome),
        Vec::<String>::new(),
        "{:#?}",
        outcome.diagnostics
    );
    assert!(outcome.bundle.is_some());
}

/// Issue 35: each child is handed only what its own resources read. An
/// agent's references are its Model's key and its Extensions' config
/// (the agent's own config for one included); a Connection's are its
/// `config` and `secrets`. No agent's set names another agent's key.
#[test]
fn each_agent_and_connection_reads_only_its_own_variables() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ext.js"), "").unwrap();
    let text = "apiVersion: goondan.ai/v1
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
  apiKey:
    valueFrom:
      env: KEY_B
---
apiVersion: goondan.ai/v1
kind: Extension
metadata:
  name: ext
spec:
  entry: ext.js
  config:
    token:
      valueFrom:
        env: EXT_TOKEN
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: a
spec:
  modelConfig:
    modelRef: Model/model-a
  extensions:
    - ref: Extension/ext
      config:
        header:
          valueFrom:
            env: A_HEADER
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
  config:
    TELEGRAM_API_BASE_URL:
      valueFrom:
        env: TG_BASE
  secrets:
    TELEGRAM_BOT_TOKEN:
      valueFrom:
        env: TG_TOKEN
";
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    std::fs::write(dir.path().join(".env"), "KEY_A=sk-a\nKEY_B=sk-b\n").unwrap();
    let options = LoadOptions {
        inherit_process_env: false,
        ..LoadOptions::default()
    };
    let outcome = load_bundle(dir.path(), &options).unwrap();
    let bundle = outcome
        .bundle
        .unwrap_or_else(|| panic!("{:#?}", outcome.diagnostics));
    let names = |set: std::collections::BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(bundle.agent("a").unwrap().env_references()),
        ["A_HEADER", "EXT_TOKEN", "KEY_A"]
    );
    assert_eq!(
        names(bundle.agent("b").unwrap().env_references()),
        ["KEY_B"]
    );
    let connection = bundle.connections().find(|c| c.name() == "tg").unwrap();
    assert_eq!(names(connection.env_references()), ["TG_BASE", "TG_TOKEN"]);
    // The whole bundle's set is their union: what every child is denied.
    assert_eq!(
        names(bundle.env_references()),
        [
            "A_HEADER",
            "EXT_TOKEN",
            "KEY_A",
            "KEY_B",
            "TG_BASE",
            "TG_TOKEN"
        ]
    );
    // Only set variables have values; unset ones are left out.
    assert_eq!(
        bundle
            .secret_values(["KEY_A", "EXT_TOKEN"])
            .iter()
            .collect::<Vec<_>>(),
        [("KEY_A", "sk-a")]
    );
}

#[test]
fn chat_approvals_read_numeric_and_text_ids_of_telegram_and_slack() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "{VALID}---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: tg
spec:
  connectorRef: Connector/telegram-polling
  approvals:
    chat: -1001234567890
    deciders: [42, \"77\"]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: team
spec:
  connectorRef: Connector/slack
  approvals:
    channel: C0123
"
    );
    std::fs::write(dir.path().join("goondan.yaml"), text).unwrap();
    let outcome = load(dir.path());
    assert!(outcome.diagnostics.is_empty(), "{:#?}", outcome.diagnostics);
    let bundle = outcome.bundle.unwrap();
    let approvals: Vec<_> = bundle
        .connections()
        .map(|connection| connection.resource().spec.approvals.clone().unwrap())
        .collect();
    assert_eq!(approvals[0].target().as_deref(), Some("-1001234567890"));
    assert_eq!(approvals[0].decider_ids(), ["42", "77"]);
    assert_eq!(approvals[1].target().as_deref(), Some("C0123"));
    assert!(approvals[1].decider_ids().is_empty());
}
