//! Storage errors, each with a stable code and, where the user can act, a
//! suggestion. Nothing here does IO.

use std::path::PathBuf;
use thiserror::Error;

/// A failed storage operation.
#[derive(Debug, Error)]
pub enum StoreError {
    /// A filesystem operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, for example `appending to`.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },

    /// Neither `--state-root`, `GOONDAN_STATE_ROOT` nor a home folder is
    /// known, so there is nowhere to keep state.
    #[error(
        "cannot locate the System Root: no --state-root, no GOONDAN_STATE_ROOT and no home folder"
    )]
    NoStateRoot,

    /// The System Root lies inside the project, where the runtime must not
    /// create state (`workspace.md` §2.1).
    #[error("state root {} is inside the project {}", state_root.display(), project_root.display())]
    StateRootInProject {
        /// The System Root.
        state_root: PathBuf,
        /// The Project Root.
        project_root: PathBuf,
    },

    /// Another open handle (in this or another process) owns the instance.
    #[error(
        "instance {instance_key:?} is already open{}; lock file {}",
        holder_pid.map(|pid| format!(" by process {pid}")).unwrap_or_default(),
        lock_path.display()
    )]
    InstanceLocked {
        /// The instance.
        instance_key: String,
        /// The lock file.
        lock_path: PathBuf,
        /// The pid recorded by the holder, when readable.
        holder_pid: Option<u32>,
    },

    /// The folder an instance key maps to belongs to another key (possible
    /// only on case-insensitive filesystems or with a truncated-name hash
    /// collision).
    #[error(
        "folder {} holds instance {existing_key:?}, not {instance_key:?}",
        dir.display()
    )]
    InstanceKeyConflict {
        /// The key asked for.
        instance_key: String,
        /// The key recorded in the folder's `metadata.json`.
        existing_key: String,
        /// The folder.
        dir: PathBuf,
    },

    /// The instance has no folder under the workspace.
    #[error("instance {instance_key:?} of agent {agent_name:?} does not exist under {}", dir.display())]
    InstanceNotFound {
        /// The agent.
        agent_name: String,
        /// The instance.
        instance_key: String,
        /// Where it was looked for.
        dir: PathBuf,
    },

    /// An operator named a Turn the instance's log does not hold.
    #[error("{instance} has no Turn {turn} (its log holds {n_turns} Turn(s))")]
    TurnNotFound {
        /// `agentName:instanceKey`.
        instance: String,
        /// The Turn as the operator named it (a position or an id).
        turn: String,
        /// How many Turns the log holds.
        n_turns: usize,
    },

    /// A new instance (a fork) was asked for under a key that is taken.
    #[error("instance {instance} already exists at {}; nothing was changed", dir.display())]
    InstanceExists {
        /// `agentName:instanceKey`.
        instance: String,
        /// Its folder.
        dir: PathBuf,
    },

    /// An operator's edit of a stored conversation or extension state
    /// (`InstanceStore::edit_message`, `edit_extension_state`) that cannot
    /// be made as asked; nothing was changed.
    #[error("cannot edit {instance}: {reason}")]
    EditRefused {
        /// `agentName:instanceKey`.
        instance: String,
        /// Why.
        reason: String,
        /// What to do instead.
        suggestion: String,
    },

    /// An operator named a message the instance's conversation does not
    /// hold.
    #[error("{instance} holds no message {message_id}")]
    MessageNotFound {
        /// `agentName:instanceKey`.
        instance: String,
        /// The id as given.
        message_id: String,
    },

    /// A complete (newline-terminated) line of a JSONL log is not valid.
    #[error("{}:{line}: {reason}", path.display())]
    CorruptLog {
        /// The log.
        path: PathBuf,
        /// One-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },

    /// The commit marker at the end of `events.jsonl` describes a fold
    /// that cannot have happened to `base.jsonl` as it is (a hand edit, a
    /// copy of mismatched files, disk damage). Recovery changed nothing.
    #[error(
        "{}:{line}: impossible commit marker: {reason}; {} was left as it is",
        events_path.display(),
        base_path.display()
    )]
    ImpossibleCommitMarker {
        /// The `events.jsonl` holding the marker.
        events_path: PathBuf,
        /// One-based line number of the marker.
        line: usize,
        /// The `base.jsonl` it does not match.
        base_path: PathBuf,
        /// What does not match.
        reason: String,
    },

    /// A JSON state file (metadata or extension state) is not valid.
    #[error("{}: {reason}", path.display())]
    CorruptState {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },

    /// A value could not be encoded as JSON.
    #[error("cannot encode {what} as JSON: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },

    /// An earlier failure left the journal in a state only recovery can
    /// repair; further writes are refused rather than risk a mixed log.
    #[error("the message journal of {} stopped after a failed commit that could not be undone", dir.display())]
    JournalPoisoned {
        /// The instance's `messages/` folder.
        dir: PathBuf,
    },

    /// Another owner took the instance over (a newer claim on a shared
    /// log): this writer's record was refused, nothing of it was written,
    /// and every later call of the same journal fails the same way.
    #[error("instance {instance} belongs to another owner now: {reason}")]
    Fenced {
        /// The instance, as the backend names it.
        instance: String,
        /// What the backend reported.
        reason: String,
    },

    /// A storage backend other than the filesystem (the cluster) failed;
    /// `code` is the backend's own stable code.
    #[error("{message}")]
    Backend {
        /// The backend's code, for example `E_CLUSTER_TIMEOUT`.
        code: &'static str,
        /// What happened, where.
        message: String,
        /// What the user can do, when the backend knows.
        suggestion: Option<String>,
    },
}

impl StoreError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Io { .. } => "E_STORE_IO",
            StoreError::NoStateRoot => "E_STORE_NO_STATE_ROOT",
            StoreError::StateRootInProject { .. } => "E_STORE_STATE_ROOT_IN_PROJECT",
            StoreError::InstanceLocked { .. } => "E_STORE_INSTANCE_LOCKED",
            StoreError::InstanceKeyConflict { .. } => "E_STORE_INSTANCE_KEY_CONFLICT",
            StoreError::InstanceNotFound { .. } => "E_STORE_INSTANCE_NOT_FOUND",
            StoreError::TurnNotFound { .. } => "E_TURN_NOT_FOUND",
            StoreError::InstanceExists { .. } => "E_INSTANCE_EXISTS",
            StoreError::EditRefused { .. } => "E_INSTANCE_EDIT_REFUSED",
            StoreError::MessageNotFound { .. } => "E_MESSAGE_NOT_FOUND",
            StoreError::CorruptLog { .. } | StoreError::ImpossibleCommitMarker { .. } => {
                "E_STORE_CORRUPT_LOG"
            }
            StoreError::CorruptState { .. } => "E_STORE_CORRUPT_STATE",
            StoreError::Encode { .. } => "E_STORE_ENCODE",
            StoreError::JournalPoisoned { .. } => "E_STORE_JOURNAL_POISONED",
            StoreError::Fenced { .. } => "E_STORE_FENCED",
            StoreError::Backend { code, .. } => code,
        }
    }

    /// What the user can do about it, when there is something.
    pub fn suggestion(&self) -> Option<String> {
        match self {
            StoreError::Io { .. } | StoreError::Encode { .. } => None,
            StoreError::NoStateRoot => {
                Some("pass --state-root <dir> or set GOONDAN_STATE_ROOT".to_string())
            }
            StoreError::StateRootInProject { .. } => Some(
                "choose a --state-root outside the project folder (the default is ~/.goondan)"
                    .to_string(),
            ),
            StoreError::InstanceLocked { holder_pid, .. } => Some(match holder_pid {
                Some(pid) => format!(
                    "stop process {pid} (or the `gdn run` that owns it) before opening this instance again"
                ),
                None => "stop the other `gdn` process using this state root".to_string(),
            }),
            StoreError::InstanceKeyConflict { .. } => Some(
                "use instance keys that differ by more than letter case, or a case-sensitive filesystem for the state root"
                    .to_string(),
            ),
            StoreError::InstanceNotFound { .. } => {
                Some("list existing instances with `gdn instance list`".to_string())
            }
            StoreError::TurnNotFound {
                instance, n_turns, ..
            } => Some(if *n_turns == 0 {
                format!("{instance} has no Turn yet; send it an input first")
            } else {
                format!(
                    "name a Turn by its position (1 to {n_turns}) or its id, as `gdn instance history {instance}` lists them"
                )
            }),
            StoreError::InstanceExists { .. } => Some(
                "choose another key with --as, or leave --as out to get a new one".to_string(),
            ),
            StoreError::EditRefused { suggestion, .. } => Some(suggestion.clone()),
            StoreError::MessageNotFound { .. } => Some(
                "the Studio's conversation view shows each message's id, and `gdn instance messages` lists them".to_string(),
            ),
            StoreError::CorruptLog { path, line, .. } => Some(format!(
                "inspect line {line} of {}; remove or repair it (keep a copy) and retry",
                path.display()
            )),
            StoreError::ImpossibleCommitMarker {
                events_path, line, ..
            } => Some(format!(
                "keep a copy of the instance's messages/ folder; if base.jsonl holds the conversation you expect, delete line {line} of {} and start again (messages already in base.jsonl are not appended twice)",
                events_path.display()
            )),
            StoreError::CorruptState { path, .. } => Some(format!(
                "repair or remove {} (keep a copy) and retry",
                path.display()
            )),
            StoreError::JournalPoisoned { .. } => Some(
                "restart the agent process; opening the instance again runs recovery".to_string(),
            ),
            StoreError::Fenced { .. } => Some(
                "stop working on this instance: its new owner resumes it from the log".to_string(),
            ),
            StoreError::Backend { suggestion, .. } => suggestion.clone(),
        }
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        StoreError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn encode(what: &'static str, source: serde_json::Error) -> Self {
        StoreError::Encode { what, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_error_names_the_holder_and_suggests_stopping_it() {
        let error = StoreError::InstanceLocked {
            instance_key: "user:1".to_string(),
            lock_path: PathBuf::from("/s/instance.lock"),
            holder_pid: Some(42),
        };
        assert_eq!(error.code(), "E_STORE_INSTANCE_LOCKED");
        assert!(error.to_string().contains("by process 42"), "{error}");
        assert!(error.suggestion().unwrap().contains("42"));
    }

    #[test]
    fn backend_errors_keep_the_backend_code_and_fenced_has_its_own() {
        let error = StoreError::Backend {
            code: "E_CLUSTER_TIMEOUT",
            message: "the cluster did not answer".to_string(),
            suggestion: Some("check the servers".to_string()),
        };
        assert_eq!(error.code(), "E_CLUSTER_TIMEOUT");
        assert_eq!(error.suggestion().as_deref(), Some("check the servers"));
        let fenced = StoreError::Fenced {
            instance: "gdn.conv.ws.a.k".to_string(),
            reason: "wrong last sequence: 4".to_string(),
        };
        assert_eq!(fenced.code(), "E_STORE_FENCED");
        assert!(fenced.to_string().contains("gdn.conv.ws.a.k"), "{fenced}");
    }
}
