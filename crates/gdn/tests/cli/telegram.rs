//! End to end: a Telegram bot. The ConnectorProcess long-polls a mock Bot
//! API on 127.0.0.1; an update becomes a Turn for `telegram:<chat>`; the
//! agent answers through `telegram__send` with the operator's token, which
//! reaches the agent only through its spawn handshake; the mock records
//! the answer. A 500 and a 429 from the Bot API are retried without a
//! second event.

use crate::bot_api::{start_bot_api, TELEGRAM_TOKEN as TOKEN};
use crate::mock_llm::{ChatRequest, MockLlm, Reply};
use crate::swarm::{fixture, gdn_command, wait_until, Resident, Swarm};
use serde_json::{json, Value};
use std::process::Stdio;

fn update(id: i64, chat: i64, text: &str) -> Value {
    json!({
        "update_id": id,
        "message": {
            "message_id": id,
            "date": 1_700_000_000,
            "chat": {"id": chat, "type": "private"},
            "from": {"id": 7, "is_bot": false, "first_name": "Ann"},
            "text": text,
        }
    })
}

/// The model: a user message from Telegram is answered with
/// `telegram__send` to its chat, then a short final text.
fn bot_model(request: &ChatRequest) -> Reply {
    if request.tool_result().is_some() {
        return Reply::text("sent");
    }
    Reply::tool(
        "telegram__send",
        json!({"chatId": "42", "text": format!("echo: {}", request.last_user_text())}),
    )
}

#[test]
fn an_update_becomes_a_turn_answered_through_telegram_send_despite_500_and_429() {
    let (base_url, api) = start_bot_api(vec![
        (
            500,
            json!({"ok": false, "error_code": 500, "description": "boom"}),
        ),
        (
            429,
            json!({"ok": false, "error_code": 429, "parameters": {"retry_after": 1}}),
        ),
        (
            200,
            json!({"ok": true, "result": [update(100, 42, "hello bot")]}),
        ),
        // Sent again below the offset: must not become a second event.
        (
            200,
            json!({"ok": true, "result": [update(100, 42, "hello bot")]}),
        ),
    ]);
    let mock = MockLlm::start(bot_model);
    let swarm = Swarm {
        bundle: fixture("telegram", &[("@ENDPOINT@", mock.endpoint())]),
        state: tempfile::tempdir().unwrap(),
        mock,
    };
    let log = std::fs::File::create(swarm.bundle.path().join("orchestrator.log")).unwrap();
    let child = gdn_command(swarm.bundle.path(), swarm.state.path(), &["run"])
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_API_BASE_URL", &base_url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let resident = Resident { child: Some(child) };

    let sent = wait_until("the agent to answer through sendMessage", || {
        api.lock()
            .unwrap()
            .calls
            .iter()
            .find(|(method, _)| method == "sendMessage")
            .map(|(_, body)| body.clone())
    });
    assert_eq!(sent["chat_id"], "42");
    assert_eq!(sent["text"], "echo: hello bot");
    let dir = wait_until("the telegram:42 instance", || {
        crate::swarm::find_instance(swarm.state.path(), "bot", "telegram:42")
    });
    // Let the redelivered update and a few more polls go by.
    wait_until("two polls past the update", || {
        let api = api.lock().unwrap();
        let polls = api
            .calls
            .iter()
            .filter(|(method, query)| method == "getUpdates" && query["offset"] == "101")
            .count();
        (polls >= 2).then_some(())
    });
    let asked = swarm
        .mock
        .requests()
        .iter()
        .filter(|request| request.tool_result().is_none())
        .count();
    assert_eq!(asked, 1, "one update, one Turn");
    let history = crate::swarm::conversation_of(&dir);
    let users = history
        .iter()
        .filter(|message| message["role"] == "user")
        .count();
    assert_eq!(users, 1, "{history:?}");
    assert_eq!(resident.terminate(), 0);

    // The token is in no log, conversation or state file.
    crate::secrets::assert_nowhere_below(TOKEN, &[swarm.state.path(), swarm.bundle.path()]);
}

/// A cron Connection fires on its schedule through the real ConnectorProcess,
/// each fire its own Turn.
#[test]
fn a_cron_connection_fires_turns_on_its_schedule() {
    let mock = MockLlm::start(|_| Reply::text("done"));
    let bundle = tempfile::tempdir().unwrap();
    std::fs::write(
        bundle.path().join("goondan.yaml"),
        format!(
            r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: mock-gpt
spec:
  provider: openai
  model: gpt-mock
  endpoint: "{}"
  options:
    maxRetries: 0
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: reporter
spec:
  modelConfig:
    modelRef: Model/mock-gpt
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/reporter
  agents:
    - ref: Agent/reporter
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: clock
spec:
  connectorRef: Connector/cron
  config:
    EVERY:
      value: 300ms
    TEXT:
      value: write the report
    INSTANCE_KEY:
      value: reports
"#,
            mock.endpoint()
        ),
    )
    .unwrap();
    let swarm = Swarm {
        bundle,
        state: tempfile::tempdir().unwrap(),
        mock,
    };
    let resident = swarm.start_resident();
    wait_until("three scheduled Turns", || {
        let fired = swarm
            .mock
            .requests()
            .iter()
            .filter(|request| request.last_user_text() == "write the report")
            .count();
        (fired >= 3).then_some(())
    });
    let dir = crate::swarm::find_instance(swarm.state.path(), "reporter", "reports").unwrap();
    let users = crate::swarm::conversation_of(&dir)
        .iter()
        .filter(|message| message["role"] == "user")
        .count();
    assert!(users >= 2, "the fires share the instance's conversation");
    assert_eq!(resident.terminate(), 0);
}

/// Issue 38: `.env` reaches a built-in tool as it reaches the connector
/// and the model provider. The bot token and the Bot API's address are
/// only in the bundle's `.env` (not in `gdn run`'s environment); the
/// `telegram` tool, run in the agent's process, must send to that address
/// with that token (docs/secrets.md, "What a child process receives").
#[test]
fn dotenv_reaches_the_telegram_tool_not_only_the_connector() {
    let (base_url, api) = start_bot_api(Vec::new());
    let mock = MockLlm::start(bot_model);
    let bundle = fixture("telegram", &[("@ENDPOINT@", mock.endpoint())]);
    std::fs::write(
        bundle.path().join(".env"),
        format!("TELEGRAM_BOT_TOKEN={TOKEN}\nTELEGRAM_API_BASE_URL={base_url}\n"),
    )
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut command = gdn_command(bundle.path(), state.path(), &["run", "--input", "hi"]);
    command
        .env_remove("TELEGRAM_BOT_TOKEN")
        .env_remove("TELEGRAM_API_BASE_URL")
        .stdin(Stdio::null());
    let output = crate::swarm::run_with_deadline(command);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let sent = crate::bot_api::calls_of(&api, "sendMessage");
    assert_eq!(sent.len(), 1, "{stderr}");
    assert_eq!(sent[0]["chat_id"], "42");
    assert_eq!(sent[0]["text"], "echo: hi");
    drop(mock);
}

/// tool.md §6.2: the catalog offers the export by its conforming name
/// (`telegram__set-chat-action`), and a model that calls it by the old
/// `telegram__setChatAction` still reaches the Bot API.
#[test]
fn must_offer_seed_export_names_and_still_run_a_call_by_the_old_name() {
    let (base_url, api) = start_bot_api(Vec::new());
    let mock = MockLlm::start(|request: &ChatRequest| match request.tool_result() {
        None => Reply::tool("telegram__setChatAction", json!({"chatId": "42"})),
        Some(_) => Reply::text("typing shown"),
    });
    let bundle = fixture("telegram", &[("@ENDPOINT@", mock.endpoint())]);
    let state = tempfile::tempdir().unwrap();
    let mut command = gdn_command(bundle.path(), state.path(), &["run", "--input", "hi"]);
    command
        .env("TELEGRAM_BOT_TOKEN", TOKEN)
        .env("TELEGRAM_API_BASE_URL", &base_url)
        .stdin(Stdio::null());
    let output = crate::swarm::run_with_deadline(command);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "typing shown\n");
    let actions = crate::bot_api::calls_of(&api, "sendChatAction");
    assert_eq!(actions.len(), 1, "{stderr}");
    assert_eq!(actions[0]["chat_id"], "42");
    assert_eq!(actions[0]["action"], "typing");
    let requests = mock.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["function"]["name"].as_str())
        .collect();
    assert!(
        offered.contains(&"telegram__set-chat-action"),
        "{offered:?}"
    );
    assert!(offered.contains(&"telegram__download-file"), "{offered:?}");
    assert!(
        !offered.iter().any(|name| name.contains("setChatAction")),
        "{offered:?}"
    );
    // The tool result answers the call by the name the model used.
    let second = &requests[1];
    let result: Value = serde_json::from_str(second.tool_result().unwrap()).unwrap();
    assert_eq!(result["ok"], true, "{result}");
}
