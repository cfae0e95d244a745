//! Issue 36, approvals decided in a chat: a `bash__exec` call gated by
//! the base `tool-approval` extension is posted by the Telegram or Slack
//! connector of a Connection with `spec.approvals` (real `gdn` processes,
//! a mock Bot API and a mock Slack Web API on 127.0.0.1), and a button
//! press decides it. The command runs exactly once and the Turn's answer
//! arrives; a press by someone not among the deciders, a forged callback
//! and a badly signed Slack post decide nothing, nor does a press carrying
//! the request's id on another message, a message nobody posted, no
//! message or another chat (issue 47), while the press on the posted
//! message still decides after a kill -9 of the connector; a request decided
//! elsewhere (its deadline) loses its buttons; a request asked while no
//! chat connector ran is posted once when one starts, and not again after
//! it restarts. A press is never an agent's input: every Connection here
//! routes its events to the agent, and the model is asked exactly twice.

use crate::approvals::{approvals, gated_swarm, runs};
use crate::bot_api::{calls_of, push_updates, start_bot_api, Shared, SLACK_TOKEN, TELEGRAM_TOKEN};
use crate::connectors::{connector_pids, free_port, post};
use crate::swarm::{code, finish, sigkill, stderr, stdout, wait_until, Resident, Swarm};
use serde_json::{json, Value};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The Telegram chat the requests go to.
const CHAT: i64 = -100123;
/// The one Telegram user among the deciders.
const DECIDER: i64 = 7;
/// The webhook's secret token.
const TELEGRAM_SECRET: &str = "tg-webhook-secret-e2e-91";
/// The Slack app's signing secret.
const SLACK_SECRET: &str = "slack-signing-secret-e2e-4b";

/// A Connection of `builtin:telegram` with approvals in [`CHAT`], decided
/// by [`DECIDER`] only; `mode` adds its mode settings.
fn telegram_connection(mode: &str) -> String {
    format!(
        r#"---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: tg
spec:
  connectorRef: Connector/telegram
  config:
    TELEGRAM_API_BASE_URL:
      valueFrom:
        env: TELEGRAM_API_BASE_URL
    TELEGRAM_POLL_TIMEOUT_SECONDS:
      value: "1"
    TELEGRAM_RETRY_DELAY_MS:
      value: "50"
{mode}  secrets:
    TELEGRAM_BOT_TOKEN:
      valueFrom:
        env: TELEGRAM_BOT_TOKEN
    TELEGRAM_WEBHOOK_SECRET:
      valueFrom:
        env: TELEGRAM_WEBHOOK_SECRET
  ingress:
    rules:
      - route: {{}}
  approvals:
    chat: {CHAT}
    deciders: [{DECIDER}]
"#
    )
}

/// Webhook mode on `port`, for [`telegram_connection`].
fn webhook_mode(port: u16) -> String {
    format!(
        "    TELEGRAM_MODE:\n      value: webhook\n    TELEGRAM_WEBHOOK_PORT:\n      value: \"{port}\"\n"
    )
}

/// A Connection of `builtin:slack` on `port` with approvals in `C0123`,
/// decided by anyone there.
fn slack_connection(port: u16) -> String {
    format!(
        r#"---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: team
spec:
  connectorRef: Connector/slack
  config:
    PORT:
      value: "{port}"
    SLACK_API_BASE_URL:
      valueFrom:
        env: SLACK_API_BASE_URL
  secrets:
    SLACK_SIGNING_SECRET:
      valueFrom:
        env: SLACK_SIGNING_SECRET
    SLACK_BOT_TOKEN:
      valueFrom:
        env: SLACK_BOT_TOKEN
  ingress:
    rules:
      - route: {{}}
  approvals:
    channel: C0123
"#
    )
}

/// Adds `documents` to the bundle's `goondan.yaml`.
fn add_to_bundle(swarm: &Swarm, documents: &str) {
    let path = swarm.bundle.path().join("goondan.yaml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push('\n');
    text.push_str(documents);
    std::fs::write(path, text).unwrap();
}

/// `gdn run` with the mock chat APIs and their secrets in its
/// environment.
fn start(swarm: &Swarm, base: &str) -> Resident {
    let slack_base = format!("{base}/api");
    swarm.start_resident_with(&[
        ("TELEGRAM_BOT_TOKEN", TELEGRAM_TOKEN),
        ("TELEGRAM_API_BASE_URL", base),
        ("TELEGRAM_WEBHOOK_SECRET", TELEGRAM_SECRET),
        ("SLACK_BOT_TOKEN", SLACK_TOKEN),
        ("SLACK_API_BASE_URL", &slack_base),
        ("SLACK_SIGNING_SECRET", SLACK_SECRET),
    ])
}

/// The request's message, once the connector posted it.
fn posted_message(api: &Shared) -> Value {
    wait_until("the request in the Telegram chat", || {
        calls_of(api, "sendMessage").into_iter().next()
    })
}

/// The `callback_data` of the message's Approve (0) or Deny (1) button.
fn button(message: &Value, index: usize) -> String {
    message["reply_markup"]["inline_keyboard"][0][index]["callback_data"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A press of the button `data` by the Telegram user `from`, on the
/// first message the mock posted (id 900, in [`CHAT`]).
fn callback(update_id: i64, from: i64, data: &str) -> Value {
    callback_on(
        update_id,
        from,
        data,
        Some(json!({"message_id": 900, "chat": {"id": CHAT}})),
    )
}

/// [`callback`] on `message` (a Bot API `Message`, or none at all).
fn callback_on(update_id: i64, from: i64, data: &str, message: Option<Value>) -> Value {
    let mut update = json!({
        "update_id": update_id,
        "callback_query": {
            "id": format!("cbq-{update_id}"),
            "from": {"id": from, "is_bot": false, "first_name": "Ann"},
            "chat_instance": "4242",
            "data": data,
        }
    });
    if let Some(message) = message {
        update["callback_query"]["message"] = message;
    }
    update
}

/// What a press on another message than its request's is told.
const NOT_THE_MESSAGE: &str =
    "This button is not on the message this request was posted as; nothing was decided.";

/// The `n`th answer to a press (from 1), once there is one.
fn press_answer(api: &Shared, n: usize) -> Value {
    wait_until("the press to be answered", || {
        calls_of(api, "answerCallbackQuery").into_iter().nth(n - 1)
    })
}

/// The id of the one request waiting.
fn waiting_id(swarm: &Swarm) -> String {
    wait_until("the approval request", || {
        approvals(swarm)
            .first()
            .and_then(|request| request["id"].as_str().map(str::to_string))
    })
}

/// Whether the instance's `approvals.jsonl` records a decision by `by`.
fn decided_by(swarm: &Swarm, by: &str) -> bool {
    let dir = crate::swarm::find_instance(swarm.state.path(), "alpha", "default").unwrap();
    crate::swarm::read_jsonl(&dir.join("approvals.jsonl"))
        .iter()
        .any(|record| record["decided"]["by"] == by)
}

#[test]
fn a_telegram_button_approves_a_gated_call_once_and_the_turn_answers() {
    let (base, api) = start_bot_api(Vec::new());
    let swarm = gated_swarm(3600);
    add_to_bundle(&swarm, &telegram_connection(""));
    let resident = start(&swarm, &base);
    let asker = swarm.spawn_input("run it");

    let message = posted_message(&api);
    let id = waiting_id(&swarm);
    assert_eq!(message["chat_id"], CHAT.to_string());
    assert_eq!(message["parse_mode"], "HTML");
    let text = message["text"].as_str().unwrap();
    for shown in [
        "<b>alpha</b> (instance <code>default</code>)",
        "<b>bash__exec</b>",
        // The argument, escaped for Telegram's HTML.
        "\"echo ran &gt;&gt; runs.txt\"",
        id.as_str(),
    ] {
        assert!(text.contains(shown), "{shown} is not in {text}");
    }
    let approve = button(&message, 0);
    assert_eq!(approve, format!("goondan:approve:{id}"));
    assert!(approve.len() <= 64, "{approve}");
    assert_eq!(button(&message, 1), format!("goondan:deny:{id}"));
    assert_eq!(runs(swarm.bundle.path()), 0);

    push_updates(&api, vec![callback(1, DECIDER, &approve)]);
    let answer = finish(asker, "the input approved in Telegram");
    assert!(
        stdout(&answer).starts_with("done:"),
        "{} {}",
        stdout(&answer),
        stderr(&answer)
    );
    assert_eq!(runs(swarm.bundle.path()), 1);
    assert!(
        decided_by(&swarm, "telegram:7"),
        "the decision names its decider"
    );
    let answered = press_answer(&api, 1);
    assert_eq!(answered["callback_query_id"], "cbq-1");
    assert_eq!(answered["text"], "Approved");
    let edited = wait_until("the message to say who approved", || {
        calls_of(&api, "editMessageText").into_iter().next()
    });
    let edited_text = edited["text"].as_str().unwrap();
    assert!(
        edited_text.ends_with("✅ <b>Approved</b> by Ann (telegram:7)"),
        "{edited_text}"
    );
    assert!(edited.get("reply_markup").is_none(), "the buttons stayed");

    // A second press finds the request decided.
    push_updates(&api, vec![callback(2, DECIDER, &approve)]);
    let again = press_answer(&api, 2);
    assert_eq!(again["text"], "This request was already decided.");
    assert_eq!(again["show_alert"], true);
    assert_eq!(runs(swarm.bundle.path()), 1);
    assert_eq!(calls_of(&api, "sendMessage").len(), 1);
    // One model call for the gated step and one after its result: no
    // press became a Turn of its own.
    assert_eq!(swarm.mock.requests().len(), 2);
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn a_press_by_someone_not_among_the_deciders_decides_nothing() {
    let (base, api) = start_bot_api(Vec::new());
    let swarm = gated_swarm(3600);
    add_to_bundle(&swarm, &telegram_connection(""));
    let resident = start(&swarm, &base);
    let asker = swarm.spawn_input("run it");
    let message = posted_message(&api);

    push_updates(&api, vec![callback(1, 666, &button(&message, 0))]);
    let refused = press_answer(&api, 1);
    assert_eq!(refused["callback_query_id"], "cbq-1");
    assert_eq!(refused["show_alert"], true);
    assert!(
        refused["text"].as_str().unwrap().contains("not among"),
        "{refused}"
    );
    assert_eq!(approvals(&swarm).len(), 1, "a stranger's press decided");
    assert_eq!(runs(swarm.bundle.path()), 0);
    assert!(calls_of(&api, "editMessageText").is_empty());

    // The decider's Deny ends it, and the model is told who denied.
    push_updates(&api, vec![callback(2, DECIDER, &button(&message, 1))]);
    let answer = finish(asker, "the input denied in Telegram");
    let text = stdout(&answer);
    assert!(text.contains("E_TOOL_DENIED"), "{text}");
    assert!(text.contains("denied by telegram:7"), "{text}");
    assert_eq!(runs(swarm.bundle.path()), 0);
    assert_eq!(press_answer(&api, 2)["text"], "Denied");
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn a_request_the_deadline_decided_loses_its_buttons() {
    let (base, api) = start_bot_api(Vec::new());
    let swarm = gated_swarm(2);
    add_to_bundle(&swarm, &telegram_connection(""));
    let resident = start(&swarm, &base);
    let asker = swarm.spawn_input("run it");
    let message = posted_message(&api);
    let text = message["text"].as_str().unwrap();
    assert!(text.contains("If nobody decides by "), "{text}");
    assert!(text.contains(", it is denied."), "{text}");

    let answer = finish(asker, "the input its deadline denied");
    assert!(
        stdout(&answer).contains("E_TOOL_DENIED"),
        "{}",
        stdout(&answer)
    );
    let edited = wait_until("the message to say the deadline denied it", || {
        calls_of(&api, "editMessageText").into_iter().next()
    });
    let edited_text = edited["text"].as_str().unwrap();
    assert!(
        edited_text.ends_with("❌ <b>Denied</b> by timeout: nobody decided in time"),
        "{edited_text}"
    );
    assert!(edited.get("reply_markup").is_none());
    // A late press is told so and runs nothing.
    push_updates(&api, vec![callback(1, DECIDER, &button(&message, 0))]);
    assert_eq!(
        press_answer(&api, 1)["text"],
        "This request was already decided."
    );
    assert_eq!(runs(swarm.bundle.path()), 0);
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn a_forged_telegram_callback_is_refused_and_decides_nothing() {
    let (base, api) = start_bot_api(Vec::new());
    let port = free_port();
    let swarm = gated_swarm(3600);
    add_to_bundle(&swarm, &telegram_connection(&webhook_mode(port)));
    let resident = start(&swarm, &base);
    let asker = swarm.spawn_input("run it");
    let message = posted_message(&api);
    let press = callback(1, DECIDER, &button(&message, 0)).to_string();

    let (unsigned, _) = wait_until("the webhook to answer", || post(port, &press, &[]));
    assert_eq!(unsigned, 401);
    let wrong = [(
        "X-Telegram-Bot-Api-Secret-Token",
        "tg-webhook-secret-e2e-92".to_string(),
    )];
    assert_eq!(post(port, &press, &wrong).unwrap().0, 401);
    assert_eq!(approvals(&swarm).len(), 1, "a forged press decided");
    assert!(calls_of(&api, "answerCallbackQuery").is_empty());
    assert_eq!(runs(swarm.bundle.path()), 0);

    let genuine = [(
        "X-Telegram-Bot-Api-Secret-Token",
        TELEGRAM_SECRET.to_string(),
    )];
    assert_eq!(post(port, &press, &genuine).unwrap().0, 200);
    let answer = finish(asker, "the input approved through the webhook");
    assert!(stdout(&answer).starts_with("done:"), "{}", stdout(&answer));
    assert_eq!(runs(swarm.bundle.path()), 1);
    assert_eq!(swarm.mock.requests().len(), 2);
    assert_eq!(resident.terminate(), 0);
}

/// A Slack interactivity post of `payload`, form-encoded as Slack sends
/// it.
fn interactivity(payload: &Value) -> String {
    url::form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish()
}

/// Slack's signature headers for `body`, under `secret`, stamped `age`
/// ago.
pub(crate) fn slack_signed(body: &str, secret: &str, age: Duration) -> Vec<(&'static str, String)> {
    let stamp = (SystemTime::now() - age)
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let base = format!("v0:{stamp}:{body}");
    let signature = goondan_connector::verify::hmac_sha256_hex(secret.as_bytes(), base.as_bytes());
    vec![
        ("X-Slack-Signature", format!("v0={signature}")),
        ("X-Slack-Request-Timestamp", stamp.to_string()),
    ]
}

#[test]
fn a_signed_slack_button_approves_and_a_bad_signature_decides_nothing() {
    let (base, api) = start_bot_api(Vec::new());
    let port = free_port();
    let swarm = gated_swarm(3600);
    add_to_bundle(&swarm, &slack_connection(port));
    let resident = start(&swarm, &base);
    let asker = swarm.spawn_input("run it");

    let message = wait_until("the request in the Slack channel", || {
        calls_of(&api, "chat.postMessage").into_iter().next()
    });
    let id = waiting_id(&swarm);
    assert_eq!(message["channel"], "C0123");
    let section = message["blocks"][0]["text"]["text"].as_str().unwrap();
    assert!(section.contains("*bash__exec*"), "{section}");
    assert!(section.contains("echo ran &gt;&gt; runs.txt"), "{section}");
    let buttons = &message["blocks"][2];
    assert_eq!(buttons["type"], "actions");
    assert_eq!(buttons["elements"][0]["action_id"], "goondan_approve");
    assert_eq!(buttons["elements"][0]["value"], id.as_str());

    let body = interactivity(&json!({
        "type": "block_actions",
        "user": {"id": "U042", "username": "ann"},
        "channel": {"id": "C0123"},
        "container": {"type": "message", "message_ts": "1700000000.000900", "channel_id": "C0123"},
        "actions": [{"action_id": "goondan_approve", "block_id": "goondan_approval", "value": id, "type": "button"}],
        "trigger_id": "t-1",
    }));
    let forged = slack_signed(&body, "not-the-signing-secret", Duration::ZERO);
    let (status, _) = wait_until("the Slack connector to answer", || {
        post(port, &body, &forged)
    });
    assert_eq!(status, 401);
    let stale = slack_signed(&body, SLACK_SECRET, Duration::from_secs(600));
    assert_eq!(post(port, &body, &stale).unwrap().0, 401);
    assert_eq!(approvals(&swarm).len(), 1, "a badly signed press decided");
    assert_eq!(runs(swarm.bundle.path()), 0);

    let signed = slack_signed(&body, SLACK_SECRET, Duration::ZERO);
    assert_eq!(post(port, &body, &signed).unwrap().0, 200);
    let answer = finish(asker, "the input approved in Slack");
    assert!(stdout(&answer).starts_with("done:"), "{}", stdout(&answer));
    assert_eq!(runs(swarm.bundle.path()), 1);
    assert!(decided_by(&swarm, "slack:U042"));
    let updated = wait_until("the message to say who approved", || {
        calls_of(&api, "chat.update").into_iter().next()
    });
    assert_eq!(updated["ts"], "1700000000.000900");
    let end = updated["blocks"][2]["text"]["text"].as_str().unwrap();
    assert_eq!(end, ":white_check_mark: *Approved* by <@U042>");
    assert!(
        updated["blocks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|block| block["type"] != "actions"),
        "the buttons stayed: {updated}"
    );
    assert_eq!(swarm.mock.requests().len(), 2);
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn a_request_asked_while_no_chat_connector_ran_is_posted_once_and_not_after_a_restart() {
    let (base, api) = start_bot_api(Vec::new());
    let swarm = gated_swarm(3600);
    // Asked by a swarm with no chat connector at all, which then dies.
    let resident = start(&swarm, &base);
    let asker = swarm.spawn_input("run it");
    let id = waiting_id(&swarm);
    sigkill(resident.pid());
    drop(resident);
    assert_ne!(code(&finish(asker, "the input whose orchestrator died")), 0);
    assert!(calls_of(&api, "sendMessage").is_empty());

    add_to_bundle(&swarm, &telegram_connection(""));
    let resident = start(&swarm, &base);
    let message = posted_message(&api);
    assert!(message["text"].as_str().unwrap().contains(&id));

    // The connector restarts: it remembers what it posted (recorded just
    // after the platform answered the post, so wait for the record).
    wait_until("the post to be recorded", || {
        crate::files_under(swarm.state.path())
            .iter()
            .filter(|file| file.ends_with("approval-messages.jsonl"))
            .any(|file| std::fs::read_to_string(file).is_ok_and(|text| text.contains(&id)))
            .then_some(())
    });
    kill_connector_and_wait_for_its_polls(&resident, &api);
    // Time enough to post what it was given when it became ready.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        calls_of(&api, "sendMessage").len(),
        1,
        "posted again after a restart"
    );

    // Its button still decides, for the instance that holds the request.
    push_updates(&api, vec![callback(1, DECIDER, &button(&message, 0))]);
    wait_until("the resumed Turn's answer", || {
        swarm
            .conversation("alpha")
            .iter()
            .any(|message| message["role"] == "assistant" && message.to_string().contains("done:"))
            .then_some(())
    });
    assert_eq!(runs(swarm.bundle.path()), 1);
    assert!(approvals(&swarm).is_empty());
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn a_telegram_press_off_the_requests_message_decides_nothing_and_the_posted_one_does_after_a_kill_9(
) {
    let (base, api) = start_bot_api(Vec::new());
    let swarm = gated_swarm(3600);
    add_to_bundle(&swarm, &telegram_connection(""));
    let resident = start(&swarm, &base);
    let asker = swarm.spawn_input("run it");
    let message = posted_message(&api);
    let id = waiting_id(&swarm);
    let approve = button(&message, 0);

    // The request's own callback data, carried by presses that are not
    // on its message: another message of the chat, a message id nobody
    // posted, no message at all (an inline message's callback), a
    // message without its chat, and its message id in another chat.
    let hostile = [
        Some(json!({"message_id": 901, "chat": {"id": CHAT}})),
        Some(json!({"message_id": 77_777, "chat": {"id": CHAT}})),
        None,
        Some(json!({"message_id": 900})),
        Some(json!({"message_id": 900, "chat": {"id": -100_999}})),
    ];
    for (n, message) in hostile.into_iter().enumerate() {
        let update_id = n as i64 + 1;
        push_updates(
            &api,
            vec![callback_on(update_id, DECIDER, &approve, message.clone())],
        );
        let refused = press_answer(&api, n + 1);
        assert_eq!(refused["callback_query_id"], format!("cbq-{update_id}"));
        assert_eq!(refused["text"], NOT_THE_MESSAGE, "{message:?}");
        assert_eq!(refused["show_alert"], true);
        assert_eq!(approvals(&swarm).len(), 1, "{message:?} decided");
        assert_eq!(runs(swarm.bundle.path()), 0);
    }
    assert!(calls_of(&api, "editMessageText").is_empty());

    // What was posted is on disk: a connector killed between the post and
    // the press still knows the message.
    kill_connector_and_wait_for_its_polls(&resident, &api);
    push_updates(&api, vec![callback(10, DECIDER, &approve)]);
    let answer = finish(asker, "the input approved on its message");
    assert!(stdout(&answer).starts_with("done:"), "{}", stdout(&answer));
    assert_eq!(press_answer(&api, 6)["text"], "Approved");
    assert_eq!(runs(swarm.bundle.path()), 1);
    assert!(decided_by(&swarm, "telegram:7"));
    assert!(approvals(&swarm).is_empty(), "{id} still waits");
    assert_eq!(calls_of(&api, "sendMessage").len(), 1);
    assert_eq!(resident.terminate(), 0);
}

#[test]
fn a_slack_press_off_the_requests_message_decides_nothing() {
    let (base, api) = start_bot_api(Vec::new());
    let port = free_port();
    let swarm = gated_swarm(3600);
    add_to_bundle(&swarm, &slack_connection(port));
    let resident = start(&swarm, &base);
    let asker = swarm.spawn_input("run it");
    wait_until("the request in the Slack channel", || {
        calls_of(&api, "chat.postMessage").into_iter().next()
    });
    let id = waiting_id(&swarm);
    let press = |channel: Option<&str>, container: Value, message: Option<&str>| {
        let mut payload = json!({
            "type": "block_actions",
            "user": {"id": "U042", "username": "ann"},
            "container": container,
            "actions": [{"action_id": "goondan_approve", "block_id": "goondan_approval", "value": id, "type": "button"}],
            "trigger_id": "t-1",
        });
        if let Some(channel) = channel {
            payload["channel"] = json!({"id": channel});
        }
        if let Some(ts) = message {
            payload["message"] = json!({"ts": ts});
        }
        interactivity(&payload)
    };
    let posted_ts = "1700000000.000900";
    let on_message = |ts: &str, channel: &str| json!({"type": "message", "message_ts": ts, "channel_id": channel});
    let hostile = [
        // Another message of the channel.
        press(
            Some("C0123"),
            on_message("1700000000.000901", "C0123"),
            None,
        ),
        // A ts nobody posted.
        press(Some("C0123"), on_message("42.000001", "C0123"), None),
        // No message at all.
        press(
            Some("C0123"),
            json!({"type": "view", "view_id": "V1"}),
            None,
        ),
        // The request's message named in another channel.
        press(Some("C0999"), on_message(posted_ts, "C0999"), None),
        // No channel.
        press(
            None,
            json!({"type": "message", "message_ts": posted_ts}),
            None,
        ),
        // Two messages that disagree.
        press(
            Some("C0123"),
            on_message(posted_ts, "C0123"),
            Some("1700000000.000901"),
        ),
    ];
    for (n, body) in hostile.iter().enumerate() {
        let signed = slack_signed(body, SLACK_SECRET, Duration::ZERO);
        let (status, _) = wait_until("the Slack connector to answer", || {
            post(port, body, &signed)
        });
        assert_eq!(status, 200);
        let refused = wait_until("the press to be refused", || {
            calls_of(&api, "chat.postEphemeral").into_iter().nth(n)
        });
        assert_eq!(refused["text"], NOT_THE_MESSAGE, "{body}");
        assert_eq!(refused["user"], "U042");
        assert_eq!(approvals(&swarm).len(), 1, "{body} decided");
        assert_eq!(runs(swarm.bundle.path()), 0);
    }
    assert!(calls_of(&api, "chat.update").is_empty());

    let genuine = press(
        Some("C0123"),
        on_message(posted_ts, "C0123"),
        Some(posted_ts),
    );
    let signed = slack_signed(&genuine, SLACK_SECRET, Duration::ZERO);
    assert_eq!(post(port, &genuine, &signed).unwrap().0, 200);
    let answer = finish(asker, "the input approved on its Slack message");
    assert!(stdout(&answer).starts_with("done:"), "{}", stdout(&answer));
    assert_eq!(runs(swarm.bundle.path()), 1);
    assert!(decided_by(&swarm, "slack:U042"));
    assert_eq!(resident.terminate(), 0);
}

/// kill -9 of the Telegram connector process, then waits until its
/// successor polls the Bot API again.
fn kill_connector_and_wait_for_its_polls(
    resident: &crate::swarm::Resident,
    api: &crate::bot_api::Shared,
) {
    let first = wait_until("the connector process", || {
        connector_pids(resident.pid()).into_iter().next()
    });
    sigkill(first);
    wait_until("a new connector process", || {
        connector_pids(resident.pid())
            .into_iter()
            .find(|pid| *pid != first)
    });
    let polls = calls_of(api, "getUpdates").len();
    wait_until("the new connector to poll", || {
        (calls_of(api, "getUpdates").len() > polls + 2).then_some(())
    });
}
