//! The stack's three-primary Redis Cluster as a test sees it: which primary serves a slot, and the slot
//! of an organization's keys, so a test can move exactly that slot with `redis-cli --cluster reshard`.

use std::process::Command;

use crate::env;

/// A primary of the cluster: its node id, its address and the slots it serves.
#[derive(Debug, Clone)]
pub struct Primary {
    pub id: String,
    pub address: String,
    pub slots: Vec<(u16, u16)>,
}

impl Primary {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|(low, high)| (*low..=*high).contains(&slot))
    }
}

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
    let mut primaries = Vec::new();
    for line in cli(&["cluster", "nodes"]).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        let slots = fields[8..]
            .iter()
            .filter(|range| !range.starts_with('['))
            .map(|range| match range.split_once('-') {
                Some((low, high)) => (low.parse().unwrap(), high.parse().unwrap()),
                None => (range.parse().unwrap(), range.parse().unwrap()),
            })
            .collect();
        let address = fields[1].split(['@', ',']).next().unwrap().to_string();
        primaries.push(Primary { id: fields[0].to_string(), address, slots });
    }
    primaries
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
