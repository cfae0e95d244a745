//! A press of an approval button: what a chat platform's verified path
//! (the Telegram long poll or webhook, the signed Slack interactivity
//! post) makes of a person pressing Approve or Deny, and whether it was
//! made on the message the desk posted. The platforms make presses and
//! hand them to [`Emitter::press`](crate::Emitter::press); the approval
//! desk ([`crate::approvals`]) decides them. Neither the HTTP front nor
//! the sources need the desk for that.

use goondan_store::PostedApproval;
use goondan_types::Verdict;

/// A person pressed Approve or Deny under a request's message; checked
/// by the platform's signature (or the Bot API's own channel) before it
/// is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Press {
    /// The request's id (`apv_…`).
    pub approval_id: String,
    /// Which button.
    pub verdict: Verdict,
    /// The presser's platform user id.
    pub user_id: String,
    /// How the presser is shown (`@ann`, `Ann`), when the platform says.
    pub user_name: Option<String>,
    /// The chat or channel the pressed message is in, as the platform
    /// says; `None` when it did not say, or said two different things.
    pub chat: Option<String>,
    /// The message pressed under (Telegram `message_id`, Slack `ts`);
    /// `None` like [`Press::chat`].
    pub message: Option<String>,
    /// Telegram's callback query id, which must be answered once.
    pub callback_id: Option<String>,
}

impl Press {
    /// Whether this press is on the message the desk posted for its
    /// request: the same chat and the same message, both named by the
    /// platform. A button's request id alone proves nothing (anyone who
    /// saw it can put it under another message, or in a callback of no
    /// message at all), so a press decides only where the desk put its
    /// buttons.
    pub fn check_posted(&self, posted: &PostedApproval) -> Result<(), PressMismatch> {
        let (Some(chat), Some(message)) = (&self.chat, &self.message) else {
            return Err(PressMismatch::NoMessage);
        };
        if *chat != posted.chat {
            return Err(PressMismatch::OtherChat {
                chat: chat.clone(),
                posted: posted.chat.clone(),
            });
        }
        if *message != posted.message {
            return Err(PressMismatch::OtherMessage {
                message: message.clone(),
                posted: posted.message.clone(),
            });
        }
        Ok(())
    }
}

/// Why a press is not on its request's message; such a press decides
/// nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PressMismatch {
    /// The platform named no chat or no message for the press (a Telegram
    /// callback of an inline message, a Slack payload without its
    /// container), or named two that disagree.
    #[error("E_APPROVAL_PRESS_NO_MESSAGE: the press names no message it was made on")]
    NoMessage,
    /// The press was made in another chat or channel.
    #[error("E_APPROVAL_PRESS_OTHER_CHAT: the press was made in {chat}, the request was posted in {posted}")]
    OtherChat {
        /// Where the press was made.
        chat: String,
        /// Where the request's message is.
        posted: String,
    },
    /// The press was made on another message than the request's.
    #[error("E_APPROVAL_PRESS_OTHER_MESSAGE: the press was made on message {message}, the request was posted as {posted}")]
    OtherMessage {
        /// The message pressed under.
        message: String,
        /// The request's message.
        posted: String,
    },
}

impl PressMismatch {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            PressMismatch::NoMessage => "E_APPROVAL_PRESS_NO_MESSAGE",
            PressMismatch::OtherChat { .. } => "E_APPROVAL_PRESS_OTHER_CHAT",
            PressMismatch::OtherMessage { .. } => "E_APPROVAL_PRESS_OTHER_MESSAGE",
        }
    }
}
