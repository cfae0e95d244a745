//! The scripted provider: a two-agent delegation, a tool call, the
//! no-match error and rules-file errors.

use crate::support::*;
use goondan_model::{build, FinishReason, ModelConfig, ModelParams, ModelRequest, NoStream};
use goondan_types::{ContentPart, ModelMessage, ToolResultOutput};
use serde_json::json;

/// The delegation example of the crate README.
pub const DELEGATION_RULES: &str = r#"
rules:
  - name: coordinator delegates research
    agent: coordinator
    when:
      user: { regex: "(?i)research (.+)" }
    reply:
      text: Asking the researcher.
      toolCalls:
        - name: agents__request
          args:
            target: researcher
            input: "Find facts about {{1}}"
  - name: coordinator quotes the researcher
    agent: coordinator
    when:
      toolResult: { toolName: agents__request }
    reply:
      text: "The researcher says: {{input.response}}"
  - name: researcher answers
    agent: researcher
    when:
      user: Find facts about
    reply:
      text: Rust 1.0 shipped in May 2015.
  - name: anyone lists files
    when:
      user: { contains: list files }
    reply:
      toolCalls:
        - name: bash__exec
          args: { command: ls -la }
"#;

pub fn scripted_config(dir: &std::path::Path, agent: &str) -> ModelConfig {
    let mut config = ModelConfig::new("fake", "scripted", "scripted-1", dir);
    config.agent = Some(agent.to_string());
    config
}

pub fn request(messages: Vec<ModelMessage>) -> ModelRequest {
    ModelRequest {
        model: "scripted-1".into(),
        messages,
        tools: vec![],
        params: ModelParams::default(),
    }
}

#[tokio::test]
async fn two_agents_show_delegation() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "scripted-rules.yaml", DELEGATION_RULES);
    let coordinator = build(&scripted_config(dir.path(), "coordinator"), &no_env()).unwrap();
    let researcher = build(&scripted_config(dir.path(), "researcher"), &no_env()).unwrap();

    let user = ModelMessage::user("please research Rust history");
    let deltas = Deltas::default();
    let first = coordinator
        .generate(request(vec![user.clone()]), &deltas)
        .await
        .unwrap();
    assert_eq!(deltas.all(), vec!["Asking the researcher."]);
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);
    assert_eq!(
        first.content,
        vec![
            ContentPart::text("Asking the researcher."),
            ContentPart::tool_call(
                "call_1_1",
                "agents__request",
                json!({"target": "researcher", "input": "Find facts about Rust history"})
            ),
        ]
    );

    let delegated = first.tool_calls()[0].args["input"]
        .as_str()
        .unwrap()
        .to_string();
    let research = researcher
        .generate(request(vec![ModelMessage::user(delegated)]), &NoStream)
        .await
        .unwrap();
    assert_eq!(research.text(), "Rust 1.0 shipped in May 2015.");
    assert_eq!(research.finish_reason, FinishReason::Stop);

    let result =
        ToolResultOutput::Json(json!({"target": "researcher", "response": research.text()}));
    let second = coordinator
        .generate(
            request(vec![
                user,
                ModelMessage::assistant(first.content.clone()),
                ModelMessage::tool(vec![ContentPart::tool_result(
                    "call_1_1",
                    "agents__request",
                    result,
                )]),
            ]),
            &NoStream,
        )
        .await
        .unwrap();
    assert_eq!(
        second.text(),
        "The researcher says: Rust 1.0 shipped in May 2015."
    );
}

#[tokio::test]
async fn rules_without_agent_apply_to_everyone_and_reply_with_tool_calls() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "scripted-rules.yaml", DELEGATION_RULES);
    let model = build(&scripted_config(dir.path(), "researcher"), &no_env()).unwrap();
    let answer = model
        .generate(
            request(vec![ModelMessage::user("list files here")]),
            &NoStream,
        )
        .await
        .unwrap();
    assert_eq!(answer.text(), "");
    assert_eq!(answer.tool_calls()[0].name, "bash__exec");
    assert_eq!(answer.tool_calls()[0].args["command"], "ls -la");
}

#[tokio::test]
async fn no_matching_rule_names_the_file_and_the_input() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "rules/demo.yaml", DELEGATION_RULES);
    let mut config = scripted_config(dir.path(), "researcher");
    config
        .options
        .insert("rulesFile".into(), json!("rules/demo.yaml"));
    let model = build(&config, &no_env()).unwrap();
    // The coordinator's delegation rule exists but belongs to another agent.
    let error = model
        .generate(
            request(vec![ModelMessage::user("research tides")]),
            &NoStream,
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "E_MODEL_SCRIPT_NO_MATCH");
    let text = error.to_string();
    assert!(text.contains("rules/demo.yaml"), "{text}");
    assert!(
        text.contains("the last user text \"research tides\""),
        "{text}"
    );
    assert!(text.contains("agent researcher"), "{text}");
    assert!(text.contains("4 rules tried"), "{text}");
    assert!(error.suggestion().is_some());
}

#[tokio::test]
async fn bad_rules_files_fail_the_build_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("rules:\n  - reply: { text: ok }\n  - when: { user: { regex: \"(\" } }\n    reply: { text: x }\n", "rules[1]: when.user.regex is invalid"),
        ("rules:\n  - reply: { txt: ok }\n", "rules[0]: unknown field `txt`"),
        ("rules:\n  - when: { user: hi }\n    reply: {}\n", "rules[0]: reply needs `text`, `toolCalls` or both"),
        ("rules: [\n", "line"),
    ];
    for (text, expected) in cases {
        write_file(dir.path(), "scripted-rules.yaml", text);
        let error = match build(&scripted_config(dir.path(), "a"), &no_env()) {
            Err(error) => error,
            Ok(_) => panic!("{text:?} should not load"),
        };
        assert_eq!(error.code(), "E_MODEL_SCRIPT_RULES");
        assert!(error.to_string().contains(expected), "{error}");
        assert!(error.to_string().contains("scripted-rules.yaml"), "{error}");
    }
    let missing = dir.path().join("nowhere");
    let error = match build(&scripted_config(&missing, "a"), &no_env()) {
        Err(error) => error,
        Ok(_) => panic!("a missing rules file should not load"),
    };
    assert_eq!(error.code(), "E_MODEL_SCRIPT_RULES");
    assert!(error.to_string().contains("cannot read it"), "{error}");
}

/// Builds a scripted model from `text` and returns the build error.
fn rules_error(text: &str) -> goondan_model::ModelError {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "scripted-rules.yaml", text);
    match build(&scripted_config(dir.path(), "a"), &no_env()) {
        Err(error) => error,
        Ok(_) => panic!("the rules file should not load"),
    }
}

#[test]
fn a_billion_laughs_rules_file_is_refused_quickly_with_a_code() {
    // Nine levels of ten aliases each: 10^9 strings if expanded.
    let mut text = String::from("lol0: &lol0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..10 {
        let items = vec![format!("*lol{}", level - 1); 10].join(", ");
        text.push_str(&format!("lol{level}: &lol{level} [{items}]\n"));
    }
    text.push_str("rules:\n  - reply: { text: ok }\n");
    let started = std::time::Instant::now();
    let error = rules_error(&text);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(error.code(), "E_MODEL_SCRIPT_RULES");
    let message = error.to_string();
    assert!(message.contains("scripted-rules.yaml"), "{message}");
    assert!(message.contains("alias expansion exceeds"), "{message}");
    assert!(error.suggestion().unwrap().contains("fewer aliases"));
}

#[test]
fn a_rules_file_over_one_mebibyte_is_refused() {
    let padding = "x".repeat(1024 * 1024);
    let error = rules_error(&format!("rules:\n  - reply: {{ text: '{padding}' }}\n"));
    assert_eq!(error.code(), "E_MODEL_SCRIPT_RULES");
    assert!(
        error.to_string().contains("may not exceed 1048576 bytes"),
        "{error}"
    );
}

#[test]
fn a_rules_file_nested_too_deep_is_refused() {
    let depth = 1000;
    let error = rules_error(&format!(
        "rules:\n  - reply: {{ text: ok }}\n    when: {}{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    ));
    assert_eq!(error.code(), "E_MODEL_SCRIPT_RULES");
    assert!(error.to_string().contains("nesting"), "{error}");
}
