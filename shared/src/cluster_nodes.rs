//! Redis Cluster's topology, read once for everyone who needs it, as one type ([`Primary`]) whichever
//! command told it: `CLUSTER NODES` ([`primaries`]: node ids and failing flags, for the connection that
//! visits every primary for SCAN and the resharding test that finds which primary serves a slot) and
//! `CLUSTER SLOTS` ([`serving`]: the slot map the cluster pipelines and the API's push connections route
//! by).

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

/// The primaries in a `CLUSTER SLOTS` reply, each once with every slot range it serves, in the reply's
/// order (replicas left out). Ranges that do not parse are skipped.
#[cfg(feature = "connection")]
pub fn serving(reply: &redis::Value) -> Vec<Primary> {
    use redis::Value;
    let text = |value: Option<&Value>| match value {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Some(Value::SimpleString(text)) => Some(text.clone()),
        _ => None,
    };
    let mut found: Vec<Primary> = Vec::new();
    let Value::Array(ranges) = reply else { return found };
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(Value::Int(low)), Some(Value::Int(high)), Some(Value::Array(node))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let (Some(host), Some(Value::Int(port))) = (text(node.first()), node.get(1)) else { continue };
        let (Ok(port), Ok(low), Ok(high)) = (u16::try_from(*port), u16::try_from(*low), u16::try_from(*high)) else {
            continue;
        };
        match found.iter_mut().find(|p| p.host == host && p.port == port) {
            Some(primary) => primary.slots.push((low, high)),
            None => {
                let id = text(node.get(2)).unwrap_or_default();
                found.push(Primary { id, host, port, slots: vec![(low, high)] });
            }
        }
    }
    found
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

    #[cfg(feature = "connection")]
    fn range(low: i64, high: i64, host: &str, port: i64) -> redis::Value {
        let primary = redis::Value::Array(vec![
            redis::Value::BulkString(host.into()),
            redis::Value::Int(port),
            redis::Value::BulkString(b"id".to_vec()),
        ]);
        let replica =
            redis::Value::Array(vec![redis::Value::BulkString(b"10.0.0.9".to_vec()), redis::Value::Int(7009)]);
        redis::Value::Array(vec![redis::Value::Int(low), redis::Value::Int(high), primary, replica])
    }

    #[cfg(feature = "connection")]
    #[test]
    fn cluster_slots_name_each_primary_once_with_all_its_ranges_and_no_replica() {
        let reply = redis::Value::Array(vec![
            range(0, 5460, "10.0.0.1", 7001),
            range(5461, 10922, "10.0.0.2", 7002),
            range(10923, 16383, "10.0.0.1", 7001),
        ]);
        let found = serving(&reply);
        let addresses: Vec<_> = found.iter().map(|p| (p.address(), p.slots.clone())).collect();
        assert_eq!(
            addresses,
            [
                ("10.0.0.1:7001".to_string(), vec![(0, 5460), (10923, 16383)]),
                ("10.0.0.2:7002".to_string(), vec![(5461, 10922)])
            ]
        );
        assert_eq!(found[0].id, "id");
        assert!(serving(&redis::Value::Nil).is_empty());
    }
}
