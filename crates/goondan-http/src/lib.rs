//! The accept loop every port Goondan opens to the network shares: the
//! connectors' webhook fronts and `gdn registry serve`.
//!
//! It is ours rather than `axum::serve`'s because those ports face the
//! internet: a connection past [`AcceptLimits::max_connections`] is
//! closed as soon as it is accepted, a request head slower than
//! [`AcceptLimits::header_timeout`] closes its connection, and running
//! out of file descriptors pauses accepting instead of ending it. What a
//! request may do once its head is in (body limits, auth) is the router's
//! business, not this crate's.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// A request head larger than this is refused unless a port says
/// otherwise: far above what a browser or a webhook sender writes, far
/// below hyper's own bound (about 400 KiB).
pub const DEFAULT_MAX_HEAD_BYTES: usize = 64 * 1024;

/// How long requests in progress may take to finish after a shutdown,
/// unless a port says otherwise.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(15);

/// The limits the accept loop enforces before a request reaches a router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptLimits {
    /// How many connections may be open; one more is closed at once.
    pub max_connections: u64,
    /// How long a request's head may take to arrive, so a connection
    /// that says nothing, or trickles its head a byte at a time, cannot
    /// hold a slot.
    pub header_timeout: Duration,
    /// The largest request head (request line and headers) read.
    pub max_head_bytes: usize,
    /// How long requests in progress may take to finish after the
    /// shutdown signal (a port with endless event streams keeps it short).
    pub drain_timeout: Duration,
}

impl AcceptLimits {
    /// `max_connections` and `header_timeout` with the default head bound
    /// and drain time.
    pub const fn new(max_connections: u64, header_timeout: Duration) -> AcceptLimits {
        AcceptLimits {
            max_connections,
            header_timeout,
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets
/// requests in progress finish (for at most `limits.drain_timeout`).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: AcceptLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let connections = Arc::new(Semaphore::new(
        usize::try_from(limits.max_connections).unwrap_or(usize::MAX),
    ));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of descriptors, or a connection reset before it
                    // was taken: wait a moment and go on accepting.
                    tracing::warn!("accepting a connection failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(limits.max_head_bytes)
            .serve_connection(
                TokioIo::new(stream),
                TowerToHyperService::new(router.clone()),
            );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(limits.drain_timeout, graceful.shutdown()).await;
    Ok(())
}
