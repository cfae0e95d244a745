//! [`ClusterError`]: what can go wrong talking to the cluster, with codes.

use std::time::Duration;

/// A failure of the cluster engine, with a stable code and a suggestion.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// `--cluster` (or `GOONDAN_CLUSTER`) does not parse.
    #[error("bad cluster address `{given}`: {reason}")]
    BadUrl {
        /// What was given.
        given: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No server of the list could be reached.
    #[error("cannot connect to the cluster at {urls}: {reason}")]
    Connect {
        /// The servers tried.
        urls: String,
        /// The client's error.
        reason: String,
    },
    /// A stream, bucket or object store exists with settings this version
    /// cannot work with, or cannot be created (too few servers, a server
    /// older than 2.11).
    #[error("cluster layout: {what}: {reason}")]
    Layout {
        /// The stream, bucket or object store.
        what: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// Another owner wrote to the log after this writer last read it.
    #[error("instance {instance} was taken over by another owner (log at {actual}, this writer expected {expected})")]
    Fenced {
        /// The instance's subject prefix.
        instance: String,
        /// The sequence this writer expected to be last.
        expected: u64,
        /// What the server reported, when it said.
        actual: String,
    },
    /// The cluster did not answer in time (no quorum, a partition).
    #[error("the cluster did not answer {what} within {after:?}")]
    Timeout {
        /// What was asked.
        what: String,
        /// How long we waited.
        after: Duration,
    },
    /// Any other answer from the server or the client.
    #[error("cluster request {what} failed: {reason}")]
    Request {
        /// What was asked.
        what: String,
        /// The error.
        reason: String,
    },
    /// A message in a stream that is not what this version writes.
    #[error("unreadable cluster record {what}: {reason}")]
    Corrupt {
        /// Where it was.
        what: String,
        /// Why it does not decode.
        reason: String,
    },
    /// An object a record names is not in its store (removed by hand, or
    /// never uploaded).
    #[error("{what} is not in the cluster")]
    Missing {
        /// The store and object.
        what: String,
    },
    /// The servers hold no Goondan layout: no host has started yet.
    #[error("the cluster has no {missing} yet: no `gdn run --cluster` host has started on it")]
    NotStarted {
        /// The stream that is missing.
        missing: String,
    },
    /// A new instance (a fork) was asked for under a key whose log holds
    /// records already.
    #[error("instance {instance} already exists in the cluster; nothing was changed")]
    InstanceExists {
        /// `agentName:instanceKey`.
        instance: String,
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
    /// No live host owned the instance while a request looked for one.
    #[error("no host of the cluster owns {instance} (shard {shard}){}; looked for {waited:?}", last_seen.as_ref().map(|host| format!(", last held by {host}")).unwrap_or_default())]
    NoOwner {
        /// `agent:instanceKey`.
        instance: String,
        /// Its shard.
        shard: u16,
        /// The host whose lease was last seen, when one was.
        last_seen: Option<String>,
        /// How long it looked.
        waited: Duration,
    },
    /// The owner took a request and did not answer in time.
    #[error("{host}, the owner of {instance}, did not answer within {after:?}")]
    OwnerSilent {
        /// `agent:instanceKey`.
        instance: String,
        /// The owner.
        host: String,
        /// How long the request waited.
        after: Duration,
    },
    /// A message larger than this version publishes.
    #[error("{what} is {bytes} bytes, over the {limit}-byte limit of one cluster message")]
    TooLarge {
        /// The message.
        what: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

impl ClusterError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            ClusterError::BadUrl { .. } => "E_CLUSTER_URL",
            ClusterError::Connect { .. } => "E_CLUSTER_CONNECT",
            ClusterError::Layout { .. } => "E_CLUSTER_LAYOUT",
            ClusterError::Fenced { .. } => "E_CLUSTER_FENCED",
            ClusterError::Timeout { .. } => "E_CLUSTER_TIMEOUT",
            ClusterError::Request { .. } => "E_CLUSTER_REQUEST",
            ClusterError::Corrupt { .. } => "E_CLUSTER_CORRUPT",
            ClusterError::NotStarted { .. } => "E_CLUSTER_NOT_STARTED",
            ClusterError::Missing { .. } => "E_CLUSTER_MISSING",
            ClusterError::TooLarge { .. } => "E_CLUSTER_TOO_LARGE",
            ClusterError::InstanceExists { .. } => "E_INSTANCE_EXISTS",
            ClusterError::TurnNotFound { .. } => "E_TURN_NOT_FOUND",
            ClusterError::NoOwner { .. } => "E_CLUSTER_NO_OWNER",
            ClusterError::OwnerSilent { .. } => "E_CLUSTER_OWNER_TIMEOUT",
        }
    }

    /// What the user can do about it.
    pub fn suggestion(&self) -> Option<String> {
        Some(match self {
            ClusterError::BadUrl { .. } => {
                "give comma-separated server addresses, e.g. nats://10.0.0.1:4222,nats://10.0.0.2:4222".into()
            }
            ClusterError::NotStarted { .. } => {
                "start a host first (`gdn run --cluster URLS` with the bundle); it creates the streams and buckets".into()
            }
            ClusterError::Connect { .. } => {
                "check that the NATS servers run with JetStream enabled and that this host can reach them (credentials: GOONDAN_CLUSTER_CREDS)".into()
            }
            ClusterError::Layout { .. } => {
                "Goondan needs nats-server 2.11 or later with JetStream; set GOONDAN_CLUSTER_REPLICAS to the number of servers (1 for a single dev server, 3 in production)".into()
            }
            ClusterError::Fenced { .. } => {
                "another host owns this instance now; nothing was written, and the new owner resumes it".into()
            }
            ClusterError::Timeout { .. } => {
                "a majority of the NATS servers must be reachable; check `gdn cluster status` and the servers' logs".into()
            }
            ClusterError::TooLarge { .. } => {
                "send large content as a blob reference instead of inline".into()
            }
            ClusterError::Missing { .. } => {
                "the record that names it is unusable; for a bundle, deploy one again with `gdn cluster deploy`".into()
            }
            ClusterError::InstanceExists { .. } => {
                "choose another key with --as, or leave --as out to get a new one".into()
            }
            ClusterError::TurnNotFound {
                instance, n_turns, ..
            } => {
                if *n_turns == 0 {
                    format!("{instance} has no Turn yet; send it an input first")
                } else {
                    format!(
                        "name a Turn by its position (1 to {n_turns}) or its id, as `gdn instance history --cluster URLS {instance}` lists them"
                    )
                }
            }
            ClusterError::NoOwner { .. } => {
                "start a host (`gdn run --cluster URLS`), or wait until `gdn cluster status` shows every shard owned, then try again".into()
            }
            ClusterError::OwnerSilent { host, .. } => format!(
                "{host} may still act on it: look before asking again (`gdn approvals`, `gdn instance list --cluster`), and read that host's log"
            ),
            ClusterError::Request { .. } | ClusterError::Corrupt { .. } => return None,
        })
    }
}

/// A [`ClusterError::Request`] for `what`, from whatever the client said.
pub(crate) fn request_error(what: &str, error: impl std::fmt::Display) -> ClusterError {
    ClusterError::Request {
        what: what.to_string(),
        reason: error.to_string(),
    }
}
