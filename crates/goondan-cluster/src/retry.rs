//! How this crate waits out a busy cluster: an operation that fails with
//! a timeout, a lost connection or a leader election is tried again every
//! [`RETRY_PAUSE`] until [`RETRY_DEADLINE`]. The conversation log and the
//! object stores share it.

use crate::error::ClusterError;
use std::time::{Duration, Instant};

/// How long a write or a read keeps retrying through timeouts, lost
/// connections and leader elections (measured here: a killed stream
/// leader stalls writes for 3 to 11 s on a loaded two-core machine).
pub(crate) const RETRY_DEADLINE: Duration = Duration::from_secs(20);

/// How long to wait between two attempts.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// Runs `attempt` again while it fails (a leader election, a lost
/// connection) until [`RETRY_DEADLINE`], then returns its last error.
pub(crate) async fn retrying<T, F, Fut>(what: &str, mut attempt: F) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    let deadline = Instant::now() + RETRY_DEADLINE;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            // Gone is gone: waiting does not bring it back.
            Err(error @ ClusterError::Missing { .. }) => return Err(error),
            Err(error) if Instant::now() < deadline => {
                tracing::debug!(%error, "{what}: retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(error) => return Err(error),
        }
    }
}
