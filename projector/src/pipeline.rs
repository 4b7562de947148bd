//! One projector's consume-apply-commit pipeline, used both by the live projector and by a rebuild.
//!
//! [`Projector::step`] takes one batch: it sets poison messages aside in the dead-letter topics, applies
//! the rest to Redis, and only then commits the batch's offsets. A crash anywhere in between replays the
//! batch, which changes nothing the second time (each aggregate's `sequence` guards it).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use shared::connection::Connection;
use shared::{decode, Decoded, Event, Keyspace, Topic};
use tokio::sync::watch;

use crate::assignment::{self, Partition};
use crate::config::Config;
use crate::kafka::{self, DeadLetter};
use crate::metrics::Metrics;
use crate::stats::Stats;
use crate::store::{self, Group, Store};
use crate::Error;

/// What one call of [`Projector::step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A batch of this many messages was applied and committed.
    Applied(usize),
    /// No message arrived for a while.
    Idle,
    /// Shut down before the batch in hand was applied; it will be applied again after a restart.
    Stopped,
}

pub struct Projector {
    pub(crate) config: Config,
    pub(crate) stats: Arc<Stats>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) store: Store,
    pub(crate) consumer: kafka::LiveConsumer,
    producer: FutureProducer,
    /// One past the last message applied, per partition: what a synchronous commit re-commits.
    applied_offsets: HashMap<(String, i32), i64>,
    /// Every partition of the three topics, and when that list was last read from the broker.
    partitions: Option<(Instant, Vec<Partition>)>,
    /// The partitions this instance reads, as last assigned by [`Projector::rebalance`].
    owned: BTreeSet<Partition>,
}

/// How long the list of partitions is trusted before it is read again (partitions may be added).
const PARTITIONS_TTL: Duration = Duration::from_secs(30);

/// Connects to Redis, waiting for it with backoff. `None` when shut down meanwhile.
pub async fn connect_redis(config: &Config, stopped: &mut watch::Receiver<bool>) -> Result<Option<Connection>, Error> {
    let (target, settings) = (config.redis_target(), config.redis_settings());
    let mut backoff = Backoff::new();
    loop {
        match Connection::connect(&target, settings).await {
            Ok(conn) => return Ok(Some(conn)),
            Err(e) => {
                tracing::warn!(error = %e, "redis is not reachable yet");
                if !backoff.wait(stopped).await {
                    return Ok(None);
                }
            }
        }
    }
}

impl Projector {
    /// Connects to Redis (waiting for it) and to the broker. `None` when shut down meanwhile.
    pub async fn connect(config: Config, mut stopped: watch::Receiver<bool>) -> Result<Option<Self>, Error> {
        if config.key_prefix.contains(['{', '}']) {
            return Err(Error::Config("KEY_PREFIX must not contain braces".into()));
        }
        let Some(mut conn) = connect_redis(&config, &mut stopped).await? else { return Ok(None) };
        let generation = match config.generation {
            Some(generation) => generation,
            None => store::active_generation(&mut conn, &config.key_prefix).await?,
        };
        let keys = Keyspace::new(config.key_prefix.clone(), generation);
        tracing::info!(generation, prefix = %config.key_prefix, group = %config.group_id, "projecting");
        let metrics = Arc::new(Metrics::default());
        metrics.generation.set(generation as i64);
        metrics.beat();
        Ok(Some(Self {
            consumer: kafka::consumer(&config, metrics.clone())?,
            producer: kafka::producer(&config)?,
            store: Store::new(conn, keys),
            stats: Arc::default(),
            metrics,
            config,
            applied_offsets: HashMap::new(),
            partitions: None,
            owned: BTreeSet::new(),
        }))
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    pub fn generation(&self) -> u64 {
        self.store.keys().generation()
    }

    /// Reads every partition of the three topics itself, from its group's committed offsets (or the
    /// earliest), instead of sharing them in a consumer group: for a rebuild, which runs alone (its lock)
    /// and must see every partition to know it has caught up.
    pub fn assign_everything(&mut self) -> Result<(), Error> {
        self.consumer.unsubscribe();
        let mut list = TopicPartitionList::new();
        for topic in Topic::ALL {
            let name = self.config.topic_name(topic).to_string();
            for partition in tokio::task::block_in_place(|| kafka::partitions(&self.consumer, &name))? {
                list.add_partition_offset(&name, partition, Offset::Stored)?;
            }
        }
        self.consumer.assign(&list)?;
        Ok(())
    }

    /// Reads the partitions that are this instance's share among the live `members` of its group (see
    /// [`crate::assignment`]). When the share changes, what was applied is committed first, so that the
    /// instance taking a partition over starts where this one stopped.
    pub fn rebalance(&mut self, me: &str, members: &[String]) -> Result<(), Error> {
        if self.partitions.as_ref().is_none_or(|(read, _)| read.elapsed() >= PARTITIONS_TTL) {
            let mut all = Vec::new();
            for topic in Topic::ALL {
                let name = self.config.topic_name(topic).to_string();
                for partition in tokio::task::block_in_place(|| kafka::partitions(&self.consumer, &name))? {
                    all.push((name.clone(), partition));
                }
            }
            self.partitions = Some((Instant::now(), all));
        }
        let all = &self.partitions.as_ref().expect("partitions read above").1;
        let share = assignment::share(me, members, all);
        if share == self.owned {
            return Ok(());
        }
        self.commit_applied()?;
        self.applied_offsets.retain(|partition, _| share.contains(partition));
        let mut list = TopicPartitionList::new();
        for (topic, partition) in &share {
            list.add_partition_offset(topic, *partition, Offset::Stored)?;
        }
        self.consumer.assign(&list)?;
        tracing::info!(
            partitions = share.len(),
            of = all.len(),
            instances = members.len(),
            "reading a new share of the partitions"
        );
        self.owned = share;
        Ok(())
    }

    /// Writes to another generation from the next batch on.
    pub fn switch_generation(&mut self, generation: u64) {
        tracing::info!(from = self.generation(), to = generation, "switching generation");
        self.store.set_generation(generation);
        self.metrics.generation.set(generation as i64);
    }

    /// Takes one batch (waiting at most `idle` for its first message), applies it and commits it.
    pub async fn step(&mut self, stopped: &mut watch::Receiver<bool>, idle: Duration) -> Result<Step, Error> {
        let max = self.config.batch_size as usize;
        let batch = tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => return Ok(Step::Stopped),
            batch = kafka::next_batch(&self.consumer, max, self.config.linger(), idle) => batch,
        };
        if batch.is_empty() {
            return Ok(Step::Idle);
        }
        if !self.process(&batch, stopped).await {
            return Ok(Step::Stopped);
        }
        let offsets = kafka::offsets(&batch)?;
        for element in offsets.elements() {
            if let Offset::Offset(next) = element.offset() {
                self.applied_offsets.insert((element.topic().to_string(), element.partition()), next);
            }
        }
        let mode = if *stopped.borrow() { CommitMode::Sync } else { CommitMode::Async };
        kafka::commit(&self.consumer, &offsets, mode);
        Ok(Step::Applied(batch.len()))
    }

    /// How many partitions this consumer reads now (assigned by its group, or by itself for a rebuild).
    pub fn assigned_partitions(&self) -> usize {
        self.consumer.assignment().map(|list| list.count()).unwrap_or(0)
    }

    /// One past the last message applied from a partition (0 when none was).
    pub fn applied_offset(&self, partition: &(String, i32)) -> i64 {
        self.applied_offsets.get(partition).copied().unwrap_or(0)
    }

    /// Commits, synchronously, every offset applied so far (async commits may still be in flight).
    pub fn commit_applied(&self) -> Result<(), Error> {
        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in &self.applied_offsets {
            list.add_partition_offset(topic, *partition, Offset::Offset(*offset))?;
        }
        kafka::commit(&self.consumer, &list, CommitMode::Sync);
        Ok(())
    }

    /// Messages behind the end of every assigned partition, with the high watermarks asked of the broker
    /// (exact, unlike the once-a-second statistics). `None` while the consumer has no assignment yet or
    /// a watermark is unknown.
    pub fn exact_lag(&self) -> Option<i64> {
        tokio::task::block_in_place(|| {
            let positions = self.consumer.position().ok()?;
            if positions.count() == 0 {
                return None;
            }
            // A partition read to its end before a restart delivers nothing afterwards, so it has no
            // position: its committed offset stands for it.
            let committed = self.consumer.committed(Duration::from_secs(5)).ok()?;
            let mut total = 0;
            for element in positions.elements() {
                let (topic, partition) = (element.topic().to_string(), element.partition());
                let (low, high) = self.consumer.fetch_watermarks(&topic, partition, Duration::from_secs(5)).ok()?;
                let committed = committed.find_partition(&topic, partition).and_then(|c| match c.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                });
                let position = match element.offset() {
                    Offset::Offset(o) => o,
                    _ => self.applied_offsets.get(&(topic, partition)).copied().or(committed).unwrap_or(low),
                };
                total += (high - position).max(0);
            }
            Some(total)
        })
    }

    /// Sets poison messages aside and applies the rest, retrying with backoff until both are durable.
    /// Returns false when shut down before that.
    async fn process(&mut self, batch: &[OwnedMessage], stopped: &mut watch::Receiver<bool>) -> bool {
        let mut letters = Vec::new();
        let mut events: Vec<Event> = Vec::with_capacity(batch.len());
        let mut skipped = 0;
        for message in batch {
            let Some(topic) = self.config.topic_of(message.topic()) else { continue };
            if let Some(ts) = message.timestamp().to_millis() {
                let mut last = self.consumer.context().last_timestamp.lock().expect("lag timestamps");
                last.insert((message.topic().to_string(), message.partition()), ts);
            }
            let decoded = match message.payload() {
                Some(value) => decode(topic, message.key(), value),
                None => Err(shared::Poison("message has no value".into())),
            };
            match decoded {
                Ok(Decoded::Event(event)) => events.push(event),
                Ok(Decoded::Unknown { envelope }) => {
                    skipped += 1;
                    self.metrics.count(message.topic(), &envelope.kind, "skipped", 1);
                    tracing::info!(topic = message.topic(), kind = %envelope.kind, event_id = %envelope.event_id, "skipped an event of an unknown type");
                }
                Err(poison) => {
                    tracing::warn!(topic = message.topic(), partition = message.partition(), offset = message.offset(), reason = %poison, "poison message set aside");
                    self.metrics.count(message.topic(), &kafka::claimed_type(message), "dead_lettered", 1);
                    letters.push(DeadLetter { message, reason: poison.0 });
                }
            }
        }
        let mut backoff = Backoff::new();
        while !letters.is_empty() {
            match kafka::dead_letter(&self.producer, &letters).await {
                Ok(()) => break,
                Err(e) => {
                    self.retried();
                    tracing::error!(error = %e, "could not write to the dead-letter topic; retrying");
                    if !backoff.wait(stopped).await {
                        return false;
                    }
                }
            }
        }
        let groups = group(&events);
        let mut backoff = Backoff::new();
        let started = Instant::now();
        self.metrics.in_hand.set(batch.len() as i64);
        let applied = loop {
            match self.store.apply(&groups).await {
                Ok(applied) => break applied,
                Err(e) => {
                    self.retried();
                    tracing::error!(error = %e, "could not apply a batch to redis; retrying");
                    if !backoff.wait(stopped).await {
                        return false;
                    }
                }
            }
        };
        self.metrics.in_hand.set(0);
        self.metrics.apply_seconds.observe(started.elapsed().as_secs_f64());
        self.metrics.batch_size.observe(batch.len() as f64);
        for ((topic, kind, verdict), n) in &applied.by_kind {
            self.metrics.count(self.config.topic_name(*topic), kind, verdict, *n);
        }
        self.metrics.beat();
        let s = &self.stats;
        Stats::add(&s.batches, 1);
        Stats::add(&s.applied, applied.tally.applied);
        Stats::add(&s.duplicates, applied.tally.duplicates);
        Stats::add(&s.gaps, applied.tally.gaps);
        Stats::add(&s.refused, applied.refused);
        Stats::add(&s.skipped, skipped);
        Stats::add(&s.dead_lettered, letters.len() as u64);
        tracing::debug!(messages = batch.len(), ?applied.tally, "batch applied");
        true
    }

    fn retried(&self) {
        Stats::add(&self.stats.retries, 1);
        self.metrics.retries.inc();
    }
}

/// Groups a batch's events by aggregate, keeping each aggregate's events in arrival order.
pub fn group(events: &[Event]) -> Vec<Group<'_>> {
    let mut index: HashMap<(Topic, &str), usize> = HashMap::new();
    let mut groups: Vec<Group<'_>> = Vec::new();
    for event in events {
        let topic = event.body.topic();
        let id = event.envelope.aggregate_id.as_str();
        let i = *index.entry((topic, id)).or_insert_with(|| {
            groups.push(Group { topic, aggregate_id: id, events: Vec::new() });
            groups.len() - 1
        });
        groups[i].events.push(event);
    }
    groups
}

/// Exponential backoff from 100 ms to 5 s that gives up when the projector is shutting down.
pub struct Backoff(Duration);

impl Backoff {
    pub fn new() -> Self {
        Self(Duration::from_millis(100))
    }

    pub async fn wait(&mut self, stopped: &mut watch::Receiver<bool>) -> bool {
        let delay = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}
