//! Crash ledgers: where the orchestrator keeps each instance's crash
//! counter and backoff deadline, so a restarted orchestrator (or, in a
//! cluster, the next host that runs an instance) keeps backing off.

use goondan_cluster::crashes::{CrashEntry, CrashRecords};
use goondan_ipc::RoutingKey;
use goondan_orchestrator::orchestrator::{CrashLedger, CrashRecord};
use goondan_store::{InstanceMetadata, InstanceStore, WorkspacePaths};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Crash counters and backoff deadlines kept in each instance's
/// `metadata.json` under `workspace`.
pub(crate) fn local(workspace: &WorkspacePaths) -> CrashLedger {
    let reader = workspace.clone();
    let store = InstanceStore::new(workspace.clone());
    CrashLedger {
        load: Arc::new(move |key: &RoutingKey| {
            let path = reader
                .instance(&key.agent_name, &key.instance_key)
                .metadata_file();
            match InstanceMetadata::read(&path) {
                Ok(Some(metadata)) => CrashRecord {
                    consecutive_crashes: metadata.consecutive_crashes,
                    backoff_until: metadata
                        .backoff_until
                        .as_deref()
                        .and_then(|text| chrono::DateTime::parse_from_rfc3339(text).ok())
                        .map(SystemTime::from),
                },
                _ => CrashRecord::default(),
            }
        }),
        save: Arc::new(move |key: &RoutingKey, record: CrashRecord| {
            let outcome = store.update_metadata(&key.agent_name, &key.instance_key, |metadata| {
                metadata.consecutive_crashes = record.consecutive_crashes;
                metadata.backoff_until = record.backoff_until.map(|until| {
                    chrono::DateTime::<chrono::Utc>::from(until)
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                });
            });
            // An instance that never started has no folder yet; its
            // counters live in memory until it does.
            if let Err(error) = outcome {
                tracing::debug!(key = %key, code = error.code(), "crash counters not persisted: {error}");
            }
        }),
    }
}

/// A cluster host's crash counters: those of `crashes`, which every host
/// shares (an instance that moves keeps backing off), also written to the
/// instance's `metadata.json` under `workspace`, for `gdn instance list`
/// on this host.
pub(crate) fn cluster(workspace: &WorkspacePaths, crashes: CrashRecords) -> CrashLedger {
    let local = local(workspace);
    let reader = crashes.clone();
    CrashLedger {
        load: Arc::new(move |key: &RoutingKey| {
            let entry = reader.get(&key.agent_name, &key.instance_key);
            CrashRecord {
                consecutive_crashes: entry.consecutive_crashes,
                backoff_until: entry
                    .backoff_until_ms
                    .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
            }
        }),
        save: Arc::new(move |key: &RoutingKey, record: CrashRecord| {
            let backoff_until_ms = record.backoff_until.and_then(|until| {
                until
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .ok()
                    .map(|since| since.as_millis() as u64)
            });
            crashes.put(
                &key.agent_name,
                &key.instance_key,
                CrashEntry {
                    consecutive_crashes: record.consecutive_crashes,
                    backoff_until_ms,
                },
            );
            (local.save)(key, record);
        }),
    }
}
