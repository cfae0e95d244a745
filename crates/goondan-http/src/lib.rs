//! The accept loop every port Goondan opens to the network shares: the
//! connectors' webhook fronts, `gdn registry serve`, the Studio and `gdn
//! mcp serve --http` and `gdn serve`; the guards their routers apply
//! before a body is read ([`access`]: token, `Origin`, `Host`); and the
//! rule for the tokens that guard them ([`token`]).
//!
//! It is ours rather than `axum::serve`'s because those ports face the
//! internet: a connection past [`AcceptLimits::max_connections`], or past
//! [`AcceptLimits::max_connections_per_client`] from one client, is
//! closed as soon as it is accepted, a request head slower than
//! [`AcceptLimits::header_timeout`] (or an idle kept-alive connection
//! that long) closes its connection, and running out of file descriptors
//! pauses accepting instead of ending it. Every request carries its
//! peer's address as axum's `ConnectInfo<SocketAddr>`, for a router that
//! keeps something per client. What a request may do once its head is in
//! (body limits, what it may touch) is the router's business.
#![warn(missing_docs, unreachable_pub)]
#![forbid(unsafe_code)]

pub mod access;
pub mod error;
pub mod token;

pub use error::HttpError;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower_service::Service;

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
    /// How many of them one client ([`client_of`]) may hold; one more
    /// from it is closed at once, so a single client that opens
    /// connections and says nothing cannot lock everyone else out.
    pub max_connections_per_client: u64,
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
    /// `max_connections` and `header_timeout` with the default share per
    /// client ([`default_per_client`]), head bound and drain time.
    pub const fn new(max_connections: u64, header_timeout: Duration) -> AcceptLimits {
        AcceptLimits {
            max_connections,
            max_connections_per_client: default_per_client(max_connections),
            header_timeout,
            max_head_bytes: DEFAULT_MAX_HEAD_BYTES,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
        }
    }
}

/// The share of `max_connections` one client may hold unless a port says
/// otherwise: a quarter, at least one. A quarter leaves room for three
/// more clients as greedy as the worst, and is still far above what a
/// browser (six per host) or a webhook sender opens.
pub const fn default_per_client(max_connections: u64) -> u64 {
    let quarter = max_connections / 4;
    if quarter == 0 {
        1
    } else {
        quarter
    }
}

/// Who counts as one client: an IPv4 address, or an IPv6 /64 (one host
/// is handed a whole /64, so counting single IPv6 addresses would let it
/// open as many allowances as it likes). An IPv4 address written as IPv6
/// (`::ffff:a.b.c.d`) is that IPv4 address.
pub fn client_of(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None if v6.is_loopback() => peer,
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

/// Open connections per client; an entry goes when its last connection
/// closes, so the map holds only clients connected now.
#[derive(Default)]
struct PerClient {
    open: Mutex<HashMap<IpAddr, u64>>,
}

/// One client's hold on a connection slot, given back on drop.
struct ClientSlot {
    per_client: Arc<PerClient>,
    client: IpAddr,
}

impl PerClient {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, u64>> {
        self.open
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A slot for `client`, or `None` when it holds `cap` already.
    fn take(self: &Arc<Self>, client: IpAddr, cap: u64) -> Option<ClientSlot> {
        let mut counts = self.counts();
        let held = counts.entry(client).or_insert(0);
        if *held >= cap {
            return None;
        }
        *held += 1;
        Some(ClientSlot {
            per_client: self.clone(),
            client,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut counts = self.per_client.counts();
        if let Some(held) = counts.get_mut(&self.client) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                counts.remove(&self.client);
            }
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
    let per_client = Arc::new(PerClient::default());
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
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
        // The client's own cap first, so a client at it never takes a
        // slot from the global pool, even for a moment.
        let Some(client_slot) =
            per_client.take(client_of(peer.ip()), limits.max_connections_per_client)
        else {
            drop(stream);
            continue;
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let service = hyper::service::service_fn(move |mut request| {
            request.extensions_mut().insert(ConnectInfo(peer));
            // A `Router` is always ready (its `poll_ready` returns at
            // once), so calling a fresh clone skips nothing.
            router.clone().call(request)
        });
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(limits.max_head_bytes)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
            drop(client_slot);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(limits.drain_timeout, graceful.shutdown()).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_is_an_ipv4_address_or_an_ipv6_64() {
        let cases = [
            ("203.0.113.7", "203.0.113.7"),
            ("::ffff:203.0.113.7", "203.0.113.7"),
            ("::1", "::1"),
            ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::"),
            ("2001:db8:1:2::9", "2001:db8:1:2::"),
        ];
        for (peer, client) in cases {
            let peer: IpAddr = peer.parse().unwrap();
            assert_eq!(client_of(peer), client.parse::<IpAddr>().unwrap(), "{peer}");
        }
    }

    #[test]
    fn every_port_gets_a_share_per_client_below_its_cap() {
        for (max_connections, per_client) in [(1024, 256), (256, 64), (64, 16), (2, 1), (0, 1)] {
            assert_eq!(default_per_client(max_connections), per_client);
        }
    }
}
