//! Prometheus metrics of one projector, in a registry of its own (no global recorder, so several
//! projectors in one process, as in tests, each report their own figures).

use std::sync::atomic::{AtomicI64, AtomicU64};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub topic: String,
    pub r#type: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub topic: String,
    pub partition: i32,
}

/// What one projector reports.
pub struct Metrics {
    registry: Registry,
    events: Family<EventLabels, Counter>,
    pub retries: Counter,
    pub batch_size: Histogram,
    pub apply_seconds: Histogram,
    pub lag_messages: Family<PartitionLabels, Gauge>,
    pub lag_seconds: Family<PartitionLabels, Gauge<f64, AtomicU64>>,
    /// Unix time of the last progress: a batch applied, or the end of every partition reached.
    pub heartbeat: Gauge<f64, AtomicU64>,
    pub generation: Gauge<i64, AtomicI64>,
    /// Messages a rebuild still has to read before it catches up (0 when none is running).
    pub rebuild_remaining: Gauge<i64, AtomicI64>,
    /// Messages consumed and not applied yet: the batch in hand, which stays there while Redis is away
    /// (and while it does, no statistics come in to update the lag gauges).
    pub in_hand: Gauge<i64, AtomicI64>,
    pub(crate) total_lag: AtomicI64,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("projector");
        let events = Family::<EventLabels, Counter>::default();
        registry.register(
            "events",
            "Events by topic, type and outcome (applied, duplicate, gap, refused, skipped, dead_lettered)",
            events.clone(),
        );
        let retries = Counter::default();
        registry.register("retries", "Failed attempts to apply a batch or dead-letter, retried", retries.clone());
        let batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 15));
        registry.register("batch_size_messages", "Messages per batch", batch_size.clone());
        let apply_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register("apply_seconds", "Time to apply a batch to Redis", apply_seconds.clone());
        let lag_messages = Family::<PartitionLabels, Gauge>::default();
        registry.register("lag_messages", "Messages behind the end of each assigned partition", lag_messages.clone());
        let lag_seconds = Family::<PartitionLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "lag_seconds",
            "Age of the last message read from a partition that is behind; 0 when caught up",
            lag_seconds.clone(),
        );
        let heartbeat = Gauge::<f64, AtomicU64>::default();
        registry.register("heartbeat_timestamp_seconds", "Unix time of the last progress", heartbeat.clone());
        let generation = Gauge::<i64, AtomicI64>::default();
        registry.register("generation", "Generation of the read model this projector writes", generation.clone());
        let rebuild_remaining = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "rebuild_remaining_messages",
            "Messages a running rebuild still has to read",
            rebuild_remaining.clone(),
        );
        let in_hand = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "in_hand_messages",
            "Messages consumed and not applied yet; stays up while a batch waits for Redis",
            in_hand.clone(),
        );
        Self {
            registry,
            events,
            retries,
            batch_size,
            apply_seconds,
            lag_messages,
            lag_seconds,
            heartbeat,
            generation,
            rebuild_remaining,
            in_hand,
            total_lag: AtomicI64::new(0),
        }
    }
}

impl Metrics {
    pub fn count(&self, topic: &str, kind: &str, outcome: &'static str, n: u64) {
        if n > 0 {
            let labels =
                EventLabels { topic: topic.to_string(), r#type: kind.to_string(), outcome: outcome.to_string() };
            self.events.get_or_create(&labels).inc_by(n);
        }
    }

    /// Records progress now.
    pub fn beat(&self) {
        self.heartbeat.set(now());
    }

    /// Seconds since the last progress.
    pub fn since_progress(&self) -> f64 {
        now() - self.heartbeat.get()
    }

    /// Sum of the lag of every assigned partition, as last measured, and at least the batch in hand.
    pub fn total_lag(&self) -> i64 {
        self.total_lag.load(std::sync::atomic::Ordering::Relaxed).max(self.in_hand.get())
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("metrics encode");
        out
    }
}

pub fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}
