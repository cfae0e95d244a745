//! An instance's Turns as its log in the cluster holds them ([`turns`]),
//! and the two rewrites of that history a person asks for: [`fork`] (a
//! new instance whose history is another's up to the end of one of its
//! Turns) and [`rewind`] (the instance moved back to the end of one of
//! its Turns). The single-host versions are `goondan_store`'s
//! `InstanceStore::fork` and `rewind`; the rules are theirs.
//!
//! - Turns are delimited in the committed conversation by the store's rule
//!   ([`goondan_store::turn_starts`]): a Turn starts at its input message.
//! - The extension state a Turn ended with comes from the log's
//!   extension records since its latest snapshot
//!   ([`ExtensionHistory`](crate::conversation::ExtensionHistory)); a Turn
//!   whose commit a snapshot's purge took gets the current state, and the
//!   report says so ([`ExtensionStateSource::CurrentFallback`]).
//! - Every write is the writer's usual compare-and-append. A fork claims
//!   the new instance's log only if it holds nothing
//!   ([`ClusterError::InstanceExists`] otherwise). A rewind claims the
//!   instance, which fences every earlier writer; its caller holds the
//!   instance first (the owner host stops its process and keeps it
//!   stopped), so no Turn is cut in the middle.
//! - Nothing is deleted unrecorded: before a rewind commits the shorter
//!   history, what it cuts (the messages, the pending events of an
//!   interrupted Turn, the extension states it replaces) is stored with a
//!   manifest as the object `<prefix>.archive.<id>` of `gdn-snap`, which
//!   nothing removes. A fork stores where it came from as
//!   `<prefix>.forked-from`.

use crate::conversation::ConversationLog;
use crate::error::ClusterError;
use crate::journal::Writer;
use crate::layout::SNAPSHOT_STORE;
use crate::object;
use crate::record::{EventBody, RECORD_VERSION};
use crate::subject::InstanceAddress;
use crate::Cluster;
use goondan_store::{
    new_archive_id, turn_starts, CommitContext, ExtensionStateSource, TurnPoint, TurnRef, TurnStart,
};
use goondan_types::{JsonValue, Message};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One Turn of an instance's committed conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct LogTurn {
    /// Its 1-based position.
    pub index: usize,
    /// Where it starts and what it was asked.
    pub start: TurnStart,
    /// Messages it holds, its input included.
    pub n_messages: usize,
}

impl LogTurn {
    /// The position just past its last message: the conversation cut
    /// here ends with it.
    pub fn end(&self) -> usize {
        self.start.at + self.n_messages
    }

    fn point(&self) -> TurnPoint {
        TurnPoint {
            turn_id: self.start.turn_id.clone(),
            turn_index: self.index,
        }
    }
}

/// What [`fork`] made (as `gdn instance fork --json` prints it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkedLog {
    /// The Turn the new instance's history ends with.
    pub at: TurnPoint,
    /// Messages it holds.
    pub n_messages: usize,
    /// Where its extension state came from.
    pub extension_state: ExtensionStateSource,
}

/// What [`rewind`] did (as the instance's owner answers it, and `gdn
/// instance rewind --json` prints it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RewoundLog {
    /// The Turn the history now ends with.
    pub to: TurnPoint,
    /// What was cut; `None` when that Turn already was the last and
    /// nothing was pending (nothing changed).
    pub archive: Option<LogArchive>,
    /// Where the extension state came from.
    pub extension_state: ExtensionStateSource,
}

/// The archive one rewind stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogArchive {
    /// Its object in `gdn-snap`.
    pub object: String,
    /// Turns cut.
    pub n_turns: usize,
    /// Messages cut (pending events aside).
    pub n_messages: usize,
    /// Pending events of an interrupted Turn that went with them.
    pub n_pending_events: usize,
}

/// `gdn-snap/<prefix>.archive.<id>`: what one rewind cut, and who cut it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArchiveBody<'a> {
    v: u32,
    archived_at: String,
    by: &'a str,
    agent_name: &'a str,
    instance_key: &'a str,
    rewound_to: TurnPoint,
    /// The Turns cut, oldest first.
    turn_ids: Vec<Option<String>>,
    n_messages_before: usize,
    n_messages_after: usize,
    extension_state: ExtensionStateSource,
    /// The messages cut, in order.
    messages: &'a [Message],
    /// The events of an interrupted Turn that were pending.
    pending_events: Vec<EventBody>,
    /// Each extension state the rewind replaced or removed, as it was
    /// (`null`: it had none).
    extensions: BTreeMap<String, JsonValue>,
}

/// `gdn-snap/<prefix>.forked-from`: where a fork's history came from.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ForkedFrom<'a> {
    v: u32,
    instance_key: &'a str,
    turn_id: Option<&'a str>,
    turn_index: usize,
    forked_at: String,
    by: &'a str,
}

/// The Turns of `messages` (a committed conversation), oldest first.
fn delimit(messages: &[Message]) -> Vec<LogTurn> {
    let starts = turn_starts(messages);
    let ends: Vec<usize> = starts
        .iter()
        .skip(1)
        .map(|start| start.at)
        .chain([messages.len()])
        .collect();
    starts
        .into_iter()
        .zip(ends)
        .enumerate()
        .map(|(position, (start, end))| LogTurn {
            index: position + 1,
            n_messages: end - start.at,
            start,
        })
        .collect()
}

/// The Turn `turn` names among `turns`.
fn find<'a>(
    turns: &'a [LogTurn],
    turn: &TurnRef,
    address: &InstanceAddress,
) -> Result<&'a LogTurn, ClusterError> {
    let found = turns.iter().find(|candidate| match turn {
        TurnRef::Index(index) => candidate.index == *index,
        TurnRef::Id(id) => candidate.start.turn_id.as_deref() == Some(id.as_str()),
    });
    found.ok_or_else(|| ClusterError::TurnNotFound {
        instance: address.routing_key(),
        turn: turn.to_string(),
        n_turns: turns.len(),
    })
}

/// The Turns of the committed conversation of the instance at `address`,
/// read without claiming it (it may be running a Turn meanwhile).
pub async fn turns(
    cluster: &Cluster,
    address: &InstanceAddress,
) -> Result<Vec<LogTurn>, ClusterError> {
    let mut log = ConversationLog::attach(cluster, address).await?;
    let last = log.read_last_seq().await?;
    Ok(delimit(&log.replay(last).await?.base))
}

/// The Turn `turn` names in the committed conversation of the instance at
/// `address`, read without claiming it: how a rewind is checked before
/// anything is held or written.
pub async fn turn(
    cluster: &Cluster,
    address: &InstanceAddress,
    turn: &TurnRef,
) -> Result<LogTurn, ClusterError> {
    let turns = turns(cluster, address).await?;
    find(&turns, turn, address).cloned()
}

/// Makes the instance `to` (an agent's new instance key, whose log must
/// hold nothing), whose history is exactly that of `from` up to the end
/// of Turn `at`, and whose extension state is the one that Turn ended
/// with. `from` is only read, without claiming it, from its committed
/// conversation: a Turn it runs meanwhile is neither cut nor seen.
/// `claimant` names the writer in the new log's claim; `by` who asked.
pub async fn fork(
    cluster: &Cluster,
    from: &InstanceAddress,
    at: &TurnRef,
    to: &InstanceAddress,
    by: &str,
    claimant: &str,
) -> Result<ForkedLog, ClusterError> {
    let mut source = ConversationLog::attach(cluster, from).await?;
    let last = source.read_last_seq().await?;
    let replay = source.replay(last).await?;
    let turns = delimit(&replay.base);
    let turn = find(&turns, at, from)?;
    let history = source.extension_history(last).await?;
    let (state, extension_state) =
        history.state_after(turn.start.turn_id.as_deref(), &replay.extensions);

    let mut writer = Writer::create_on(cluster.clone(), to, claimant).await?;
    let origin = ForkedFrom {
        v: RECORD_VERSION,
        instance_key: &from.instance_key,
        turn_id: turn.start.turn_id.as_deref(),
        turn_index: turn.index,
        forked_at: goondan_types::now_iso(),
        by,
    };
    put_json(
        cluster,
        &format!("{}.forked-from", to.conversation_prefix()),
        &origin,
    )
    .await?;
    for (name, value) in state {
        writer.save_extension(name, value).await?;
    }
    let messages = replay.base[..turn.end()].to_vec();
    let n_messages = messages.len();
    // Committed under the forked Turn's id: a fork of this fork at that
    // Turn finds its extension state exactly.
    let turn_id = turn
        .start
        .turn_id
        .clone()
        .unwrap_or_else(|| format!("fork_{}", goondan_types::trace::random_hex(8)));
    writer
        .commit(turn_id, false, messages, CommitContext::default())
        .await?;
    Ok(ForkedLog {
        at: turn.point(),
        n_messages,
        extension_state,
    })
}

/// Moves the instance at `address` back to the end of Turn `to`: what
/// came after it (and the pending events of an interrupted Turn) is
/// archived first, then the extension state becomes the one that Turn
/// ended with and the shorter history is committed, claimed by `owner`.
/// The caller holds the instance (no process of it runs); a writer that
/// still ran would be fenced by the claim. `by` is who asked.
pub async fn rewind(
    cluster: &Cluster,
    address: &InstanceAddress,
    to: &TurnRef,
    by: &str,
    owner: &str,
) -> Result<RewoundLog, ClusterError> {
    let mut writer = Writer::open_on(cluster.clone(), address, owner).await?;
    let base = writer.load().await?.base;
    let turns = delimit(&base);
    let turn = find(&turns, to, address)?.clone();
    let claimed = writer.log_mut().last_seq();
    let history = writer.log_mut().extension_history(claimed).await?;
    let current = writer.extensions().clone();
    let pending: Vec<EventBody> = writer
        .uncommitted()
        .iter()
        .map(|(turn_id, event)| EventBody {
            v: RECORD_VERSION,
            turn_id: turn_id.clone(),
            event: event.clone(),
        })
        .collect();
    if turn.end() == base.len() && pending.is_empty() {
        return Ok(RewoundLog {
            to: turn.point(),
            archive: None,
            extension_state: ExtensionStateSource::Unchanged,
        });
    }
    let (state, extension_state) = history.state_after(turn.start.turn_id.as_deref(), &current);
    let changed: BTreeSet<&String> = current
        .keys()
        .chain(state.keys())
        .filter(|name| current.get(*name) != state.get(*name))
        .collect();

    let cut_turns: Vec<&LogTurn> = turns.iter().filter(|t| t.index > turn.index).collect();
    let archive = LogArchive {
        object: format!(
            "{}.archive.{}",
            address.conversation_prefix(),
            new_archive_id()
        ),
        n_turns: cut_turns.len(),
        n_messages: base.len() - turn.end(),
        n_pending_events: pending.len(),
    };
    let body = ArchiveBody {
        v: RECORD_VERSION,
        archived_at: goondan_types::now_iso(),
        by,
        agent_name: &address.agent_name,
        instance_key: &address.instance_key,
        rewound_to: turn.point(),
        turn_ids: cut_turns.iter().map(|t| t.start.turn_id.clone()).collect(),
        n_messages_before: base.len(),
        n_messages_after: turn.end(),
        extension_state,
        messages: &base[turn.end()..],
        pending_events: pending,
        extensions: changed
            .iter()
            .map(|name| {
                let was = current.get(*name).cloned().unwrap_or(JsonValue::Null);
                ((*name).clone(), was)
            })
            .collect(),
    };
    put_json(cluster, &archive.object, &body).await?;

    for name in changed {
        match state.get(name) {
            Some(value) => writer.save_extension(name.clone(), value.clone()).await?,
            None => writer.remove_extension(name.clone()).await?,
        }
    }
    let turn_id = format!("rewind_{}", goondan_types::trace::random_hex(8));
    writer
        .commit(
            turn_id,
            false,
            base[..turn.end()].to_vec(),
            CommitContext::default(),
        )
        .await?;
    Ok(RewoundLog {
        to: turn.point(),
        archive: Some(archive),
        extension_state,
    })
}

/// Stores `body` as JSON in `gdn-snap` under `name`.
async fn put_json(
    cluster: &Cluster,
    name: &str,
    body: &impl Serialize,
) -> Result<(), ClusterError> {
    let bytes = serde_json::to_vec(body).map_err(|error| ClusterError::Corrupt {
        what: format!("{SNAPSHOT_STORE}/{name}"),
        reason: format!("cannot encode: {error}"),
    })?;
    object::put(cluster, SNAPSHOT_STORE, name, HashMap::new(), &bytes).await
}
