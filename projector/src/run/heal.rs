//! The read model heals itself when Redis loses data. A few times a second, each live projector:
//!
//! 1. asks every primary about itself ([`super::loss`]): a restart, a failover or a flush is a loss;
//! 2. records on every primary how far it applied each of its partitions ([`position`]), which is also
//!    refused where a primary holds less than this projector wrote there: a loss too;
//! 3. on a loss, marks every partition of the generation as healing, up to the end it has now, and puts
//!    the active generation back if the loss took it;
//! 4. reads every partition of its own with a healing entry it has not answered yet again from the
//!    position Redis holds (the earliest offset where a primary holds none), and ends the entries it has
//!    caught up with.
//!
//! While any entry is left, the API answers 503 rather than a wrong answer. Every write checks the
//! aggregate's sequence, so reading a partition again changes nothing that Redis kept.

use std::collections::{HashMap, HashSet};

use shared::connection::Connection;
use shared::Keyspace;

use super::loss::{NodeInfo, Seen};
use super::Projector;
use crate::observe::NodeLabels;
use crate::source::Partition;
use crate::store::position::{self, Healing};
use crate::store::{self};
use crate::Error;

/// What one live projector remembers between two looks.
#[derive(Default)]
pub struct Heal {
    seen: Seen,
    written: position::Written,
    /// Losses this projector has read its partitions again for.
    answered: HashSet<String>,
    /// A loss whose healing entries are not all written yet (the broker did not answer).
    pending: Option<String>,
}

impl Heal {
    /// One look; see the module's documentation. An error of Redis is logged and tried again next time;
    /// a Redis that came back able to evict keys is refused.
    pub async fn check(&mut self, projector: &mut Projector, conn: &mut Connection) -> Result<(), Error> {
        let keys = projector.store.keys().clone();
        let losses = match self.look(projector, conn).await {
            Ok(losses) => losses,
            Err(e) => {
                tracing::warn!(error = %e, "could not ask the read model's Redis about itself");
                return Ok(());
            }
        };
        if losses.iter().any(|l| !l.starts_with("flush")) {
            store::check_no_eviction(conn).await?;
        }
        let mut losses = losses;
        match position::record(conn, &keys, &projector.source.positions(), &mut self.written).await {
            Ok(lost) if !lost.is_empty() => {
                losses.push(format!("positions lost on {} of generation {}", lost[0], keys.generation()))
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "could not record the positions in Redis"),
        }
        if !losses.is_empty() {
            let loss = losses.join("; ");
            tracing::error!(%loss, "the read model's Redis lost data; projecting again from what it holds");
            if let Err(e) = mark_lost(projector, conn, &keys, &loss).await {
                tracing::warn!(error = %e, "could not mark the read model as incomplete");
            }
            projector.metrics.redis.losses.inc();
            self.pending = Some(loss);
        }
        if let Some(loss) = self.pending.clone() {
            match mark_everything(projector, conn, &keys, &loss).await {
                Ok(()) => self.pending = None,
                Err(e) => tracing::warn!(error = %e, "could not mark every partition as healing; trying again"),
            }
        }
        if let Err(e) = self.answer(projector, conn, &keys).await {
            tracing::warn!(error = %e, "could not read the healing entries");
        }
        Ok(())
    }

    /// On shutdown, once the last batch is applied: records the positions, so that the next start reads
    /// nothing twice, unless Redis lost data since the last look (then the next start finds out).
    pub async fn leave(&mut self, projector: &Projector, conn: &mut Connection) {
        let keys = projector.store.keys().clone();
        match self.look(projector, conn).await {
            Ok(losses) if losses.is_empty() => {
                let positions = projector.source.positions();
                if let Err(e) = position::record(conn, &keys, &positions, &mut self.written).await {
                    tracing::warn!(error = %e, "could not record the positions in Redis");
                }
            }
            Ok(losses) => tracing::warn!(?losses, "Redis lost data; the next start reads it again"),
            Err(e) => tracing::warn!(error = %e, "could not ask the read model's Redis about itself"),
        }
    }

    /// Reads every primary's `INFO`: sets the memory gauges and returns the losses since the last look.
    async fn look(&mut self, projector: &Projector, conn: &mut Connection) -> redis::RedisResult<Vec<String>> {
        let mut now = HashMap::new();
        for node in conn.nodes().await? {
            let info: String = redis::from_redis_value(conn.on_node(&node, &position::info()).await?)?;
            let info = NodeInfo::parse(&info);
            let labels = NodeLabels { node: node.address.clone() };
            projector.metrics.redis.memory_used.get_or_create(&labels).set(info.used_memory);
            projector.metrics.redis.memory_max.get_or_create(&labels).set(info.maxmemory);
            now.insert(node.address, info);
        }
        Ok(self.seen.compare(now))
    }

    /// Reads again the partitions of this projector with a healing entry it has not answered, and ends
    /// the entries it has caught up with.
    async fn answer(&mut self, projector: &mut Projector, conn: &mut Connection, keys: &Keyspace) -> Result<(), Error> {
        let entries = position::healing(conn, keys).await?;
        let mine: HashMap<&Partition, &Healing> =
            entries.iter().filter(|(p, _)| projector.source.assigned().contains(*p)).collect();
        let again: Vec<Partition> =
            mine.iter().filter(|(_, h)| !self.answered.contains(&h.loss)).map(|(p, _)| (*p).clone()).collect();
        if !again.is_empty() {
            let starts = position::read(conn, keys, &again).await?;
            let from: Vec<String> = starts
                .iter()
                .map(|(p, at)| format!("{p}@{}", at.map_or("earliest".into(), |o| o.to_string())))
                .collect();
            tracing::warn!(from = %from.join(" "), "reading partitions again after a loss");
            projector.source.rewind(&starts)?;
            for expected in self.written.values_mut() {
                expected.retain(|p, _| !again.contains(p));
            }
            self.answered.extend(mine.values().map(|h| h.loss.clone()));
        }
        let positions = projector.source.positions();
        let mut left = 0;
        for (partition, entry) in &mine {
            if positions.get(*partition).is_some_and(|at| *at >= entry.target) {
                position::clear_healing(conn, keys, partition, entry).await?;
            } else {
                left += 1;
            }
        }
        projector.metrics.redis.healing.set(left);
        projector.metrics.redis.set_reason(mine.values().next().filter(|_| left > 0).map(|h| h.loss.clone()));
        Ok(())
    }
}

/// Keeps the memory gauges of every primary current once a second, apart from the batches: a projector
/// whose batch waits for a full Redis still reports how full it is.
pub async fn watch_memory(mut conn: Connection, metrics: std::sync::Arc<crate::observe::Metrics>) {
    let mut ticker = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        ticker.tick().await;
        let Ok(nodes) = conn.nodes().await else { continue };
        for node in nodes {
            let Ok(reply) = conn.on_node(&node, &position::info()).await else { continue };
            let Ok(info) = redis::from_redis_value::<String>(reply) else { continue };
            let info = NodeInfo::parse(&info);
            let labels = NodeLabels { node: node.address.clone() };
            metrics.redis.memory_used.get_or_create(&labels).set(info.used_memory);
            metrics.redis.memory_max.get_or_create(&labels).set(info.maxmemory);
        }
    }
}

/// Marks the generation as incomplete at once (one entry for the whole of it, before the partitions'
/// ends are asked of the broker), then puts the active generation back if the loss took it: in that
/// order, so that the API never serves the generation before it knows it is incomplete.
pub async fn mark_lost(projector: &Projector, conn: &mut Connection, keys: &Keyspace, loss: &str) -> Result<(), Error> {
    position::mark_incomplete(conn, keys, loss).await?;
    if projector.config.generation.is_none() {
        let generation = keys.generation();
        let _: () = redis::cmd("SET")
            .arg(Keyspace::active_generation(keys.prefix()))
            .arg(generation)
            .arg("NX")
            .query_async(conn)
            .await?;
        let _: () = redis::cmd("SET")
            .arg(Keyspace::generation_counter(keys.prefix()))
            .arg(generation)
            .arg("NX")
            .query_async(conn)
            .await?;
    }
    Ok(())
}

/// Marks every partition of the generation as healing up to its end now, then ends the entry of the
/// whole generation [`mark_lost`] wrote.
pub async fn mark_everything(
    projector: &mut Projector,
    conn: &mut Connection,
    keys: &Keyspace,
    loss: &str,
) -> Result<(), Error> {
    let all: Vec<Partition> = projector.source.partitions()?.to_vec();
    let ends = projector.source.ends(&all)?;
    let mut entries = HashMap::new();
    for (partition, end) in all.into_iter().zip(ends) {
        if end > 0 {
            entries.insert(partition, Healing { target: end, loss: loss.to_string() });
        }
    }
    position::mark_healing(conn, keys, &entries).await?;
    position::end_incomplete(conn, keys).await?;
    Ok(())
}
