//! The journal contract (`goondan_store::conformance`) against
//! `ClusterJournal` on three real nats-servers: every check on an instance
//! of its own, each `open` a new owner's claim.

use goondan_cluster::testing::NatsCluster;
use goondan_cluster::{
    layout, subject::InstanceAddress, ClusterJournal, ClusterOptions, ClusterUrls,
};
use goondan_store::conformance::{check_all, JournalUnderTest};
use goondan_store::{StoreError, TurnJournal};

struct ClusterInstance<'a> {
    urls: &'a ClusterUrls,
    address: InstanceAddress,
    n_opened: usize,
}

impl JournalUnderTest for ClusterInstance<'_> {
    fn open(&mut self) -> Result<Box<dyn TurnJournal>, StoreError> {
        self.n_opened += 1;
        let options = ClusterOptions {
            replicas: 3,
            ..ClusterOptions::default()
        };
        let owner = format!("host-{}", self.n_opened);
        let journal = ClusterJournal::open(self.urls, options, self.address.clone(), &owner)?;
        Ok(Box::new(journal))
    }
}

#[tokio::test]
async fn the_cluster_journal_keeps_the_turn_journal_contract() {
    let Some(nats) = NatsCluster::start(3).await else {
        return;
    };
    layout::ensure(&nats.connect().await).await.expect("layout");
    let urls = ClusterUrls::parse(&nats.urls()).unwrap();
    let mut n_instances = 0;
    check_all(|| {
        n_instances += 1;
        ClusterInstance {
            urls: &urls,
            address: InstanceAddress::new("ws-1", "coder", &format!("user:{n_instances}")),
            n_opened: 0,
        }
    });
}
