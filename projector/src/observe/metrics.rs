//! Prometheus metrics of one projector, in a registry of its own (no global recorder, so several
//! projectors in one process, as in tests, each report their own figures). They are the projector's only
//! counters: what tests, `/readyz` and the live projector's report read comes from here too.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use shared::Topic;

/// What became of one consumed message; every message gets exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// Applied to the read model as the next event of its aggregate.
    Applied,
    /// Applied after a jump in its aggregate's sequence.
    Gap,
    /// Already applied: changed nothing.
    Duplicate,
    /// Below its aggregate's sequence, in a gap it skipped: too late to apply, so not applied; the
    /// aggregate is recorded for a repair (`projector status` lists it).
    Late,
    /// Its organization differs from the one recorded for its aggregate: not applied.
    Refused,
    /// A well-formed event of a type this service does not know.
    Skipped,
    /// Poison: set aside in the dead-letter topic.
    DeadLettered,
}

impl Outcome {
    /// The `outcome` label.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Applied => "applied",
            Outcome::Gap => "gap",
            Outcome::Duplicate => "duplicate",
            Outcome::Late => "late",
            Outcome::Refused => "refused",
            Outcome::Skipped => "skipped",
            Outcome::DeadLettered => "dead_lettered",
        }
    }
}

impl From<crate::fold::Verdict> for Outcome {
    fn from(verdict: crate::fold::Verdict) -> Self {
        match verdict {
            crate::fold::Verdict::Applied => Outcome::Applied,
            crate::fold::Verdict::Gap => Outcome::Gap,
            crate::fold::Verdict::Duplicate => Outcome::Duplicate,
            crate::fold::Verdict::Late => Outcome::Late,
        }
    }
}

/// How many outcomes there are.
const OUTCOMES: usize = 7;

/// Messages by topic, event type and outcome: what one batch did, before it is counted.
pub type Tally = std::collections::HashMap<(Topic, String, Outcome), u64>;

/// The projector's totals by outcome, as [`Metrics::counts`] reads them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub batches: u64,
    pub retries: u64,
    by_outcome: [u64; OUTCOMES],
}

impl Counts {
    pub fn of(&self, outcome: Outcome) -> u64 {
        self.by_outcome[outcome as usize]
    }

    /// Messages consumed so far, whatever became of them.
    pub fn consumed(&self) -> u64 {
        self.by_outcome.iter().sum()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventLabels {
    pub topic: String,
    pub r#type: String,
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SchemaLabels {
    pub topic: String,
    pub schema_id: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinceLabels {
    pub since: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    pub topic: String,
    pub partition: i32,
}

/// What one projector reports.
pub struct Metrics {
    registry: Registry,
    /// The configured names of the three topics, in the order of [`Topic::ALL`], for the `topic` label.
    topics: [String; 3],
    events: Family<EventLabels, Counter>,
    /// Messages read from a schema registry's framing, by topic and schema id.
    framed: Family<SchemaLabels, Counter>,
    /// The same counts by outcome alone, kept beside `events` by [`Metrics::count`].
    by_outcome: [AtomicU64; OUTCOMES],
    batches: AtomicU64,
    pub retries: Counter,
    batch_size: Histogram,
    apply_seconds: Histogram,
    /// Event -> applied, by what the event's moment is: its `occurredAt`, or its Kafka message timestamp.
    applied_after_occurred: Histogram,
    applied_after_published: Histogram,
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
    /// `occurredAt` (Unix time) of the latest event applied: how fresh what this projector wrote is.
    pub latest_event: Gauge<f64, AtomicU64>,
    /// The read model's Redis: memory, out of memory, healing after a loss.
    pub redis: super::redis_health::RedisHealth,
    /// The errors librdkafka reported.
    pub kafka: super::kafka_health::KafkaHealth,
    /// The partitions the dead-letter limit halted.
    pub halts: super::halt_health::HaltHealth,
    /// Whether this projector is stuck, and on what.
    pub stuck: super::stuck::StuckHealth,
    total_lag: AtomicI64,
}

impl Metrics {
    pub fn new(topics: [String; 3]) -> Self {
        // Unprefixed: the process's metrics keep their conventional names; this binary's are under its prefix.
        let mut root = Registry::default();
        shared::process_metrics::register(&mut root, "projector", env!("CARGO_PKG_VERSION"), env!("GIT_COMMIT"));
        let registry = root.sub_registry_with_prefix("projector");
        let events = Family::<EventLabels, Counter>::default();
        registry.register(
            "events",
            "Events by topic, type and outcome (applied, duplicate, gap, late, refused, skipped, dead_lettered)",
            events.clone(),
        );
        let framed = Family::<SchemaLabels, Counter>::default();
        registry.register(
            "schema_registry_messages",
            "Messages read from a schema registry's framing (JSON after a magic byte and a schema id), by topic \
             and schema id; counted in `events` too",
            framed.clone(),
        );
        let retries = Counter::default();
        registry.register("retries", "Failed attempts to apply a batch or dead-letter, retried", retries.clone());
        let batch_size = Histogram::new(exponential_buckets(1.0, 2.0, 15));
        registry.register("batch_size_messages", "Messages per batch", batch_size.clone());
        let apply_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register("apply_seconds", "Time to apply a batch to Redis", apply_seconds.clone());
        let since = Family::<SinceLabels, Histogram, fn() -> Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
            ])
        });
        registry.register(
            "event_applied_seconds",
            "Time from an event to its being applied in Redis, by `since`: `occurred_at` (the event's occurredAt) \
             or `kafka_timestamp` (its message's timestamp: when it was published)",
            since.clone(),
        );
        let applied_after_occurred = since.get_or_create(&SinceLabels { since: "occurred_at" }).clone();
        let applied_after_published = since.get_or_create(&SinceLabels { since: "kafka_timestamp" }).clone();
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
        let latest_event = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "latest_event_timestamp_seconds",
            "occurredAt of the latest event applied (how fresh the read model is)",
            latest_event.clone(),
        );
        let redis = super::redis_health::RedisHealth::register(registry);
        let kafka = super::kafka_health::KafkaHealth::register(registry);
        let halts = super::halt_health::HaltHealth::register(registry);
        let stuck = super::stuck::StuckHealth::register(registry);
        Self {
            halts,
            stuck,
            kafka,
            latest_event,
            redis,
            registry: root,
            topics,
            events,
            framed,
            by_outcome: Default::default(),
            batches: AtomicU64::new(0),
            retries,
            batch_size,
            apply_seconds,
            applied_after_occurred,
            applied_after_published,
            lag_messages,
            lag_seconds,
            heartbeat,
            generation,
            rebuild_remaining,
            in_hand,
            total_lag: AtomicI64::new(0),
        }
    }

    /// Counts what a batch did: the one place where messages are counted.
    pub fn count(&self, tally: &Tally) {
        for ((topic, kind, outcome), n) in tally {
            let topic = self.topics[*topic as usize].clone();
            let labels = EventLabels { topic, r#type: kind.clone(), outcome: outcome.label().into() };
            self.events.get_or_create(&labels).inc_by(*n);
            self.by_outcome[*outcome as usize].fetch_add(*n, Relaxed);
        }
    }

    /// Counts a message read from a schema registry's framing; the first of its topic and schema id in this
    /// process is logged.
    pub fn framed(&self, topic: Topic, schema_id: u32) {
        let labels = SchemaLabels { topic: self.topics[topic as usize].clone(), schema_id };
        if self.framed.get(&labels).is_none() {
            tracing::info!(topic = %labels.topic, schema_id, "reading messages in a schema registry's framing");
        }
        self.framed.get_or_create(&labels).inc();
    }

    /// The totals so far.
    pub fn counts(&self) -> Counts {
        Counts {
            batches: self.batches.load(Relaxed),
            retries: self.retries.get(),
            by_outcome: std::array::from_fn(|i| self.by_outcome[i].load(Relaxed)),
        }
    }

    /// Records a batch applied: its size, how long it took, and progress now.
    pub fn applied_batch(&self, messages: usize, seconds: f64) {
        self.batches.fetch_add(1, Relaxed);
        self.batch_size.observe(messages as f64);
        self.apply_seconds.observe(seconds);
        self.beat();
    }

    /// Records how long after its moments an event was applied, at Unix time `now`: its `occurredAt` and
    /// its message's timestamp (in milliseconds), when it has one.
    pub fn applied_event(&self, now: f64, occurred_at: f64, published_ms: Option<i64>) {
        self.applied_after_occurred.observe((now - occurred_at).max(0.0));
        if let Some(ms) = published_ms.filter(|ms| *ms > 0) {
            self.applied_after_published.observe((now - ms as f64 / 1000.0).max(0.0));
        }
    }

    /// Records that an event of this time was applied.
    pub fn applied_event_at(&self, occurred_at: f64) {
        if occurred_at > self.latest_event.get() {
            self.latest_event.set(occurred_at);
        }
    }

    /// Whether this projector has applied everything it reads and is not projecting again after a loss.
    pub fn caught_up(&self) -> bool {
        self.total_lag() == 0 && self.redis.healing.get() == 0
    }

    /// What the dead-letter limit holds halted now.
    pub fn set_halted(&self, halted: &std::collections::BTreeMap<crate::source::Partition, crate::source::Halt>) {
        self.halts.set(halted);
    }

    /// Records progress now.
    pub fn beat(&self) {
        self.heartbeat.set(now());
    }

    /// Seconds since the last progress.
    pub fn since_progress(&self) -> f64 {
        now() - self.heartbeat.get()
    }

    /// Records the sum of the lag of every assigned partition, as librdkafka's statistics measured it.
    pub fn set_measured_lag(&self, total: i64) {
        self.total_lag.store(total, Relaxed);
    }

    /// Sum of the lag of every assigned partition, as last measured, and at least the batch in hand.
    pub fn total_lag(&self) -> i64 {
        self.total_lag.load(Relaxed).max(self.in_hand.get())
    }

    /// Whether this projector is stuck (see [`super::stuck`]), and on what; sets `projector_stuck`.
    pub fn stuck(&self) -> Option<super::stuck::Stuck> {
        let excused = self.redis.out_of_memory.get() > 0 || self.halts.halted.get() > 0;
        self.stuck.judge(self.total_lag() > 0, excused, self.since_progress())
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.stuck();
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("metrics encode");
        out
    }
}

pub fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or_default()
}
