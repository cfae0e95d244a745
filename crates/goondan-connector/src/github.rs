//! The `github` connector: repository webhooks become events.
//!
//! With a secret (`GITHUB_WEBHOOK_SECRET`, `WEBHOOK_SECRET` or
//! `SIGNING_SECRET`) every delivery must carry a valid
//! `X-Hub-Signature-256`. The event type comes from `X-GitHub-Event`;
//! `ping` (sent when the hook is created) is answered and not emitted.
//! Names and properties follow the original base package: `github_push`
//! (`ref`), `github_pull_request`, `github_issue`, `github_issue_comment`
//! (`number`, `action`), any other type `github_<type>`; every event has
//! `event`, and `repo`, `sender` and `delivery` when known; the instance
//! key is `github:<owner>/<repo>`.

use crate::config::{ConnectorConfig, ConnectorConfigError};
use crate::http::{
    BadRequest, HttpFront, Platform, PlatformOutcome, PlatformReply, PlatformRequest,
};
use crate::verify::{self, SignatureError};
use goondan_types::{ConnectorEvent, ConnectorMessage};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Default port (`GITHUB_WEBHOOK_PORT`, `PORT`).
pub const DEFAULT_PORT: u16 = 8788;

/// The `github` platform.
pub struct Github {
    secret: Option<String>,
}

impl Github {
    /// The platform and its front, from a Connection's config.
    pub fn from_config(
        config: &ConnectorConfig,
    ) -> Result<(Github, HttpFront), ConnectorConfigError> {
        let front = HttpFront::from_config(
            config,
            &["GITHUB_WEBHOOK_PORT", "PORT"],
            DEFAULT_PORT,
            &["GITHUB_WEBHOOK_PATH", "WEBHOOK_PATH"],
            "/",
        )?;
        let secret = config
            .secret(&["GITHUB_WEBHOOK_SECRET", "WEBHOOK_SECRET", "SIGNING_SECRET"])
            .map(|(_, value)| value.to_string());
        front.refuse_unsigned_off_loopback(config, secret.is_some(), "GITHUB_WEBHOOK_SECRET")?;
        Ok((Github { secret }, front))
    }
}

impl Platform for Github {
    fn name(&self) -> &'static str {
        "github"
    }

    fn verify(&self, request: &PlatformRequest<'_>) -> Result<(), SignatureError> {
        match &self.secret {
            None => Ok(()),
            Some(secret) => {
                verify::github(secret, request.body, request.header("x-hub-signature-256"))
            }
        }
    }

    fn handle(&self, request: &PlatformRequest<'_>) -> Result<PlatformOutcome, BadRequest> {
        let event_type = request
            .header("x-github-event")
            .filter(|t| !t.is_empty())
            .ok_or_else(|| BadRequest("the request has no X-GitHub-Event header".into()))?;
        let body: Value = serde_json::from_slice(request.body)
            .map_err(|error| BadRequest(format!("the body is not JSON: {error}")))?;
        if !body.is_object() {
            return Err(BadRequest("the body is not a JSON object".into()));
        }
        if event_type == "ping" {
            return Ok(PlatformOutcome::Reply(PlatformReply::json(
                json!({"ok": true, "pong": true}),
            )));
        }
        let mut event = event_from_delivery(event_type, &body);
        if let Some(delivery) = request.header("x-github-delivery") {
            event
                .properties
                .insert("delivery".into(), delivery.to_string());
            event.delivery_id = Some(delivery.to_string());
        }
        Ok(PlatformOutcome::Emit {
            event,
            reply: PlatformReply::json(json!({"ok": true})),
        })
    }
}

/// The event a delivery of `event_type` describes.
pub fn event_from_delivery(event_type: &str, body: &Value) -> ConnectorEvent {
    let text_at = |pointer: &str| {
        body.pointer(pointer)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let number_at = |pointer: &str| body.pointer(pointer).and_then(Value::as_u64);
    let action = text_at("/action");
    let repo = text_at("/repository/full_name");

    let mut properties = BTreeMap::from([("event".to_string(), event_type.to_string())]);
    let mut put = |key: &str, value: Option<String>| {
        if let Some(value) = value {
            properties.insert(key.to_string(), value);
        }
    };
    put("action", action.map(str::to_string));
    put("repo", repo.map(str::to_string));
    put("sender", text_at("/sender/login").map(str::to_string));

    let (name, text) = match event_type {
        "push" => {
            let git_ref = text_at("/ref");
            put("ref", git_ref.map(str::to_string));
            let text = text_at("/head_commit/message")
                .map(str::to_string)
                .unwrap_or_else(|| format!("push to {}", git_ref.unwrap_or("unknown")));
            ("github_push".to_string(), text)
        }
        "pull_request" => {
            put(
                "number",
                number_at("/pull_request/number").map(|n| n.to_string()),
            );
            let text = text_at("/pull_request/title")
                .map(str::to_string)
                .unwrap_or_else(|| format!("PR {}", action.unwrap_or_default()));
            ("github_pull_request".to_string(), text)
        }
        "issues" => {
            put("number", number_at("/issue/number").map(|n| n.to_string()));
            let text = text_at("/issue/title")
                .map(str::to_string)
                .unwrap_or_else(|| format!("Issue {}", action.unwrap_or_default()));
            ("github_issue".to_string(), text)
        }
        "issue_comment" => {
            put("number", number_at("/issue/number").map(|n| n.to_string()));
            let text = text_at("/comment/body").unwrap_or("comment").to_string();
            ("github_issue_comment".to_string(), text)
        }
        other => {
            let text = match action {
                Some(action) => format!("{other} {action}"),
                None => other.to_string(),
            };
            (format!("github_{other}"), text)
        }
    };
    ConnectorEvent {
        name,
        message: ConnectorMessage::Text { text },
        properties,
        instance_key: Some(format!("github:{}", repo.unwrap_or(event_type))),
        delivery_id: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_map_like_the_original() {
        let comment = event_from_delivery(
            "issue_comment",
            &json!({
                "action": "created",
                "issue": {"number": 7, "title": "Bug"},
                "comment": {"body": "please fix"},
                "repository": {"full_name": "acme/app"},
                "sender": {"login": "ann"}
            }),
        );
        assert_eq!(comment.name, "github_issue_comment");
        assert_eq!(comment.instance_key.as_deref(), Some("github:acme/app"));
        assert_eq!(
            comment.message,
            ConnectorMessage::Text {
                text: "please fix".into()
            }
        );
        assert_eq!(comment.properties["number"], "7");
        assert_eq!(comment.properties["action"], "created");
        assert_eq!(comment.properties["sender"], "ann");
        assert_eq!(comment.properties["event"], "issue_comment");

        let push = event_from_delivery("push", &json!({"ref": "refs/heads/main"}));
        assert_eq!(push.name, "github_push");
        assert_eq!(
            push.message,
            ConnectorMessage::Text {
                text: "push to refs/heads/main".into()
            }
        );
        assert_eq!(push.instance_key.as_deref(), Some("github:push"));

        let pr = event_from_delivery(
            "pull_request",
            &json!({"action": "opened", "pull_request": {"number": 3, "title": "Add x"}}),
        );
        assert_eq!(
            (pr.name.as_str(), pr.properties["number"].as_str()),
            ("github_pull_request", "3")
        );

        let star = event_from_delivery("star", &json!({"action": "created"}));
        assert_eq!(star.name, "github_star");
        assert_eq!(
            star.message,
            ConnectorMessage::Text {
                text: "star created".into()
            }
        );
    }
}
