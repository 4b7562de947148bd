//! What the projector knows of the read model's Redis beyond one batch: its memory on every primary,
//! whether it refuses writes for lack of memory, and whether the read model is being projected again
//! after Redis lost data. `/readyz` and the metrics read it from here.

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    pub node: String,
}

#[derive(Default)]
pub struct RedisHealth {
    pub memory_used: Family<NodeLabels, Gauge<i64, AtomicI64>>,
    pub memory_max: Family<NodeLabels, Gauge<i64, AtomicI64>>,
    /// 1 while Redis refuses the projector's writes for lack of memory.
    pub out_of_memory: Gauge<i64, AtomicI64>,
    /// Partitions of this projector being projected again after a loss.
    pub healing: Gauge<i64, AtomicI64>,
    /// Losses of data this projector detected (a restart, a flush, a rollback).
    pub losses: Counter<u64, AtomicU64>,
    /// 1 while a loss is found and not yet marked in Redis: no batch is applied meanwhile.
    pub unmarked: Gauge<i64, AtomicI64>,
    /// Healing entries ended at their partition's end, short of their target: the broker lost messages.
    pub targets_past_end: Counter<u64, AtomicU64>,
    /// Why the read model is being projected again, while it is.
    reason: Mutex<Option<String>>,
}

impl RedisHealth {
    pub fn register(registry: &mut Registry) -> Self {
        let health = Self::default();
        registry.register(
            "redis_memory_used_bytes",
            "Memory used by each primary of the read model",
            health.memory_used.clone(),
        );
        registry.register(
            "redis_memory_max_bytes",
            "maxmemory of each primary of the read model (0: no limit)",
            health.memory_max.clone(),
        );
        registry.register(
            "redis_out_of_memory",
            "1 while Redis refuses writes for lack of memory (they are retried)",
            health.out_of_memory.clone(),
        );
        registry.register(
            "healing_partitions",
            "Partitions being projected again after Redis lost data",
            health.healing.clone(),
        );
        registry.register(
            "redis_losses",
            "Losses of read-model data detected (restart, flush, rollback)",
            health.losses.clone(),
        );
        registry.register(
            "redis_loss_unmarked",
            "1 while a loss of read-model data is found and not yet marked in Redis (no batch is applied \
             meanwhile; the marking is tried again at every look)",
            health.unmarked.clone(),
        );
        registry.register(
            "healing_targets_past_end",
            "Healing entries ended at their partition's end, short of the end the partition had when the loss \
             was marked: the broker lost the messages between the two",
            health.targets_past_end.clone(),
        );
        health
    }

    pub fn set_reason(&self, reason: Option<String>) {
        *self.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason;
    }

    pub fn reason(&self) -> Option<String> {
        self.reason.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
