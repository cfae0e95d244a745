//! Where an instance lives in a cluster: its shard, and which host owns a
//! shard. Pure functions of their inputs, so every host computes the same
//! placement without asking anyone (no leader).

/// How many shards a cluster has. Fixed when the cluster is created: every
/// host must agree on it, and the inbox consumers are named after shards.
pub const SHARD_COUNT: u16 = 128;

/// 64-bit FNV-1a. Hand-written because names and placements built from it
/// must stay the same across Rust releases and machines, which `std`'s
/// hasher does not promise.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The shard of one instance: `hash(workspace/agent/key) mod SHARD_COUNT`.
pub fn shard_of(workspace_id: &str, agent_name: &str, instance_key: &str) -> u16 {
    let mut bytes =
        Vec::with_capacity(workspace_id.len() + agent_name.len() + instance_key.len() + 2);
    bytes.extend_from_slice(workspace_id.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(agent_name.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(instance_key.as_bytes());
    (mix(fnv1a64(&bytes)) % u64::from(SHARD_COUNT)) as u16
}

/// The host that owns `shard` among `hosts`, by rendezvous (highest random
/// weight) hashing: each host scores the shard and the highest score wins,
/// so a host joining or leaving moves only the shards it wins or held.
/// `None` when there is no host.
pub fn rendezvous_owner<'a, I>(shard: u16, hosts: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    hosts
        .into_iter()
        .map(|host| (rendezvous_score(shard, host), host))
        // Ties (vanishingly rare) go to the smaller name, so every host
        // still picks the same owner.
        .max_by(|(a, host_a), (b, host_b)| a.cmp(b).then_with(|| host_b.cmp(host_a)))
        .map(|(_, host)| host)
}

fn rendezvous_score(shard: u16, host: &str) -> u64 {
    let mut bytes = Vec::with_capacity(host.len() + 3);
    bytes.extend_from_slice(&shard.to_be_bytes());
    bytes.push(0);
    bytes.extend_from_slice(host.as_bytes());
    mix(fnv1a64(&bytes))
}

/// A finalizer (splitmix64's) over FNV, whose low bits alone spread poorly
/// for short, similar inputs.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn shards_are_stable_and_spread() {
        // Pinned: a change here re-homes every instance of a live cluster.
        assert_eq!(
            shard_of("ws", "assistant", "user-1"),
            shard_of("ws", "assistant", "user-1")
        );
        assert_eq!(fnv1a64(b"goondan"), 0xc1fd_4a06_763d_efb1);
        let mut counts = vec![0u32; usize::from(SHARD_COUNT)];
        for i in 0..12_800 {
            counts[usize::from(shard_of("ws", "agent", &format!("key-{i}")))] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 50 && *max < 160, "uneven spread: {min}..{max}");
    }

    #[test]
    fn rendezvous_moves_only_the_shards_of_the_host_that_changed() {
        let three = ["host-a", "host-b", "host-c"];
        let two = ["host-a", "host-b"];
        let mut per_host: HashMap<&str, u32> = HashMap::new();
        for shard in 0..SHARD_COUNT {
            let before = rendezvous_owner(shard, three).unwrap();
            let after = rendezvous_owner(shard, two).unwrap();
            *per_host.entry(before).or_default() += 1;
            if before != "host-c" {
                assert_eq!(
                    before, after,
                    "shard {shard} moved although its host stayed"
                );
            }
        }
        assert!(per_host.values().all(|n| *n > 20), "{per_host:?}");
        assert_eq!(rendezvous_owner(3, []), None);
        // Order of the host list does not matter.
        assert_eq!(
            rendezvous_owner(7, ["host-c", "host-a", "host-b"]),
            rendezvous_owner(7, three)
        );
    }
}
