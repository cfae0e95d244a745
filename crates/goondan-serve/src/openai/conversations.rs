//! Which instance a `/v1` request without a named instance goes to.
//!
//! An OpenAI client (a chat front end, the `openai` packages) sends the
//! whole conversation with every request. The conversation so far (every
//! message before the input) is looked up here: when this server
//! answered exactly that conversation before, in an instance of the same
//! agent and for the same end user (`user`), the request goes on in that
//! instance and only its input is sent; otherwise it starts a fresh
//! instance into which the conversation so far is replayed. So one chat
//! is one instance, however many messages it has, and two chats (of one
//! person or of two) are two.
//!
//! What is kept is a SHA-256 digest per instance, of its conversation as
//! this server exchanged it with the client: the messages replayed into
//! it, then each input and the answer returned, their text trimmed at
//! both ends, framed with their lengths, after the agent's name and the
//! end user's id (so a digest of one agent or end user never matches
//! another's). Only the newest digest of an instance is kept ([`Tips`]),
//! and a request that matches one takes it: a second request with the
//! same conversation (a retry, a regenerated answer) while or after the
//! first runs gets a fresh instance rather than an answer that sits
//! after the first's. A Turn that fails leaves its instance without a
//! digest (what it stored is not known here), and a request that names
//! an instance (`X-Goondan-Instance`, `previous_response_id`) forgets
//! that instance's digest, since its conversation has moved on.
//!
//! Digests are held in memory, at most [`crate::Limits::max_remembered_conversations`]
//! of them (about 200 bytes each), the oldest forgotten first. Nothing
//! is persisted: a forgotten conversation (after a restart of `gdn
//! serve`, or past the bound) costs its next request a fresh instance
//! with the conversation replayed, which is what every request cost
//! before this index, and loses nothing the client holds.

use super::input::Conversation;
use crate::instance::fresh_key;
use crate::recent::Recent;
use crate::swarm::{PriorMessage, PriorRole, TurnRequest};
use aws_lc_rs::digest::{Context, SHA256};

/// The source recorded on every input that came through this API.
const SOURCE: &str = "openai";

type Digest = [u8; 32];

/// The newest digest of each conversation's instance, both ways: the
/// instance of a digest, and the digest of an instance (to forget it
/// when the instance is reached another way).
pub(crate) struct Tips {
    instances: Recent<Digest, String>,
    digests: Recent<(String, String), Digest>,
}

/// Where a request goes, and how to remember its conversation once its
/// Turn answered.
pub(crate) struct Addressed {
    /// The input for the swarm.
    pub(crate) request: TurnRequest,
    /// Set when the request was addressed by its conversation.
    pub(crate) follow: Option<Follow>,
}

/// A request addressed by its conversation.
pub(crate) struct Follow {
    agent: String,
    user: Option<String>,
    instance_key: String,
    /// The conversation up to and including the input.
    so_far: Vec<PriorMessage>,
    /// The digest this request took from its instance, given back when
    /// the swarm refuses the input.
    taken: Option<Digest>,
}

impl Tips {
    /// Remembers at most `limit` conversations.
    pub(crate) fn new(limit: usize) -> Tips {
        Tips {
            instances: Recent::new(limit),
            digests: Recent::new(limit),
        }
    }

    /// The input for `agent` from `conversation`: to the `named` instance
    /// only the input; else to the instance whose conversation so far is
    /// this one's, for `user`, only the input; else to a fresh instance,
    /// the conversation before the input (after `instructions`) replayed
    /// first.
    pub(crate) fn address(
        &self,
        agent: &str,
        named: Option<String>,
        user: Option<&str>,
        conversation: Conversation,
        instructions: Option<&str>,
    ) -> Addressed {
        let request =
            |instance_key: String, history: Vec<PriorMessage>, text: String| TurnRequest {
                agent: agent.to_string(),
                instance_key,
                text,
                history,
                source: SOURCE.to_string(),
            };
        if let Some(key) = named {
            self.forget_instance(agent, &key);
            return Addressed {
                request: request(key, Vec::new(), conversation.input),
                follow: None,
            };
        }
        let mut before = Vec::with_capacity(conversation.history.len() + 1);
        if let Some(instructions) = instructions {
            before.push(PriorMessage {
                role: PriorRole::System,
                text: instructions.to_string(),
            });
        }
        before.extend(conversation.history);
        let digest = digest(agent, user, &before);
        let found = match before.is_empty() {
            true => None,
            false => self.instances.take(&digest),
        };
        let (instance_key, history, taken) = match found {
            Some(key) => {
                let _ = self.digests.take(&(agent.to_string(), key.clone()));
                (key, Vec::new(), Some(digest))
            }
            None => (fresh_instance_key(user), before.clone(), None),
        };
        let mut so_far = before;
        so_far.push(PriorMessage {
            role: PriorRole::User,
            text: conversation.input.clone(),
        });
        Addressed {
            request: request(instance_key.clone(), history, conversation.input),
            follow: Some(Follow {
                agent: agent.to_string(),
                user: user.map(str::to_string),
                instance_key,
                so_far,
                taken,
            }),
        }
    }

    /// The swarm refused the input of `follow` (nothing of it is
    /// stored): its instance is where it was, and is found again.
    pub(crate) fn refused(&self, follow: Follow) {
        if let Some(digest) = follow.taken {
            self.remember(&follow.agent, follow.instance_key, digest);
        }
    }

    /// The Turn of `follow` answered `answer`: its instance's conversation
    /// is the one so far and the answer.
    pub(crate) fn answered(&self, mut follow: Follow, answer: &str) {
        follow.so_far.push(PriorMessage {
            role: PriorRole::Assistant,
            text: answer.to_string(),
        });
        let digest = digest(&follow.agent, follow.user.as_deref(), &follow.so_far);
        self.remember(&follow.agent, follow.instance_key, digest);
    }

    fn remember(&self, agent: &str, instance_key: String, digest: Digest) {
        self.forget_instance(agent, &instance_key);
        self.instances.remember(digest, instance_key.clone());
        self.digests
            .remember((agent.to_string(), instance_key), digest);
    }

    fn forget_instance(&self, agent: &str, instance_key: &str) {
        let instance = (agent.to_string(), instance_key.to_string());
        if let Some(digest) = self.digests.take(&instance) {
            let _ = self.instances.take(&digest);
        }
    }
}

/// The digest of `messages` of a conversation with `agent` for `user`.
fn digest(agent: &str, user: Option<&str>, messages: &[PriorMessage]) -> Digest {
    let mut context = Context::new(&SHA256);
    let mut field = |bytes: &[u8]| {
        context.update(&(bytes.len() as u64).to_le_bytes());
        context.update(bytes);
    };
    field(b"goondan-serve conversation 1");
    field(agent.as_bytes());
    match user {
        Some(user) => field(format!("user:{user}").as_bytes()),
        None => field(b"anonymous"),
    }
    for message in messages {
        let role: &[u8] = match message.role {
            PriorRole::System => b"system",
            PriorRole::User => b"user",
            PriorRole::Assistant => b"assistant",
        };
        field(role);
        field(message.text.trim().as_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(context.finish().as_ref());
    out
}

/// A fresh instance key: `openai-<hex>`, or for an end user
/// `openai-<12 hex digits of the user's SHA-256>-<hex>`, so an operator
/// sees which instances are one user's without the key holding the id
/// itself (which may be an email address, or hold characters no key may).
fn fresh_instance_key(user: Option<&str>) -> String {
    match user {
        None => fresh_key(SOURCE),
        Some(user) => {
            let sum = aws_lc_rs::digest::digest(&SHA256, user.as_bytes());
            let tag: String = sum.as_ref()[..6]
                .iter()
                .map(|byte| format!("{byte:02x}"))
                .collect();
            fresh_key(&format!("{SOURCE}-{tag}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(role: PriorRole, text: &str) -> PriorMessage {
        PriorMessage {
            role,
            text: text.into(),
        }
    }

    fn chat(texts: &[&str]) -> Conversation {
        let mut history: Vec<PriorMessage> = texts
            .iter()
            .enumerate()
            .map(|(at, text)| {
                let role = if at % 2 == 0 {
                    PriorRole::User
                } else {
                    PriorRole::Assistant
                };
                said(role, text)
            })
            .collect();
        let input = history.pop().unwrap().text;
        Conversation { history, input }
    }

    /// Sends `texts` (user, assistant, …, user) for `user`, the swarm
    /// answering `answer`; the instance key it went to and whether the
    /// conversation before the input was replayed.
    fn turn(tips: &Tips, user: Option<&str>, texts: &[&str], answer: &str) -> (String, bool) {
        let addressed = tips.address("helper", None, user, chat(texts), None);
        let replayed = !addressed.request.history.is_empty();
        let key = addressed.request.instance_key.clone();
        tips.answered(addressed.follow.unwrap(), answer);
        (key, replayed)
    }

    #[test]
    fn one_chat_is_one_instance_and_two_chats_are_two() {
        let tips = Tips::new(100);
        let (first, replayed) = turn(&tips, None, &["hi"], "hello");
        assert!(first.starts_with("openai-") && !replayed);
        let (again, replayed) = turn(&tips, None, &["hi", " hello\n", "more"], "ok");
        assert_eq!((again.as_str(), replayed), (first.as_str(), false));
        let (third, _) = turn(&tips, None, &["hi", "hello", "more", "ok", "end"], "bye");
        assert_eq!(third, first);
        // The same opening is another chat: a fresh instance.
        let (other, _) = turn(&tips, None, &["hi"], "hello");
        assert_ne!(other, first);
        // A conversation this server never answered is replayed.
        let (unknown, replayed) = turn(&tips, None, &["hi", "something else", "x"], "y");
        assert!(replayed && unknown != first && unknown != other);
    }

    #[test]
    fn an_end_users_conversations_are_found_only_for_them() {
        let tips = Tips::new(100);
        let (alice, _) = turn(&tips, Some("alice"), &["hi"], "hello");
        let (bob, _) = turn(&tips, Some("bob"), &["hi"], "hello");
        assert_ne!(alice, bob);
        let tag = alice.split('-').nth(1).unwrap();
        assert_eq!(tag.len(), 12);
        assert!(!alice.contains("alice"));
        // Bob sending Alice's conversation does not reach her instance, nor
        // does a client without `user`.
        let (stranger, replayed) = turn(&tips, None, &["hi", "hello", "x"], "y");
        assert!(replayed && stranger != alice);
        let (bobs, _) = turn(&tips, Some("bob"), &["hi", "hello", "x"], "y");
        assert_eq!(bobs, bob);
        let (alices, replayed) = turn(&tips, Some("alice"), &["hi", "hello", "x"], "y");
        assert_eq!((alices.as_str(), replayed), (alice.as_str(), false));
        // A second chat of Alice's is its own instance, with her tag.
        let (second, _) = turn(&tips, Some("alice"), &["other"], "z");
        assert_ne!(second, alice);
        assert!(second.starts_with(&format!("openai-{tag}-")));
    }

    #[test]
    fn a_taken_conversation_is_not_continued_twice_and_a_refused_one_is_given_back() {
        let tips = Tips::new(100);
        let (first, _) = turn(&tips, None, &["hi"], "hello");
        let one = tips.address("helper", None, None, chat(&["hi", "hello", "a"]), None);
        let two = tips.address("helper", None, None, chat(&["hi", "hello", "b"]), None);
        assert_eq!(one.request.instance_key, first);
        assert_ne!(two.request.instance_key, first);
        tips.refused(one.follow.unwrap());
        let three = tips.address("helper", None, None, chat(&["hi", "hello", "c"]), None);
        assert_eq!(three.request.instance_key, first);
        // A named instance forgets its conversation.
        tips.answered(three.follow.unwrap(), "ok");
        let _ = tips.address("helper", Some(first.clone()), None, chat(&["x"]), None);
        let after = tips.address(
            "helper",
            None,
            None,
            chat(&["hi", "hello", "c", "ok", "d"]),
            None,
        );
        assert_ne!(after.request.instance_key, first);
    }
}
