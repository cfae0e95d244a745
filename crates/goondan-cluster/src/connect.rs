//! [`Cluster`]: the one connection a process keeps to the cluster.

use crate::error::ClusterError;
use async_nats::jetstream;
use std::path::PathBuf;
use std::time::Duration;

/// The server list of `--cluster` / `GOONDAN_CLUSTER`: comma-separated
/// `nats://` or `tls://` addresses (user and password may be in them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterUrls(Vec<String>);

impl ClusterUrls {
    /// Parses a comma-separated list. A bare `host:port` means `nats://`.
    pub fn parse(given: &str) -> Result<Self, ClusterError> {
        let bad = |reason: &str| ClusterError::BadUrl {
            given: given.to_string(),
            reason: reason.to_string(),
        };
        let mut urls = Vec::new();
        for part in given.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let url = if part.contains("://") {
                part.to_string()
            } else {
                format!("nats://{part}")
            };
            let parsed: async_nats::ServerAddr = url
                .parse()
                .map_err(|e: std::io::Error| bad(&e.to_string()))?;
            if !matches!(parsed.scheme(), "nats" | "tls") {
                return Err(bad("the scheme must be nats:// or tls://"));
            }
            urls.push(url);
        }
        if urls.is_empty() {
            return Err(bad("no server address"));
        }
        Ok(ClusterUrls(urls))
    }

    /// The addresses, in the order given.
    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

impl std::fmt::Display for ClusterUrls {
    /// The list without credentials, for messages and logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown: Vec<String> = self
            .0
            .iter()
            .map(|url| match url.split_once("://") {
                Some((scheme, rest)) => match rest.rsplit_once('@') {
                    Some((_, host)) => format!("{scheme}://***@{host}"),
                    None => url.clone(),
                },
                None => url.clone(),
            })
            .collect();
        f.write_str(&shown.join(","))
    }
}

/// How to talk to the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Replicas of every stream, bucket and object store created (3 in
    /// production; 1 against a single development server).
    pub replicas: usize,
    /// A NATS `.creds` file (`GOONDAN_CLUSTER_CREDS`).
    pub credentials: Option<PathBuf>,
    /// The connection's name, shown by the servers' monitoring.
    pub client_name: String,
    /// How long one request to the cluster may take before it is a
    /// [`ClusterError::Timeout`].
    pub request_timeout: Duration,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            replicas: 3,
            credentials: None,
            client_name: "gdn".to_string(),
            request_timeout: Duration::from_secs(5),
        }
    }
}

impl ClusterOptions {
    /// [`from_env`](Self::from_env) with this process's environment.
    pub fn from_process_env() -> Result<Self, ClusterError> {
        ClusterOptions::from_env(|name| std::env::var(name).ok())
    }

    /// The defaults, with `GOONDAN_CLUSTER_REPLICAS` and
    /// `GOONDAN_CLUSTER_CREDS` read from `env`.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, ClusterError> {
        let mut options = ClusterOptions::default();
        if let Some(replicas) = env("GOONDAN_CLUSTER_REPLICAS") {
            options.replicas = match replicas.trim().parse::<usize>() {
                Ok(n @ 1..=5) => n,
                _ => {
                    return Err(ClusterError::BadUrl {
                        given: format!("GOONDAN_CLUSTER_REPLICAS={replicas}"),
                        reason: "must be a number from 1 to 5".to_string(),
                    })
                }
            };
        }
        options.credentials = env("GOONDAN_CLUSTER_CREDS")
            .filter(|path| !path.is_empty())
            .map(PathBuf::from);
        Ok(options)
    }
}

/// A connection to the cluster and its JetStream context.
#[derive(Debug, Clone)]
pub struct Cluster {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    options: ClusterOptions,
    urls: ClusterUrls,
}

impl Cluster {
    /// Connects to the first reachable server of `urls` (the client then
    /// follows the cluster's topology and reconnects on its own). A host
    /// calls [`layout::ensure`] next; other processes expect it done.
    pub async fn connect(
        urls: &ClusterUrls,
        options: ClusterOptions,
    ) -> Result<Self, ClusterError> {
        let connect_error = |reason: String| ClusterError::Connect {
            urls: urls.to_string(),
            reason,
        };
        let mut connect = async_nats::ConnectOptions::new()
            .name(&options.client_name)
            .connection_timeout(Duration::from_secs(3))
            .request_timeout(Some(options.request_timeout));
        if let Some(path) = &options.credentials {
            connect = connect
                .credentials_file(path)
                .await
                .map_err(|e| connect_error(format!("credentials {}: {e}", path.display())))?;
        }
        let addresses = urls
            .as_slice()
            .iter()
            .map(|url| url.parse::<async_nats::ServerAddr>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| connect_error(e.to_string()))?;
        let client = connect
            .connect(addresses)
            .await
            .map_err(|e| connect_error(e.to_string()))?;
        let mut jetstream = jetstream::new(client.clone());
        jetstream.set_timeout(options.request_timeout);
        Ok(Cluster {
            client,
            jetstream,
            options,
            urls: urls.clone(),
        })
    }

    /// The core NATS client (request/reply, the non-durable subjects).
    pub fn client(&self) -> &async_nats::Client {
        &self.client
    }

    /// The JetStream context.
    pub fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// The options this connection was made with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// The server list, as given.
    pub fn urls(&self) -> &ClusterUrls {
        &self.urls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_hide_credentials() {
        let urls = ClusterUrls::parse("nats://a:4222, tls://u:secret@b:4223,c:4224").unwrap();
        assert_eq!(urls.as_slice().len(), 3);
        assert_eq!(urls.as_slice()[2], "nats://c:4224");
        assert_eq!(
            urls.to_string(),
            "nats://a:4222,tls://***@b:4223,nats://c:4224"
        );
        for bad in ["", " , ", "http://a:80", "nats://a:notaport"] {
            let error = ClusterUrls::parse(bad).unwrap_err();
            assert_eq!(error.code(), "E_CLUSTER_URL", "{bad}");
        }
    }

    #[test]
    fn replicas_come_from_the_environment() {
        let options = ClusterOptions::from_env(|name| {
            (name == "GOONDAN_CLUSTER_REPLICAS").then(|| "1".to_string())
        })
        .unwrap();
        assert_eq!(options.replicas, 1);
        let error = ClusterOptions::from_env(|name| {
            (name == "GOONDAN_CLUSTER_REPLICAS").then(|| "zero".to_string())
        })
        .unwrap_err();
        assert_eq!(error.code(), "E_CLUSTER_URL");
    }
}
