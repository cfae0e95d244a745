//! [`export`]: one instance of the cluster written in the single-host
//! layout (`workspace.md` §7), which `goondan_store::InstanceStore` opens
//! as if the instance had always lived on this disk. The formats are the
//! store's own encoders; nothing here claims or changes the cluster log.

use crate::conversation::ConversationLog;
use crate::error::{request_error, ClusterError};
use crate::subject::InstanceAddress;
use crate::Cluster;
use goondan_store::paths::InstancePaths;
use goondan_store::{encode_event_line, encode_messages, encode_state, StoreError};
use std::path::Path;

/// Writes the instance at `address` into the instance folder `dir`:
/// `messages/base.jsonl` (the committed messages), `messages/events.jsonl`
/// (the pending events of an interrupted Turn, with its `turnId`) and
/// `extensions/<name>.json`. Existing files of the same names are
/// replaced.
pub async fn export(
    cluster: &Cluster,
    address: &InstanceAddress,
    dir: &Path,
) -> Result<(), ClusterError> {
    let mut log = ConversationLog::attach(cluster, address).await?;
    let last = log.read_last_seq().await?;
    let replay = log.replay(last).await?;
    let conversation = replay.conversation();
    let paths = InstancePaths::from_dir(dir);
    let base = encode_messages(&conversation.base).map_err(store_error)?;
    let mut events = Vec::new();
    if let Some(turn_id) = &conversation.pending_turn_id {
        for event in &conversation.pending_events {
            events.extend(encode_event_line(turn_id, event).map_err(store_error)?);
        }
    }
    write(&paths.messages_dir(), &paths.base_log(), &base)?;
    write(&paths.messages_dir(), &paths.events_log(), &events)?;
    for (name, value) in &replay.extensions {
        let bytes = encode_state(value).map_err(store_error)?;
        write(
            &paths.extensions_dir(),
            &paths.extension_state_file(name),
            &bytes,
        )?;
    }
    Ok(())
}

fn write(dir: &Path, file: &Path, bytes: &[u8]) -> Result<(), ClusterError> {
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(file, bytes))
        .map_err(|error| request_error(&format!("writing {}", file.display()), error))
}

fn store_error(error: StoreError) -> ClusterError {
    ClusterError::Corrupt {
        what: "an exported record".to_string(),
        reason: error.to_string(),
    }
}
