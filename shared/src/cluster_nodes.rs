//! The text of Redis Cluster's `CLUSTER NODES`, read once for everyone who needs the topology: the
//! connection visits every primary for SCAN, and the resharding test finds which primary serves a slot.

/// A primary that serves slots and is not marked as failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Primary {
    /// The node id, as `redis-cli --cluster reshard` takes it.
    pub id: String,
    pub host: String,
    pub port: u16,
    /// Inclusive slot ranges.
    pub slots: Vec<(u16, u16)>,
}

impl Primary {
    /// `host:port`.
    pub fn address(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|(low, high)| (*low..=*high).contains(&slot))
    }
}

/// The primaries with at least one slot, in the order `CLUSTER NODES` lists them. Lines that do not parse
/// are skipped: a node being added or forgotten must not fail the caller.
pub fn primaries(nodes: &str) -> Vec<Primary> {
    nodes.lines().filter_map(primary).collect()
}

fn primary(line: &str) -> Option<Primary> {
    // `id host:port@cport[,hostname] flags master-id ping pong epoch link-state slot...`
    let fields: Vec<&str> = line.split_whitespace().collect();
    let flags = fields.get(2)?;
    if fields.len() < 9 || !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
        return None;
    }
    let address = fields[1].split(['@', ',']).next()?;
    let (host, port) = address.rsplit_once(':')?;
    let slots = fields[8..]
        .iter()
        // `[slot->-node]` and `[slot-<-node]` are slots being moved, not served.
        .filter(|range| !range.starts_with('['))
        .map(|range| match range.split_once('-') {
            Some((low, high)) => Some((low.parse().ok()?, high.parse().ok()?)),
            None => range.parse().ok().map(|slot| (slot, slot)),
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Primary { id: fields[0].to_string(), host: host.to_string(), port: port.parse().ok()?, slots })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primaries_are_the_masters_that_serve_slots_and_are_not_failing() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460 5470 [5461->-b2]
b2 127.0.0.1:7002@17002,host-b master - 0 0 2 connected 5461-10922
c3 127.0.0.1:7003@17003 slave b2 0 0 2 connected
d4 127.0.0.1:7004@17004 master,fail - 0 0 3 connected 10923-16383
e5 127.0.0.1:7005@17005 master - 0 0 4 connected
";
        let found = primaries(nodes);
        assert_eq!(found.iter().map(Primary::address).collect::<Vec<_>>(), ["127.0.0.1:7001", "127.0.0.1:7002"]);
        assert_eq!(found[0].id, "a1");
        assert_eq!(found[0].slots, [(0, 5460), (5470, 5470)]);
        assert!(found[0].serves(5470) && !found[0].serves(5461) && found[1].serves(5461));
    }
}
