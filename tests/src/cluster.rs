//! The stack's three-primary Redis Cluster as a test sees it: which primary serves a slot, and the slot
//! of an organization's keys, and a slot moved step by step as `redis-cli --cluster reshard` moves it, so
//! a test can hold the slot half moved for as long as it needs.

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

/// `redis-cli` against one primary: its output, or what went wrong.
fn node_cli(node: &Primary, args: &[&str]) -> Result<String, String> {
    let port = node.port.to_string();
    let output = Command::new("redis-cli").args(["-h", &node.host, "-p", &port]).args(args).output();
    let output = output.map_err(|e| format!("redis-cli does not run: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    match output.status.success() && !stdout.starts_with("ERR") {
        true => Ok(stdout),
        false => Err(format!("redis-cli {args:?} on {}: {stdout}", node.port)),
    }
}

/// One slot moving from one primary to another, in the steps `redis-cli --cluster reshard` takes: the
/// target imports it, the source migrates it, its keys are sent over a few at a time (the slot is then half
/// moved: a key may be on either primary, a new key goes to the target, and a command on several keys is
/// refused with `TRYAGAIN` unless they are all on one side), and at the end every primary is told the
/// target owns it. Dropped before [`SlotMove::finish`] (a test that failed half way), it finishes the move
/// so the cluster is whole for the next test.
pub struct SlotMove {
    slot: String,
    source: Primary,
    target: Primary,
    finished: bool,
}

impl SlotMove {
    /// Marks `slot` importing on `target` and migrating on `source`.
    pub fn begin(slot: u16, source: &Primary, target: &Primary) -> Self {
        let slot = slot.to_string();
        node_cli(target, &["cluster", "setslot", &slot, "importing", &source.id]).unwrap();
        node_cli(source, &["cluster", "setslot", &slot, "migrating", &target.id]).unwrap();
        Self { slot, source: source.clone(), target: target.clone(), finished: false }
    }

    /// Sends at most `count` of the slot's keys still on the source to the target; how many it sent.
    pub fn migrate(&self, count: usize) -> usize {
        self.try_migrate(count).unwrap()
    }

    fn try_migrate(&self, count: usize) -> Result<usize, String> {
        let listed = node_cli(&self.source, &["cluster", "getkeysinslot", &self.slot, &count.to_string()])?;
        let keys: Vec<&str> = listed.lines().filter(|key| !key.is_empty()).collect();
        if !keys.is_empty() {
            let port = self.target.port.to_string();
            let mut args = vec!["migrate", self.target.host.as_str(), &port, "", "0", "5000", "keys"];
            args.extend(&keys);
            node_cli(&self.source, &args)?;
        }
        Ok(keys.len())
    }

    /// Sends every key left, then tells the target, the source and every other primary that the target
    /// owns the slot.
    pub fn finish(mut self) {
        self.finished = true;
        self.complete().unwrap();
    }

    fn complete(&self) -> Result<(), String> {
        while self.try_migrate(10)? > 0 {}
        let own = ["cluster", "setslot", &self.slot, "node", &self.target.id];
        node_cli(&self.target, &own)?;
        node_cli(&self.source, &own)?;
        for other in primaries().iter().filter(|p| p.id != self.source.id && p.id != self.target.id) {
            node_cli(other, &own)?;
        }
        Ok(())
    }
}

impl Drop for SlotMove {
    fn drop(&mut self) {
        if !self.finished {
            if let Err(e) = self.complete() {
                eprintln!("slot {} left half moved: {e}", self.slot);
            }
        }
    }
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
