//! The upkeep of the tracking connections: made (one server's, or one per primary of a cluster, as
//! `CLUSTER SLOTS` says), made again when lost, and probed every [`PROBE_EVERY`] so that what each one
//! vouches for stays vouched for only while it answers. The kept values themselves are `super::kept`'s.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use redis::RedisResult;
use shared::keys::position_tag;
use shared::redis_url::Target;

use super::node::Node;
use super::topology::Topology;
use super::{Tracker, ABSENT_FOR, PROBE_EVERY, TOPOLOGY_EVERY, UNCONNECTED};

impl Tracker {
    /// Keeps the tracking connections up and vouched for, for ever.
    pub async fn maintain(self) {
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut read_at, mut swept_at) = (None::<Instant>, Instant::now());
        loop {
            tick.tick().await;
            if self.0.stale.load(Ordering::Acquire) || read_at.is_none_or(|at| at.elapsed() >= TOPOLOGY_EVERY) {
                self.refresh().await;
                read_at = Some(Instant::now());
            }
            self.probe();
            if swept_at.elapsed() >= ABSENT_FOR {
                self.0.sweep();
                swept_at = Instant::now();
            }
            let nodes = self.0.topology.read().expect("topology").nodes.iter().filter(|n| n.alive()).count();
            self.0.metrics.tracking_connections.set(nodes as i64);
            self.0.metrics.kept_keys_bytes.set(self.bytes() as i64);
        }
    }

    /// Probes every live connection that has no probe on its way.
    fn probe(&self) {
        let nodes = self.0.topology.read().expect("topology").nodes.clone();
        for node in nodes.into_iter().filter(|n| n.alive()) {
            if !node.start_probe() {
                continue;
            }
            let shared = self.0.clone();
            tokio::spawn(async move {
                let sent = shared.ms(Instant::now());
                match node.probe(sent).await {
                    Ok(()) => {}
                    Err(e) if e.is_cluster_error() || e.code() == Some("CLUSTERDOWN") => {
                        // It no longer serves the slots it did: nothing read on it is trusted.
                        shared.lost(node.id);
                    }
                    Err(e) if e.is_connection_dropped() || e.is_io_error() && !e.is_timeout() => shared.lost(node.id),
                    Err(e) => tracing::debug!(error = %e, node = node.address, "a tracking connection's probe failed"),
                }
                node.end_probe();
            });
        }
    }

    /// Reads which connection serves which slot again (once at a time), connecting what is missing.
    pub(super) async fn refresh(&self) {
        let _one = self.0.refreshing.lock().await;
        self.0.stale.store(false, Ordering::Release);
        let refreshed = match &self.0.target {
            Target::Single(url) => self.single(url).await,
            Target::Cluster(seeds) => self.cluster(seeds).await,
        };
        if let Err(e) = refreshed {
            self.0.stale.store(true, Ordering::Release);
            if let Some(skipped) = UNCONNECTED.allow() {
                tracing::warn!(error = %e, skipped, "no connection for changes pushed by redis; requests read redis");
            }
        }
    }

    async fn single(&self, url: &str) -> RedisResult<()> {
        if self.0.topology.read().expect("topology").nodes.first().is_some_and(|n| n.alive()) {
            return Ok(());
        }
        let node = self.0.connect(url, None, None).await?;
        *self.0.topology.write().expect("topology") = Topology::single(node);
        // What is watched is watched again on the new connection, by the refresh this wakes.
        self.0.changed.notify_one();
        Ok(())
    }

    async fn cluster(&self, seeds: &[String]) -> RedisResult<()> {
        let slots = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
        let live: Vec<Arc<Node>> =
            self.0.topology.read().expect("topology").nodes.iter().filter(|n| n.alive()).cloned().collect();
        let mut reply = None;
        for node in &live {
            if let Ok(found) = node.query(&slots).await {
                reply = Some(found);
                break;
            }
        }
        let mut error = None;
        if reply.is_none() {
            for seed in seeds {
                match self.0.connect(seed, None, None).await {
                    Ok(node) => match node.query(&slots).await {
                        Ok(found) => {
                            reply = Some(found);
                            break;
                        }
                        Err(e) => error = Some(e),
                    },
                    Err(e) => error = Some(e),
                }
            }
        }
        let Some(reply) = reply else {
            return Err(error.unwrap_or_else(|| std::io::Error::other("no seed of the cluster answered").into()));
        };
        let mut nodes = Vec::new();
        let mut connected = false;
        for primary in shared::cluster_nodes::serving(&reply) {
            let (address, ranges) = (primary.address(), primary.slots);
            let existing = live.iter().find(|n| n.address == address && n.serves(&ranges)).cloned();
            let node = match existing {
                Some(node) => node,
                None => {
                    let probe = position_tag(&ranges).map(|tag| format!("{}:probe:{{{tag}}}", self.0.prefix));
                    match self.0.connect(&seeds[0], Some(&address), probe.map(|p| (p, ranges.clone()))).await {
                        Ok(node) => {
                            connected = true;
                            node
                        }
                        Err(e) => {
                            error = Some(e);
                            continue;
                        }
                    }
                }
            };
            nodes.push((node, ranges));
        }
        let kept: Vec<u64> = nodes.iter().map(|(n, _)| n.id).collect();
        for node in live.iter().filter(|n| !kept.contains(&n.id)) {
            self.0.lost(node.id);
        }
        *self.0.topology.write().expect("topology") = Topology::cluster(nodes);
        if connected {
            self.0.changed.notify_one();
        }
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
