//! The projector: consumes the product's study, interview and API-key events from Kafka and keeps the
//! Redis read model that the query API serves.
//!
//! The loop is: take a batch of messages, set poison messages aside in the dead-letter topics, apply the
//! rest to Redis, and only then commit the batch's offsets. A crash anywhere in between replays the batch,
//! which changes nothing the second time (each aggregate's `sequence` guards it).

pub mod aggregate;
pub mod config;
pub mod kafka;
pub mod participant;
pub mod stats;
pub mod store;
pub mod transcript;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::FutureProducer;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use shared::{decode, Decoded, Event, Keyspace, Topic};
use tokio::sync::watch;

pub use config::Config;
use kafka::DeadLetter;
pub use stats::{Snapshot, Stats};
use store::{Group, Store};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Runs the projector until `shutdown` completes; the batch in hand is finished and committed first.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let Some(projector) = Projector::connect(config, stopped.clone()).await? else {
        return Ok(());
    };
    projector.run(stopped).await
}

pub struct Projector {
    config: Config,
    stats: Arc<Stats>,
    store: Store<ConnectionManager>,
    consumer: StreamConsumer,
    producer: FutureProducer,
}

impl Projector {
    /// Connects to Redis (waiting for it, with backoff) and to the broker. `None` when shut down meanwhile.
    pub async fn connect(config: Config, mut stopped: watch::Receiver<bool>) -> Result<Option<Self>, Error> {
        if config.key_prefix.contains(['{', '}']) {
            return Err(Error::Config("KEY_PREFIX must not contain braces".into()));
        }
        let client = redis::Client::open(config.redis_url.as_str())?;
        let redis_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.redis_timeout()))
            .set_connection_timeout(Some(config.redis_timeout()))
            .set_max_delay(Duration::from_secs(5));
        let mut backoff = Backoff::new();
        let mut conn = loop {
            match ConnectionManager::new_with_config(client.clone(), redis_config.clone()).await {
                Ok(conn) => break conn,
                Err(e) => {
                    tracing::warn!(error = %e, "redis is not reachable yet");
                    if !backoff.wait(&mut stopped).await {
                        return Ok(None);
                    }
                }
            }
        };
        let generation = match config.generation {
            Some(generation) => generation,
            None => store::active_generation(&mut conn, &config.key_prefix).await?,
        };
        let keys = Keyspace::new(config.key_prefix.clone(), generation);
        tracing::info!(generation, prefix = %config.key_prefix, group = %config.group_id, "projecting");
        Ok(Some(Self {
            consumer: kafka::consumer(&config)?,
            producer: kafka::producer(&config)?,
            store: Store::new(conn, keys),
            stats: Arc::default(),
            config,
        }))
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    pub async fn run(mut self, mut stopped: watch::Receiver<bool>) -> Result<(), Error> {
        let max = self.config.batch_size as usize;
        let linger = self.config.linger();
        loop {
            let batch = tokio::select! {
                _ = stopped.wait_for(|stop| *stop) => break,
                batch = kafka::next_batch(&self.consumer, max, linger) => batch,
            };
            if !self.process(&batch, &mut stopped).await {
                tracing::info!("stopping before the batch in hand was applied; it will be applied again");
                return Ok(());
            }
            let mode = if *stopped.borrow() { CommitMode::Sync } else { CommitMode::Async };
            kafka::commit(&self.consumer, &kafka::offsets(&batch)?, mode);
            if *stopped.borrow() {
                break;
            }
        }
        tracing::info!(stats = ?self.stats.snapshot(), "projector stopped");
        Ok(())
    }

    /// Sets poison messages aside and applies the rest, retrying with backoff until both are durable.
    /// Returns false when shut down before that.
    async fn process(&mut self, batch: &[OwnedMessage], stopped: &mut watch::Receiver<bool>) -> bool {
        let mut letters = Vec::new();
        let mut events: Vec<Event> = Vec::with_capacity(batch.len());
        let mut skipped = 0;
        for message in batch {
            let Some(topic) = self.config.topic_of(message.topic()) else {
                continue;
            };
            let decoded = match message.payload() {
                Some(value) => decode(topic, message.key(), value),
                None => Err(shared::Poison("message has no value".into())),
            };
            match decoded {
                Ok(Decoded::Event(event)) => events.push(event),
                Ok(Decoded::Unknown { envelope }) => {
                    skipped += 1;
                    tracing::info!(topic = message.topic(), kind = %envelope.kind, event_id = %envelope.event_id, "skipped an event of an unknown type");
                }
                Err(poison) => {
                    tracing::warn!(topic = message.topic(), partition = message.partition(), offset = message.offset(), reason = %poison, "poison message set aside");
                    letters.push(DeadLetter { message, reason: poison.0 });
                }
            }
        }
        let mut backoff = Backoff::new();
        while !letters.is_empty() {
            match kafka::dead_letter(&self.producer, &letters).await {
                Ok(()) => break,
                Err(e) => {
                    Stats::add(&self.stats.retries, 1);
                    tracing::error!(error = %e, "could not write to the dead-letter topic; retrying");
                    if !backoff.wait(stopped).await {
                        return false;
                    }
                }
            }
        }
        let groups = group(&events);
        let mut backoff = Backoff::new();
        let applied = loop {
            match self.store.apply(&groups).await {
                Ok(applied) => break applied,
                Err(e) => {
                    Stats::add(&self.stats.retries, 1);
                    tracing::error!(error = %e, "could not apply a batch to redis; retrying");
                    if !backoff.wait(stopped).await {
                        return false;
                    }
                }
            }
        };
        let s = &self.stats;
        Stats::add(&s.batches, 1);
        Stats::add(&s.applied, applied.tally.applied);
        Stats::add(&s.duplicates, applied.tally.duplicates);
        Stats::add(&s.gaps, applied.tally.gaps);
        Stats::add(&s.refused, applied.refused);
        Stats::add(&s.skipped, skipped);
        Stats::add(&s.dead_lettered, letters.len() as u64);
        tracing::debug!(messages = batch.len(), ?applied, "batch applied");
        true
    }
}

/// Groups a batch's events by aggregate, keeping each aggregate's events in arrival order.
fn group(events: &[Event]) -> Vec<Group<'_>> {
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
struct Backoff(Duration);

impl Backoff {
    fn new() -> Self {
        Self(Duration::from_millis(100))
    }

    async fn wait(&mut self, stopped: &mut watch::Receiver<bool>) -> bool {
        let delay = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }
}
