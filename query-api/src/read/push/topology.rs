//! Which tracking connection serves which key: the one server's, or on a Redis Cluster the connection to
//! the primary that serves the key's slot, as `CLUSTER SLOTS` last said. A key read on a connection that
//! no longer serves its slot (it moved, or failed over) is not trusted.

use std::sync::Arc;

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
