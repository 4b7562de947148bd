//! Which tracking connection serves which key: the one server's, or on a Redis Cluster the connection to
//! the primary that serves the key's slot, as `CLUSTER SLOTS` last said. A key read on a connection that
//! no longer serves its slot (it moved, or failed over) is not trusted.

use std::sync::Arc;

use redis::Value;
use shared::keys::slot;

use super::node::Node;

const SLOTS: usize = 16384;

/// Inclusive slot ranges.
pub type Ranges = Vec<(u16, u16)>;
/// No connection serves the slot (yet).
const NONE: u32 = u32::MAX;

/// The tracking connections, and on a cluster which one serves each slot.
#[derive(Default)]
pub struct Topology {
    pub nodes: Vec<Arc<Node>>,
    /// Cluster only: for each slot, the index in `nodes` of the connection serving it.
    owners: Option<Vec<u32>>,
}

impl Topology {
    /// The one server's connection.
    pub fn single(node: Arc<Node>) -> Self {
        Self { nodes: vec![node], owners: None }
    }

    /// A cluster's connections, each serving the slot ranges given with it.
    pub fn cluster(nodes: Vec<(Arc<Node>, Ranges)>) -> Self {
        let mut owners = vec![NONE; SLOTS];
        for (i, (_, ranges)) in nodes.iter().enumerate() {
            for (low, high) in ranges {
                for slot in *low..=(*high).min(SLOTS as u16 - 1) {
                    owners[slot as usize] = i as u32;
                }
            }
        }
        Self { nodes: nodes.into_iter().map(|(node, _)| node).collect(), owners: Some(owners) }
    }

    /// The connection serving `key`.
    pub fn serving(&self, key: &str) -> Option<&Arc<Node>> {
        match &self.owners {
            None => self.nodes.first(),
            Some(owners) => self.nodes.get(owners[slot(key) as usize] as usize),
        }
    }

    /// The connection to `address` (`host:port`).
    pub fn at(&self, address: &str) -> Option<&Arc<Node>> {
        self.nodes.iter().find(|node| node.address == address)
    }
}

/// The primaries in a `CLUSTER SLOTS` reply, each with the slot ranges it serves, in the reply's order.
pub fn primaries(reply: &Value) -> Vec<(String, Ranges)> {
    let mut found: Vec<(String, Ranges)> = Vec::new();
    let Value::Array(ranges) = reply else { return found };
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(Value::Int(low)), Some(Value::Int(high)), Some(Value::Array(primary))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let host = match primary.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            _ => continue,
        };
        let Some(Value::Int(port)) = primary.get(1) else { continue };
        let address = format!("{host}:{port}");
        let range = (*low as u16, *high as u16);
        match found.iter_mut().find(|(a, _)| *a == address) {
            Some((_, ranges)) => ranges.push(range),
            None => found.push((address, vec![range])),
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(low: i64, high: i64, host: &str, port: i64) -> Value {
        let primary =
            Value::Array(vec![Value::BulkString(host.into()), Value::Int(port), Value::BulkString(b"id".to_vec())]);
        let replica = Value::Array(vec![Value::BulkString(b"10.0.0.9".to_vec()), Value::Int(7009)]);
        Value::Array(vec![Value::Int(low), Value::Int(high), primary, replica])
    }

    #[test]
    fn cluster_slots_name_each_primary_once_with_all_its_ranges_and_no_replica() {
        let reply = Value::Array(vec![
            range(0, 5460, "10.0.0.1", 7001),
            range(5461, 10922, "10.0.0.2", 7002),
            range(10923, 16383, "10.0.0.1", 7001),
        ]);
        assert_eq!(
            primaries(&reply),
            vec![
                ("10.0.0.1:7001".to_string(), vec![(0, 5460), (10923, 16383)]),
                ("10.0.0.2:7002".to_string(), vec![(5461, 10922)]),
            ]
        );
        assert!(primaries(&Value::Nil).is_empty());
    }
}
