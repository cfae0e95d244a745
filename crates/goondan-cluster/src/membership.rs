//! Membership: which hosts are alive, and which host holds each shard's
//! lease. It owns the `gdn-hosts` heartbeats and the `gdn-shards` leases;
//! it does not own the inbox or the instances (the host drains those, see
//! below), and it is not what makes writes safe: the conversation log's
//! compare-and-append fences a stale owner even while it believes it holds
//! a lease.
//!
//! # How ownership moves
//!
//! Every `renew_every` (1 s) a [`Membership`]:
//! 1. renews each lease it holds by compare-and-set on the lease's own
//!    revision, with a per-message TTL (5 s);
//! 2. writes its heartbeat `gdn-hosts/<host>` with the same TTL, after the
//!    leases, so it expires after them;
//! 3. computes each shard's owner by rendezvous hashing over the live hosts
//!    (every host computes the same answer, there is no leader), and for a
//!    shard it wins but does not hold, takes the lease if nobody holds it:
//!    compare-and-set on the revision it read (0 when the key is absent, the
//!    marker's when a lease expired or was released). A lease another host
//!    holds is never overwritten: it is taken only after that host released
//!    it or the server let it expire.
//!
//! Why raw publishes on `$KV.gdn-shards.sNNN`: async-nats 0.51's
//! `kv::Store::update` takes no TTL, and `create_with_ttl` over a delete
//! marker retries through `update` without it.
//!
//! # Handing a shard over without dropping work
//!
//! When a host joins, the shards it wins appear in the old owner's
//! [`Membership::to_drain`]. The old owner keeps renewing them until its
//! caller drained and released each one:
//! 1. stop pulling the shard ([`ShardInbox::close`](crate::inbox::ShardInbox::close),
//!    which NAKs the deliveries it held back);
//! 2. let the shard's running Turns finish and commit (`shutdown` to the
//!    children, wait for `shutdown_ack`);
//! 3. ack their deliveries, NAK the ones not started;
//! 4. [`Membership::release`] the shard: the lease is deleted by revision
//!    and the new owner takes it on its next tick.
//!
//! Releasing before step 3 drops nothing either (deliveries come back after
//! `ack_wait`, commits are fenced by the log), it only makes the handover
//! slower and may run an interrupted Turn's last step twice.
//! [`Membership::leave`] (`gdn stop`) releases everything at once, so the
//! caller drains every shard first.
//!
//! # Self-fencing
//!
//! [`Membership::is_fresh`] turns false once the last complete renewal
//! started more than TTL − 1 s ago (monotonic clock; no wall clocks are
//! compared across hosts). A host that is not fresh starts no Turn: its
//! leases may have expired and been taken.

use crate::connect::Cluster;
use crate::error::{request_error, ClusterError};
use crate::layout::{HOSTS_BUCKET, INBOX_STREAM, SHARDS_BUCKET};
use crate::subject::{shard_consumer_name, token};
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv::Operation;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{DirectGetErrorKind, LastRawMessageErrorKind};
use futures_util::{StreamExt, TryStreamExt};
use goondan_types::placement::{rendezvous_owner, SHARD_COUNT};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// How often leases are renewed and how long they live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MembershipTimings {
    /// How long a heartbeat or a lease lives without renewal (whole
    /// seconds; the server's `Nats-TTL` has no finer unit). At least 2 s.
    pub ttl: Duration,
    /// How often they are renewed; well under `ttl − 1 s`.
    pub renew_every: Duration,
}

impl Default for MembershipTimings {
    fn default() -> Self {
        MembershipTimings {
            ttl: Duration::from_secs(5),
            renew_every: Duration::from_secs(1),
        }
    }
}

/// A host's heartbeat, the value of `gdn-hosts/<host>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostInfo {
    /// The host id.
    pub host: String,
    /// When it joined (ISO 8601, its own clock; for display only).
    pub started_at: String,
    /// Its `gdn` version.
    pub version: String,
    /// The digest of the bundle it runs (see [`crate::bundle`]), once
    /// it runs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// The last active bundle it refused, and why (it runs on with
    /// `bundle`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_refused: Option<crate::bundle::Refusal>,
}

/// A shard lease, the value of `gdn-shards/sNNN`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The host holding it.
    pub host: String,
    /// The revision at which the host acquired it: unique per acquisition
    /// and increasing, so a later owner always has a larger epoch (0 for the
    /// instant between the acquiring write and the one that records it).
    pub epoch: u64,
}

/// One shard in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    /// The shard.
    pub shard: u16,
    /// Its lease, when some host holds it.
    pub lease: Option<Lease>,
    /// Inbox messages not delivered yet, when its consumer exists.
    pub pending: Option<u64>,
    /// Inbox messages delivered and not acked yet, when its consumer exists.
    pub ack_pending: Option<usize>,
}

/// What `gdn cluster status` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// The bundle the swarm runs, once one was made active.
    pub active_bundle: Option<crate::bundle::ActiveBundle>,
    /// Live hosts (their heartbeat has not expired), by id.
    pub hosts: Vec<HostInfo>,
    /// Every shard, in order.
    pub shards: Vec<ShardStatus>,
}

/// The key of a shard's lease.
pub fn lease_key(shard: u16) -> String {
    format!("s{shard:03}")
}

fn lease_subject(shard: u16) -> String {
    format!("$KV.{SHARDS_BUCKET}.{}", lease_key(shard))
}

fn heartbeat_subject(host_id: &str) -> String {
    format!("$KV.{HOSTS_BUCKET}.{}", token(host_id))
}

/// A lease this host holds.
#[derive(Debug, Clone, Copy)]
struct Held {
    revision: u64,
    epoch: u64,
}

struct Shared {
    cluster: Cluster,
    host_id: String,
    info: Mutex<HostInfo>,
    timings: MembershipTimings,
    /// Serializes the renewal tick with `release` and `leave`, which all
    /// compare-and-set the same revisions.
    held: tokio::sync::Mutex<BTreeMap<u16, Held>>,
    /// Live hosts by heartbeat key.
    live: Mutex<BTreeMap<String, String>>,
    /// When the last complete renewal started.
    renewed_at: Mutex<Option<Instant>>,
    owned: watch::Sender<BTreeSet<u16>>,
    to_drain: watch::Sender<BTreeSet<u16>>,
    hosts_changed: Notify,
}

/// This host's membership: its heartbeat, and the leases of the shards it
/// owns, renewed in the background. Dropping it stops renewing without
/// releasing anything (as a crash would); [`leave`](Self::leave) hands
/// everything over.
pub struct Membership {
    shared: Arc<Shared>,
    renewer: Mutex<Option<JoinHandle<()>>>,
    watcher: JoinHandle<()>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("host_id", &self.shared.host_id)
            .field("owned", &*self.shared.owned.borrow())
            .finish_non_exhaustive()
    }
}

impl Membership {
    /// Joins with the default [`MembershipTimings`].
    pub async fn join(cluster: Cluster, host_id: String) -> Result<Membership, ClusterError> {
        Membership::join_with(cluster, host_id, MembershipTimings::default()).await
    }

    /// Writes this host's heartbeat, waits until it knows the live hosts,
    /// takes the leases of the free shards it wins, and keeps renewing in
    /// the background.
    pub async fn join_with(
        cluster: Cluster,
        host_id: String,
        timings: MembershipTimings,
    ) -> Result<Membership, ClusterError> {
        let timings = MembershipTimings {
            ttl: Duration::from_secs(timings.ttl.as_secs_f64().ceil().max(2.0) as u64),
            renew_every: timings.renew_every,
        };
        let shared = Arc::new(Shared {
            info: Mutex::new(HostInfo {
                host: host_id.clone(),
                started_at: goondan_types::now_iso(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                bundle: None,
                bundle_refused: None,
            }),
            cluster,
            host_id,
            timings,
            held: tokio::sync::Mutex::new(BTreeMap::new()),
            live: Mutex::new(BTreeMap::new()),
            renewed_at: Mutex::new(None),
            owned: watch::Sender::new(BTreeSet::new()),
            to_drain: watch::Sender::new(BTreeSet::new()),
            hosts_changed: Notify::new(),
        });
        shared.heartbeat().await?;
        let hosts = shared
            .cluster
            .jetstream()
            .get_key_value(HOSTS_BUCKET)
            .await
            .map_err(|e| request_error(&format!("open {HOSTS_BUCKET}"), e))?;
        let mut entries = hosts
            .watch_with_history(">")
            .await
            .map_err(|e| request_error(&format!("watch {HOSTS_BUCKET}"), e))?;
        // The history ends with an entry of delta 0; this host's own
        // heartbeat is in it, so it comes.
        crate::layout::catch_up(
            &shared.cluster,
            &mut entries,
            HOSTS_BUCKET,
            &format!("the live hosts in {HOSTS_BUCKET}"),
            |entry| {
                shared.saw_host(entry);
            },
        )
        .await?;
        let watcher = tokio::spawn({
            let shared = Arc::clone(&shared);
            async move {
                while let Some(entry) = entries.next().await {
                    match entry {
                        // Heartbeats renew every second: only a host
                        // joining or leaving is worth an early tick.
                        Ok(entry) => {
                            if shared.saw_host(entry) {
                                shared.hosts_changed.notify_one();
                            }
                        }
                        Err(error) => tracing::warn!("watching {HOSTS_BUCKET}: {error}"),
                    }
                }
                tracing::error!(
                    host = shared.host_id,
                    "the watch of {HOSTS_BUCKET} ended; the live hosts are no longer followed"
                );
            }
        });
        let first_expiring = shared.tick().await;
        let renewer = tokio::spawn({
            let shared = Arc::clone(&shared);
            async move {
                let mut interval = tokio::time::interval(shared.timings.renew_every);
                interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                interval.tick().await;
                let soon = shared.timings.renew_every / 4;
                let mut expiring = first_expiring;
                loop {
                    tokio::select! {
                        _ = interval.tick() => {}
                        _ = shared.hosts_changed.notified() => {}
                        _ = tokio::time::sleep(soon), if expiring => {}
                    }
                    expiring = shared.tick().await;
                }
            }
        });
        Ok(Membership {
            shared,
            renewer: Mutex::new(Some(renewer)),
            watcher,
        })
    }

    /// Announces the bundle this host runs, and the active one it refused
    /// if it did (`None` once it runs the active one), in its heartbeat at
    /// once.
    pub async fn set_bundle(
        &self,
        digest: &str,
        refused: Option<crate::bundle::Refusal>,
    ) -> Result<(), ClusterError> {
        {
            let mut info = self.shared.info.lock().expect("host info lock");
            info.bundle = Some(digest.to_string());
            info.bundle_refused = refused;
        }
        self.shared.heartbeat().await
    }

    /// The host id.
    pub fn host_id(&self) -> &str {
        &self.shared.host_id
    }

    /// The shards whose lease this host holds now (including those it must
    /// drain). A host pulls the inboxes of these shards.
    pub fn owned(&self) -> watch::Receiver<BTreeSet<u16>> {
        self.shared.owned.subscribe()
    }

    /// The shards this host holds but no longer wins (a host joined): drain
    /// each, then [`release`](Self::release) it (see the module docs).
    pub fn to_drain(&self) -> watch::Receiver<BTreeSet<u16>> {
        self.shared.to_drain.subscribe()
    }

    /// The epoch of the lease this host holds on `shard`: what it writes
    /// into an instance's `claim`.
    pub async fn epoch(&self, shard: u16) -> Option<u64> {
        self.shared
            .held
            .lock()
            .await
            .get(&shard)
            .map(|held| held.epoch)
    }

    /// False once the last complete renewal started more than TTL − 1 s
    /// ago: this host must not start Turns, its leases may be gone.
    pub fn is_fresh(&self) -> bool {
        let margin = self.shared.timings.ttl - Duration::from_secs(1);
        self.shared
            .renewed_at
            .lock()
            .expect("renewal clock")
            .is_some_and(|at| at.elapsed() < margin)
    }

    /// Deletes the lease on `shard` (by revision, so a lease that already
    /// moved on is left alone), after the caller drained it. Releasing a
    /// shard this host still wins only hands it over until the next tick
    /// takes it back.
    pub async fn release(&self, shard: u16) -> Result<(), ClusterError> {
        let mut held = self.shared.held.lock().await;
        if let Some(lease) = held.remove(&shard) {
            self.shared.delete_lease(shard, lease.revision).await?;
        }
        self.shared.publish_owned(&held);
        Ok(())
    }

    /// Stops renewing, releases every lease and deletes the heartbeat, so
    /// the other hosts take the shards at once (`gdn stop`). Drain every
    /// owned shard first.
    pub async fn leave(self) -> Result<(), ClusterError> {
        // Taken first, so no renewal is half done: an aborted renewal
        // could have moved a lease to a revision this host never learnt,
        // and the release by revision would then miss it.
        let mut held = self.shared.held.lock().await;
        if let Some(renewer) = self.renewer.lock().expect("renewer").take() {
            renewer.abort();
        }
        self.watcher.abort();
        let releases = held
            .iter()
            .map(|(shard, lease)| self.shared.delete_lease(*shard, lease.revision));
        let results = futures_util::future::join_all(releases).await;
        held.clear();
        self.shared.publish_owned(&held);
        *self.shared.renewed_at.lock().expect("renewal clock") = None;
        let heartbeat = self
            .shared
            .publish(
                &heartbeat_subject(&self.shared.host_id),
                PublishMessage::build().header("KV-Operation", "DEL"),
                "delete the heartbeat",
            )
            .await;
        results.into_iter().collect::<Result<Vec<()>, _>>()?;
        heartbeat.map(drop)
    }

    /// Stops renewing without releasing anything, as a host that is paused
    /// (SIGSTOP) or cut off would: its leases expire on the server, and
    /// [`is_fresh`](Self::is_fresh) turns false.
    #[cfg(feature = "testing")]
    pub fn stop_renewing(&self) {
        if let Some(renewer) = self.renewer.lock().expect("renewer").take() {
            renewer.abort();
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Some(renewer) = self.renewer.lock().expect("renewer").take() {
            renewer.abort();
        }
        self.watcher.abort();
    }
}

/// What a lease key holds.
enum LeaseRecord {
    /// Nobody holds it; a new lease is written over this revision.
    Free(u64),
    /// A lease, at this revision.
    Held(u64, Lease),
}

/// The outcome of trying to take a lease.
enum Acquired {
    Taken(Held),
    /// Another host holds it.
    HeldBy(String),
    /// Another host wrote it between the read and the write.
    Raced,
}

/// The outcome of one compare-and-set on a lease.
enum Cas {
    Written(u64),
    Conflict,
}

impl Shared {
    /// Applies one change of `gdn-hosts`; true when the set of live hosts
    /// changed.
    fn saw_host(&self, entry: async_nats::jetstream::kv::Entry) -> bool {
        let mut live = self.live.lock().expect("live hosts");
        match entry.operation {
            Operation::Put => match serde_json::from_slice::<HostInfo>(&entry.value) {
                Ok(info) => live.insert(entry.key, info.host.clone()).as_ref() != Some(&info.host),
                Err(error) => {
                    tracing::warn!(key = entry.key, "unreadable heartbeat: {error}");
                    false
                }
            },
            Operation::Delete | Operation::Purge => live.remove(&entry.key).is_some(),
        }
    }

    async fn heartbeat(&self) -> Result<(), ClusterError> {
        let body = {
            let info = self.info.lock().expect("host info lock");
            serde_json::to_vec(&*info).expect("heartbeat encodes")
        };
        self.publish(
            &heartbeat_subject(&self.host_id),
            PublishMessage::build()
                .payload(body.into())
                .ttl(self.timings.ttl),
            "write the heartbeat",
        )
        .await
        .map(drop)
    }

    async fn publish(
        &self,
        subject: &str,
        message: PublishMessage,
        what: &str,
    ) -> Result<Cas, ClusterError> {
        let answer = async {
            self.cluster
                .jetstream()
                .send_publish(subject.to_string(), message)
                .await?
                .await
        }
        .await;
        match answer {
            Ok(ack) => Ok(Cas::Written(ack.sequence)),
            Err(error) if error.kind() == PublishErrorKind::WrongLastSequence => Ok(Cas::Conflict),
            Err(error) if error.kind() == PublishErrorKind::TimedOut => {
                Err(ClusterError::Timeout {
                    what: format!("{what} ({subject})"),
                    after: self.cluster.options().request_timeout,
                })
            }
            Err(error) => Err(request_error(&format!("{what} ({subject})"), error)),
        }
    }

    fn lease_message(&self, epoch: u64, expected: u64) -> PublishMessage {
        let lease = Lease {
            host: self.host_id.clone(),
            epoch,
        };
        PublishMessage::build()
            .payload(serde_json::to_vec(&lease).expect("lease encodes").into())
            .expected_last_subject_sequence(expected)
            .ttl(self.timings.ttl)
    }

    async fn delete_lease(&self, shard: u16, revision: u64) -> Result<(), ClusterError> {
        let message = PublishMessage::build()
            .header("KV-Operation", "DEL")
            .expected_last_subject_sequence(revision);
        match self
            .publish(&lease_subject(shard), message, "release the lease")
            .await?
        {
            Cas::Written(_) => Ok(()),
            Cas::Conflict => {
                tracing::warn!(shard, "the lease had expired before its release");
                Ok(())
            }
        }
    }

    /// The last record of `shard`'s lease key.
    async fn read_lease(&self, shard: u16) -> Result<LeaseRecord, ClusterError> {
        read_lease(&self.cluster, shard).await
    }

    /// Takes the lease on `shard` if it is free: the acquiring write, then
    /// the write that records its revision as the epoch.
    async fn acquire(&self, shard: u16) -> Result<Acquired, ClusterError> {
        let expected = match self.read_lease(shard).await? {
            LeaseRecord::Free(revision) => revision,
            LeaseRecord::Held(_, lease) => return Ok(Acquired::HeldBy(lease.host)),
        };
        let subject = lease_subject(shard);
        let Cas::Written(acquired) = self
            .publish(&subject, self.lease_message(0, expected), "take the lease")
            .await?
        else {
            return Ok(Acquired::Raced);
        };
        match self
            .publish(
                &subject,
                self.lease_message(acquired, acquired),
                "record the lease epoch",
            )
            .await?
        {
            Cas::Written(revision) => Ok(Acquired::Taken(Held {
                revision,
                epoch: acquired,
            })),
            Cas::Conflict => Ok(Acquired::Raced),
        }
    }

    async fn renew(&self, shard: u16, lease: Held) -> Result<Option<Held>, ClusterError> {
        match self
            .publish(
                &lease_subject(shard),
                self.lease_message(lease.epoch, lease.revision),
                "renew the lease",
            )
            .await?
        {
            Cas::Written(revision) => Ok(Some(Held { revision, ..lease })),
            // An earlier renewal may have been stored although its answer
            // was lost: the lease is still this host's if it says so.
            Cas::Conflict => match self.read_lease(shard).await? {
                LeaseRecord::Held(revision, current)
                    if current.host == self.host_id && current.epoch == lease.epoch =>
                {
                    Ok(Some(Held { revision, ..lease }))
                }
                _ => Ok(None),
            },
        }
    }

    /// One round: renewals, heartbeat, acquisitions. True when a shard this
    /// host wins is still leased to a host that is gone: its lease expires
    /// any moment, worth looking again soon.
    async fn tick(&self) -> bool {
        let started = Instant::now();
        let mut held = self.held.lock().await;
        let mut complete = true;

        let renewals = held
            .iter()
            .map(|(shard, lease)| async move { (*shard, self.renew(*shard, *lease).await) });
        for (shard, outcome) in futures_util::future::join_all(renewals).await {
            match outcome {
                Ok(Some(lease)) => {
                    held.insert(shard, lease);
                }
                Ok(None) => {
                    tracing::warn!(host = self.host_id, shard, "lost the lease (it expired)");
                    held.remove(&shard);
                }
                Err(error) => {
                    tracing::warn!(host = self.host_id, shard, "renewing the lease: {error}");
                    complete = false;
                }
            }
        }
        // The heartbeat after the leases, so it expires after them: a host
        // that sees this one's heartbeat go finds its leases free already.
        if let Err(error) = self.heartbeat().await {
            tracing::warn!(host = self.host_id, "heartbeat: {error}");
            complete = false;
        }
        if complete {
            *self.renewed_at.lock().expect("renewal clock") = Some(started);
        }
        let mut live: BTreeSet<String> = self
            .live
            .lock()
            .expect("live hosts")
            .values()
            .cloned()
            .collect();
        live.insert(self.host_id.clone());

        let wanted: Vec<u16> = (0..SHARD_COUNT)
            .filter(|shard| !held.contains_key(shard))
            .filter(|shard| {
                rendezvous_owner(*shard, live.iter().map(String::as_str))
                    == Some(self.host_id.as_str())
            })
            .collect();
        let acquisitions = wanted
            .into_iter()
            .map(|shard| async move { (shard, self.acquire(shard).await) });
        let mut expiring = false;
        for (shard, outcome) in futures_util::future::join_all(acquisitions).await {
            match outcome {
                Ok(Acquired::Taken(lease)) => {
                    held.insert(shard, lease);
                }
                Ok(Acquired::HeldBy(host)) => expiring |= !live.contains(&host),
                Ok(Acquired::Raced) => {}
                Err(error) => {
                    tracing::warn!(host = self.host_id, shard, "taking the lease: {error}");
                }
            }
        }

        let to_drain: BTreeSet<u16> = held
            .keys()
            .copied()
            .filter(|shard| {
                rendezvous_owner(*shard, live.iter().map(String::as_str))
                    != Some(self.host_id.as_str())
            })
            .collect();
        self.to_drain
            .send_if_modified(|old| replace_if_changed(old, to_drain));
        self.publish_owned(&held);
        expiring
    }

    fn publish_owned(&self, held: &BTreeMap<u16, Held>) {
        let owned: BTreeSet<u16> = held.keys().copied().collect();
        self.to_drain.send_if_modified(|old| {
            let kept: BTreeSet<u16> = old.intersection(&owned).copied().collect();
            replace_if_changed(old, kept)
        });
        self.owned
            .send_if_modified(|old| replace_if_changed(old, owned));
    }
}

fn replace_if_changed(old: &mut BTreeSet<u16>, new: BTreeSet<u16>) -> bool {
    if *old == new {
        return false;
    }
    *old = new;
    true
}

/// The last record of `shard`'s lease key: free (absent, released or
/// expired) at a revision, or held.
async fn read_lease(cluster: &Cluster, shard: u16) -> Result<LeaseRecord, ClusterError> {
    let stream = cluster
        .jetstream()
        .get_stream_no_info(format!("KV_{SHARDS_BUCKET}"))
        .await
        .map_err(|e| request_error(&format!("open {SHARDS_BUCKET}"), e))?;
    match stream
        .direct_get_last_for_subject(lease_subject(shard))
        .await
    {
        Ok(message) => {
            if is_removal(&message) {
                return Ok(LeaseRecord::Free(message.sequence));
            }
            serde_json::from_slice(&message.payload)
                .map(|lease| LeaseRecord::Held(message.sequence, lease))
                .map_err(|e| ClusterError::Corrupt {
                    what: format!("{SHARDS_BUCKET}/{}", lease_key(shard)),
                    reason: e.to_string(),
                })
        }
        Err(error) if matches!(error.kind(), DirectGetErrorKind::NotFound) => {
            Ok(LeaseRecord::Free(0))
        }
        Err(error) => Err(request_error(
            &format!("read {}", lease_subject(shard)),
            error,
        )),
    }
}

/// Who holds `shard`'s lease now, read without joining; `None` while no
/// host does (its owner died and the lease expired, and no host took it
/// yet). A lease says who should serve the shard, not who may write: the
/// log's claims decide that.
pub async fn shard_lease(cluster: &Cluster, shard: u16) -> Result<Option<Lease>, ClusterError> {
    Ok(match read_lease(cluster, shard).await? {
        LeaseRecord::Held(_, lease) => Some(lease),
        LeaseRecord::Free(_) => None,
    })
}

/// The live hosts, each shard's lease and each shard's inbox backlog, read
/// without joining (`gdn cluster status`).
pub async fn cluster_status(cluster: &Cluster) -> Result<ClusterStatus, ClusterError> {
    let jetstream = cluster.jetstream();
    let hosts_bucket = jetstream
        .get_key_value(HOSTS_BUCKET)
        .await
        .map_err(|e| request_error(&format!("open {HOSTS_BUCKET}"), e))?;
    let mut hosts = Vec::new();
    for (key, value) in read_bucket(&hosts_bucket, HOSTS_BUCKET).await? {
        match serde_json::from_slice::<HostInfo>(&value) {
            Ok(info) => hosts.push(info),
            Err(error) => tracing::warn!(key, "unreadable heartbeat: {error}"),
        }
    }
    hosts.sort_by(|a, b| a.host.cmp(&b.host));
    let active_bundle = crate::bundle::active(cluster).await?;

    let shards_bucket = jetstream
        .get_key_value(SHARDS_BUCKET)
        .await
        .map_err(|e| request_error(&format!("open {SHARDS_BUCKET}"), e))?;
    let mut shards: Vec<ShardStatus> = (0..SHARD_COUNT)
        .map(|shard| ShardStatus {
            shard,
            lease: None,
            pending: None,
            ack_pending: None,
        })
        .collect();
    for (key, value) in read_bucket(&shards_bucket, SHARDS_BUCKET).await? {
        let shard = key
            .strip_prefix('s')
            .and_then(|n| n.parse::<u16>().ok())
            .filter(|n| *n < SHARD_COUNT);
        match (shard, serde_json::from_slice::<Lease>(&value)) {
            (Some(shard), Ok(lease)) => shards[usize::from(shard)].lease = Some(lease),
            (_, Err(error)) => tracing::warn!(key, "unreadable lease: {error}"),
            (None, _) => tracing::warn!(key, "a lease key that names no shard"),
        }
    }

    let inbox = jetstream
        .get_stream_no_info(INBOX_STREAM)
        .await
        .map_err(|e| request_error(&format!("open {INBOX_STREAM}"), e))?;
    let mut consumers = inbox.consumers();
    while let Some(info) = consumers
        .try_next()
        .await
        .map_err(|e| request_error(&format!("list the consumers of {INBOX_STREAM}"), e))?
    {
        if let Some(status) = shards
            .iter_mut()
            .find(|status| shard_consumer_name(status.shard) == info.name)
        {
            status.pending = Some(info.num_pending);
            status.ack_pending = Some(info.num_ack_pending);
        }
    }
    Ok(ClusterStatus {
        active_bundle,
        hosts,
        shards,
    })
}

/// Every live key of `bucket` with its value. Values are read from the
/// bucket's stream, since a hashed subject token (`~…`) is not a key
/// `kv::Store::get` accepts.
async fn read_bucket(
    bucket: &async_nats::jetstream::kv::Store,
    name: &str,
) -> Result<Vec<(String, Vec<u8>)>, ClusterError> {
    let keys: Vec<String> = bucket
        .keys()
        .await
        .map_err(|e| request_error(&format!("list {name}"), e))?
        .try_collect()
        .await
        .map_err(|e| request_error(&format!("list {name}"), e))?;
    let mut entries = Vec::with_capacity(keys.len());
    for key in keys {
        // From the stream leader: a replica may be a moment behind, and
        // show a lease that was just taken as still expired.
        match bucket
            .stream
            .get_last_raw_message_by_subject(&format!("$KV.{name}.{key}"))
            .await
        {
            Ok(message) if !is_removal(&message) => {
                entries.push((key, message.payload.to_vec()));
            }
            Ok(_) => {}
            // Expired or deleted since it was listed.
            Err(error) if matches!(error.kind(), LastRawMessageErrorKind::NoMessageFound) => {}
            Err(error) => return Err(request_error(&format!("read {name}/{key}"), error)),
        }
    }
    Ok(entries)
}

/// True for a key-value record that removes its key: a delete or purge, or
/// the marker the server leaves when a value's TTL ran out.
fn is_removal(message: &async_nats::jetstream::message::StreamMessage) -> bool {
    message
        .headers
        .get("KV-Operation")
        .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"))
        || message.headers.get("Nats-Marker-Reason").is_some()
}
