//! The stack's three-primary Redis Cluster as a test sees it: which primary serves a slot, and the slot
//! of an organization's keys, so a test can move exactly that slot with `redis-cli --cluster reshard`.

use std::process::Command;

use shared::cluster_nodes;
pub use shared::cluster_nodes::Primary;

use crate::env;

/// The address (`host:port`) of the cluster's first seed node.
pub fn seed() -> String {
    let urls = env("REDIS_CLUSTER_URLS");
    let first = urls.split(',').next().expect("a seed").trim();
    first.trim_start_matches("redis://").trim_end_matches('/').to_string()
}

/// `redis-cli` against the first seed node, with its output.
pub fn cli(args: &[&str]) -> String {
    let seed = seed();
    let (host, port) = seed.rsplit_once(':').expect("host:port");
    let output = Command::new("redis-cli").args(["-h", host, "-p", port]).args(args).output().expect("redis-cli runs");
    assert!(output.status.success(), "redis-cli {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("utf-8")
}

/// The primaries serving slots, from `CLUSTER NODES`.
pub fn primaries() -> Vec<Primary> {
    cluster_nodes::primaries(&cli(&["cluster", "nodes"]))
}

/// The hash slot of a hash tag (CRC16-XMODEM modulo 16384), as Redis Cluster computes it.
pub fn slot(tag: &str) -> u16 {
    let mut crc: u16 = 0;
    for byte in tag.bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::slot;

    #[test]
    fn slots_match_the_redis_cluster_specification() {
        // Examples from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(slot("123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("user1000"), 3443);
    }
}
