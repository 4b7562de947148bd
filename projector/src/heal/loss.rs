//! Noticing that the read model's Redis lost data, from what every primary says of itself: a primary
//! that restarted (its `run_id` changed), was replaced (a failover: a primary gone and another new) or was flushed (`FLUSHALL`/`FLUSHDB`
//! counted in its command statistics) may hold less than the projector applied to it. What it still holds
//! is told by its positions ([`crate::store::position`]); the projector reads again from there. Each
//! loss names the slots of the primary it happened on ([`shared::loss`]): the API goes on serving the
//! organizations whose keys live elsewhere.

use std::collections::HashMap;

use redis::Cmd;
use shared::loss::Loss;

/// One command of `INFO`'s sections that loss detection and the memory gauges read.
pub fn info() -> Cmd {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server").arg("replication").arg("memory").arg("commandstats");
    cmd
}

/// What one primary says of itself in `INFO server memory commandstats`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub run_id: String,
    /// `master_replid`: a primary keeps it for as long as its data descends from the same history; it
    /// changes when the server becomes a replica (it takes its primary's data) or is promoted.
    pub replid: String,
    /// `FLUSHALL` and `FLUSHDB` calls since it started.
    pub flushes: u64,
    pub used_memory: i64,
    pub maxmemory: i64,
    /// The slots it serves, from the cluster's view (every slot for the one server); not from `INFO`.
    pub slots: Vec<(u16, u16)>,
}

impl NodeInfo {
    pub fn parse(info: &str) -> Self {
        let mut node = NodeInfo::default();
        for line in info.lines() {
            let Some((name, value)) = line.trim_end().split_once(':') else { continue };
            match name {
                "run_id" => node.run_id = value.to_string(),
                "master_replid" => node.replid = value.to_string(),
                "used_memory" => node.used_memory = value.parse().unwrap_or(0),
                "maxmemory" => node.maxmemory = value.parse().unwrap_or(0),
                "cmdstat_flushall" | "cmdstat_flushdb" => node.flushes += calls(value),
                _ => {}
            }
        }
        node
    }
}

/// `calls=N` of a `cmdstat_*` line.
fn calls(stats: &str) -> u64 {
    stats.split(',').find_map(|kv| kv.strip_prefix("calls=")?.parse().ok()).unwrap_or(0)
}

/// What the primaries said last time, by address, and the primaries that went away while serving slots.
#[derive(Debug, Default)]
pub struct Seen {
    last: HashMap<String, NodeInfo>,
    /// Primaries gone from a look while they served slots (failing, or failed over), kept until another
    /// primary serves those slots: however many looks apart the two are seen, a new primary serving a
    /// vanished one's slots is a failover, and may lack the last writes.
    vanished: HashMap<String, NodeInfo>,
}

impl Seen {
    /// Compares what the primaries say now with what they said before; returns the losses, named alike
    /// by every projector from the same facts (so that they answer each once).
    pub fn compare(&mut self, now: HashMap<String, NodeInfo>) -> Vec<Loss> {
        let mut losses = Vec::new();
        if !self.last.is_empty() {
            let before: HashMap<&str, &NodeInfo> = self.last.values().map(|n| (n.run_id.as_str(), n)).collect();
            for (address, node) in &now {
                match before.get(node.run_id.as_str()) {
                    // The same process: lost data only if it was flushed since.
                    Some(old) if node.flushes > old.flushes => losses.push(Loss::Flush {
                        node: address.clone(),
                        run_id: node.run_id.clone(),
                        flushes: node.flushes,
                        slots: node.slots.clone(),
                    }),
                    // The same process with another replication history: it was a replica meanwhile
                    // (its data replaced by a full synchronization) and was promoted again.
                    Some(old) if node.replid != old.replid => losses.push(Loss::Resynchronized {
                        node: address.clone(),
                        run_id: node.run_id.clone(),
                        replid: node.replid.clone(),
                        slots: node.slots.clone(),
                    }),
                    Some(_) => {}
                    // A process never seen at this address: restarted, or a replica promoted in its place.
                    None if self.last.contains_key(address) || self.vanished.contains_key(address) => {
                        let (node, run_id, slots) = (address.clone(), node.run_id.clone(), node.slots.clone());
                        losses.push(Loss::Restart { node, run_id, slots })
                    }
                    // A primary new to the cluster holds only what was moved to it, unless it serves the
                    // slots of one that went away: then it is a replica promoted, maybe without the last
                    // writes.
                    None if self.vanished.values().any(|gone| overlap(&gone.slots, &node.slots))
                        || self.last.keys().any(|gone| !now.contains_key(gone)) =>
                    {
                        let (node, run_id, slots) = (address.clone(), node.run_id.clone(), node.slots.clone());
                        losses.push(Loss::Failover { node, run_id, slots })
                    }
                    None => {}
                }
            }
            for (address, node) in &self.last {
                if !now.contains_key(address) && !node.slots.is_empty() {
                    self.vanished.insert(address.clone(), node.clone());
                }
            }
        }
        // A vanished primary is forgotten once it is back, or once its slots are all served again.
        self.vanished.retain(|address, gone| {
            !now.contains_key(address) && !gone.slots.iter().all(|range| now.values().any(|n| covers(&n.slots, *range)))
        });
        self.last = now;
        losses
    }
}

fn overlap(a: &[(u16, u16)], b: &[(u16, u16)]) -> bool {
    a.iter().any(|(low, high)| b.iter().any(|(l, h)| low <= h && l <= high))
}

fn covers(ranges: &[(u16, u16)], (low, high): (u16, u16)) -> bool {
    ranges.iter().any(|(l, h)| *l <= low && high <= *h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(run_id: &str, flushes: u64) -> NodeInfo {
        NodeInfo { run_id: run_id.into(), flushes, ..Default::default() }
    }

    #[test]
    fn info_is_read_for_run_id_replication_id_memory_and_flushes() {
        let info = "# Server\r\nrun_id:abc\r\n# Replication\r\nmaster_replid:r1\r\n# Memory\r\nused_memory:1024\r\nmaxmemory:0\r\n# Commandstats\r\n\
                    cmdstat_flushall:calls=2,usec=10,usec_per_call=5.00\r\ncmdstat_flushdb:calls=1,usec=1\r\n";
        assert_eq!(
            NodeInfo::parse(info),
            NodeInfo {
                run_id: "abc".into(),
                replid: "r1".into(),
                flushes: 3,
                used_memory: 1024,
                maxmemory: 0,
                slots: Vec::new()
            }
        );
    }

    /// The losses as their healing entries name them.
    fn words(losses: Vec<Loss>) -> Vec<String> {
        losses.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_restart_a_flush_or_a_failover_is_a_loss_and_a_new_primary_is_not() {
        let mut seen = Seen::default();
        assert!(seen.compare(HashMap::from([("a".into(), node("1", 0))])).is_empty(), "the first look is the baseline");
        assert!(seen.compare(HashMap::from([("a".into(), node("1", 0))])).is_empty());
        let flushed = seen.compare(HashMap::from([("a".into(), node("1", 1))]));
        assert_eq!(words(flushed), ["flush of a (1 1)"]);
        let restarted = seen.compare(HashMap::from([("a".into(), node("2", 0))]));
        assert_eq!(words(restarted), ["restart of a (2)"]);
        let grown = seen.compare(HashMap::from([("a".into(), node("2", 0)), ("b".into(), node("3", 0))]));
        assert!(grown.is_empty(), "{grown:?}");
        // After a failover the promoted replica answers at its own address, and the old one is gone.
        let failed_over = seen.compare(HashMap::from([("a".into(), node("2", 0)), ("c".into(), node("4", 0))]));
        assert_eq!(words(failed_over), ["failover to c (4)"], "a replica promoted may lack the last writes");
    }

    #[test]
    fn a_primary_whose_replication_id_changed_holds_another_history() {
        let with = |replid: &str| NodeInfo { run_id: "1".into(), replid: replid.into(), ..Default::default() };
        let mut seen = Seen::default();
        assert!(seen.compare(HashMap::from([("a".into(), with("x"))])).is_empty());
        assert!(seen.compare(HashMap::from([("a".into(), with("x"))])).is_empty());
        // The same process, made a replica of another server and promoted again: its data is what it
        // synchronized from there, whatever that held.
        let replaced = seen.compare(HashMap::from([("a".into(), with("y"))]));
        assert_eq!(words(replaced), ["new replication history of a (1 y)"]);
        assert!(seen.compare(HashMap::from([("a".into(), with("y"))])).is_empty(), "seen once");
    }

    fn primary(run_id: &str, slots: &[(u16, u16)]) -> NodeInfo {
        NodeInfo { run_id: run_id.into(), slots: slots.to_vec(), ..Default::default() }
    }

    #[test]
    fn a_failover_is_seen_however_many_looks_apart_the_old_primary_goes_and_the_new_one_comes() {
        let (a, b) = (primary("ra", &[(0, 8191)]), primary("rb", &[(8192, 16383)]));
        let mut seen = Seen::default();
        assert!(seen.compare(HashMap::from([("a".into(), a.clone()), ("b".into(), b.clone())])).is_empty());
        // `a` flagged failing drops out of the look; its slots are served by nobody meanwhile.
        assert!(seen.compare(HashMap::from([("b".into(), b.clone())])).is_empty());
        assert!(seen.compare(HashMap::from([("b".into(), b.clone())])).is_empty());
        // Its replica `c`, promoted, serves them.
        let c = primary("rc", &[(0, 8191)]);
        let promoted = seen.compare(HashMap::from([("b".into(), b.clone()), ("c".into(), c.clone())]));
        assert_eq!(words(promoted), ["failover to c (rc) slots=0-8191"], "it names the slots the new primary serves");
        // Seen once: the next look is quiet, and a primary added later with slots moved to it is no loss.
        assert!(seen.compare(HashMap::from([("b".into(), b.clone()), ("c".into(), c.clone())])).is_empty());
        let d = primary("rd", &[(100, 200)]);
        let c = primary("rc", &[(0, 99), (201, 8191)]);
        let grown = seen.compare(HashMap::from([("b".into(), b), ("c".into(), c), ("d".into(), d)]));
        assert!(grown.is_empty(), "{grown:?}");
    }
}
