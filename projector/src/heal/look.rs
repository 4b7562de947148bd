//! The look that tells whether the read model's Redis may have lost data, taken before every batch is
//! written and after every Redis error ([`crate::store::Guard`]), and a few times a second besides:
//!
//! 1. every primary's `INFO` ([`super::loss`]): a restart, a failover or a flush is a loss;
//! 2. the positions this projector applied, recorded on every primary ([`position`]): refused where a
//!    primary holds less than this projector wrote there last, which is a loss too (a rollback).
//!
//! A Redis user that may not run `INFO` (it is in the `@dangerous` category) leaves only the second
//! look; that is said once in the log, and the projector goes on.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use redis::RedisResult;
use shared::connection::Connection;
use shared::loss::{Loss, Losses};
use shared::Keyspace;

use super::loss::{self, NodeInfo, Seen};
use crate::observe::{Metrics, NodeLabels};
use crate::source::{Partition, Source};
use crate::store::{is_refused, position};
use crate::store::{Doubt, Guard};

/// What one projector remembers between two looks.
pub struct Watch {
    conn: Connection,
    metrics: Arc<Metrics>,
    seen: Seen,
    /// What this projector last recorded on each primary: what the next record expects to find.
    pub written: position::Recorded,
    /// Where this projector's partitions stand, as of the batch about to be written.
    positions: HashMap<Partition, i64>,
    /// The positions the latest look recorded on every primary, until the source takes them.
    recorded: Option<HashMap<Partition, i64>>,
    /// Redis refused `INFO` to this user: only the positions tell a loss.
    info_refused: bool,
    /// The layout of a generation (generation, layout), as the store read it: recorded beside the
    /// positions of that generation.
    layout: Option<(u64, u32)>,
}

impl Watch {
    pub fn new(conn: Connection, metrics: Arc<Metrics>) -> Self {
        Self {
            conn,
            metrics,
            seen: Seen::default(),
            written: position::Recorded::new(),
            positions: HashMap::new(),
            recorded: None,
            info_refused: false,
            layout: None,
        }
    }

    /// Both looks; the losses found, one line each (empty: none).
    /// Positions are recorded only when `INFO` saw no loss: a position written onto a flushed or
    /// rolled-back primary would vouch for data it no longer holds, and reading again would start there.
    pub async fn losses(&mut self, keys: &Keyspace, positions: &HashMap<Partition, i64>) -> RedisResult<Losses> {
        let mut losses = self.look().await?;
        if !losses.is_empty() {
            return Ok(losses);
        }
        let layout = self.layout.filter(|(generation, _)| *generation == keys.generation()).map(|(_, layout)| layout);
        let lost = position::record(&mut self.conn, keys, layout, positions, &mut self.written).await?;
        if let Some(first) = lost.partitions.first() {
            // The slots of the primaries that lost them: the API goes on serving the organizations whose
            // keys live elsewhere (without them, a loss names every slot).
            let (first, generation, slots) = (first.to_string(), keys.generation(), lost.slots);
            losses.0.push(Loss::PositionsLost { first, generation, slots });
        } else {
            self.recorded = Some(positions.clone());
        }
        Ok(losses)
    }

    /// [`Watch::losses`] of where `source` stands; what was recorded, `source` may commit.
    pub async fn record(&mut self, keys: &Keyspace, source: &mut Source) -> RedisResult<Losses> {
        let losses = self.losses(keys, &source.positions()).await?;
        if let Some(recorded) = self.recorded.take() {
            source.recorded(recorded);
        }
        Ok(losses)
    }

    /// Reads every primary's `INFO`: sets the memory gauges and returns the losses since the last look.
    pub async fn look(&mut self) -> RedisResult<Losses> {
        if self.info_refused {
            return Ok(Losses::default());
        }
        match read_info(&mut self.conn, &self.metrics).await {
            Ok(now) => Ok(Losses(self.seen.compare(now))),
            Err(e) if is_refused(&e) => {
                self.info_refused = true;
                tracing::warn!(
                    error = %e,
                    "this Redis user may not run INFO: losses are told by the recorded positions alone, and the \
                     memory gauges stay empty (grant +info to see restarts and flushes at once)"
                );
                Ok(Losses::default())
            }
            Err(e) => Err(e),
        }
    }

    /// Forgets what was recorded for `partitions`, which are read again from what Redis holds, and for
    /// every partition this projector no longer `held`: another instance records those now, and what this
    /// one wrote of them before it lost them says nothing of what it may expect. A primary of which
    /// nothing is expected any more is opened again at the next record, as at a start: its hash gone is
    /// no loss then (the loss that took it is the one being answered). Kept, an expectation of a
    /// partition gone elsewhere would keep its primary from ever being opened again: every later record
    /// refused for good, and no batch written.
    pub fn forget(&mut self, partitions: &[Partition], held: &BTreeSet<Partition>) {
        self.written.retain(|_, expected| {
            expected.retain(|p, _| held.contains(p) && !partitions.contains(p));
            !expected.is_empty()
        });
    }

    /// Forgets everything recorded: every partition is read again from what Redis holds.
    pub fn forget_all(&mut self) {
        self.written.clear();
    }

    pub fn conn(&self) -> Connection {
        self.conn.clone()
    }
}

impl Guard for Watch {
    fn positions(&mut self, positions: HashMap<Partition, i64>) {
        self.positions = positions;
    }

    fn recorded(&mut self) -> Option<HashMap<Partition, i64>> {
        self.recorded.take()
    }

    fn layout(&mut self, generation: u64, layout: u32) {
        self.layout = Some((generation, layout));
    }

    async fn check(&mut self, keys: &Keyspace) -> Result<(), Doubt> {
        let positions = std::mem::take(&mut self.positions);
        let losses = self.losses(keys, &positions).await;
        self.positions = positions;
        match losses {
            Ok(losses) if losses.is_empty() => Ok(()),
            Ok(losses) => Err(Doubt::Lost(losses)),
            Err(e) => Err(Doubt::Unanswered(e.to_string())),
        }
    }
}

/// Every primary's `INFO`, by address; sets the memory gauges on the way.
async fn read_info(conn: &mut Connection, metrics: &Metrics) -> RedisResult<HashMap<String, NodeInfo>> {
    let mut now = HashMap::new();
    for node in conn.nodes().await? {
        let info: String = redis::from_redis_value(conn.on_node(&node, &loss::info()).await?)?;
        let info = NodeInfo { slots: node.slots.clone(), ..NodeInfo::parse(&info) };
        let labels = NodeLabels { node: node.address.clone() };
        metrics.redis.memory_used.get_or_create(&labels).set(info.used_memory);
        metrics.redis.memory_max.get_or_create(&labels).set(info.maxmemory);
        now.insert(node.address, info);
    }
    Ok(now)
}

/// Keeps the memory gauges of every primary current once a second, apart from the batches: a projector
/// whose batch waits for a full Redis still reports how full it is. Ends if the user may not run `INFO`.
pub async fn watch_memory(mut conn: Connection, metrics: Arc<Metrics>) {
    let mut ticker = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        ticker.tick().await;
        if let Err(e) = read_info(&mut conn, &metrics).await {
            if is_refused(&e) {
                return;
            }
        }
    }
}
