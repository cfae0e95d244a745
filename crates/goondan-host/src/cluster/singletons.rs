//! Which Connections a cluster host runs: those every host runs (a push
//! connector's port, behind a load balancer) always, and the singletons
//! (anything that polls or fires on a schedule would fire once per host)
//! only while it owns [`SINGLETON_SHARD`].

use crate::Project;
use goondan_connector::delivery::is_pushed_to;
use goondan_orchestrator::SwarmInfo;

/// The shard whose owner runs the singleton Connections.
pub(super) const SINGLETON_SHARD: u16 = 0;

/// Which Connections this host runs: those every host runs (a push
/// connector's port, behind a load balancer), and the singletons, which
/// only one host may run at a time (anything that polls or fires on a
/// schedule would fire once per host), while it owns [`SINGLETON_SHARD`].
/// Shared by the host, which follows the shard, and the reloads, which
/// change the bundle.
#[derive(Debug, Default)]
pub(crate) struct SingletonConnections {
    /// The singleton Connections of the running bundle.
    names: std::sync::Mutex<Vec<String>>,
    /// Whether this host runs them now.
    pub(super) running: std::sync::atomic::AtomicBool,
}

impl SingletonConnections {
    /// `info` with only the Connections of `project` this host runs now;
    /// remembers which of them are singletons.
    pub(crate) fn select(&self, project: &Project, mut info: SwarmInfo) -> SwarmInfo {
        let (everywhere, singletons): (Vec<String>, Vec<String>) =
            info.connections.iter().cloned().partition(|name| {
                project
                    .bundle
                    .connections()
                    .find(|connection| connection.name() == name)
                    .is_some_and(|connection| is_pushed_to(&project.bundle, connection))
            });
        info.connections = everywhere;
        if self.running.load(std::sync::atomic::Ordering::SeqCst) {
            info.connections.extend(singletons.iter().cloned());
        }
        *self.names.lock().expect("singleton names lock") = singletons;
        info
    }

    pub(super) fn names(&self) -> Vec<String> {
        self.names.lock().expect("singleton names lock").clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BUNDLE: &str = r#"apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: instant
spec:
  provider: scripted
  model: instant
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: echo
spec:
  modelConfig:
    modelRef: Model/instant
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/echo
  agents:
    - ref: Agent/echo
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: hooks
spec:
  connectorRef: Connector/webhook
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: tg-push
spec:
  connectorRef: Connector/telegram
  config:
    TELEGRAM_MODE:
      value: webhook
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: tg-poll
spec:
  connectorRef: Connector/telegram
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: ticks
spec:
  connectorRef: Connector/cron
"#;

    #[test]
    fn push_connectors_run_on_every_host_and_the_rest_on_the_owner_of_shard_0() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("goondan.yaml"), BUNDLE).unwrap();
        let bundle = goondan_config::load_bundle(dir.path(), &Default::default())
            .unwrap()
            .bundle
            .expect("the bundle loads");
        let project = Project {
            bundle,
            swarm_name: "default".into(),
            instance_key: "default".into(),
            state_root: goondan_store::StateRoot::new(dir.path().join("state")),
        };
        let info = crate::project::swarm_info(&project).unwrap();
        let connections = SingletonConnections::default();
        let mut selected = connections.select(&project, info.clone()).connections;
        selected.sort();
        assert_eq!(selected, ["hooks", "tg-push"]);
        let mut singletons = connections.names();
        singletons.sort();
        assert_eq!(singletons, ["tg-poll", "ticks"]);
        // On the owner of shard 0, all of them.
        connections
            .running
            .store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(connections.select(&project, info).connections.len(), 4);
    }
}
