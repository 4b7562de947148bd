//! The Kafka side of the projector: the consumer group, batches of messages, the dead-letter topics, and
//! offset commits, which only ever cover messages already applied to Redis or set aside.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::consumer::{ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use tokio::time::Instant;

use crate::config::{dead_letter_topic, Config};
use crate::metrics::{Metrics, PartitionLabels};

/// The consumer's context: it turns librdkafka's statistics (once a second, from its own fetches, with no
/// extra request to the broker) into the lag gauges.
pub struct Context {
    pub metrics: Arc<Metrics>,
    /// Timestamp (ms) of the last message read from each partition, for the lag in seconds.
    pub last_timestamp: Mutex<HashMap<(String, i32), i64>>,
}

impl ClientContext for Context {
    fn stats(&self, statistics: Statistics) {
        let now_ms = (crate::metrics::now() * 1000.0) as i64;
        let last = self.last_timestamp.lock().expect("lag timestamps");
        let mut total = 0;
        for (name, topic) in &statistics.topics {
            for (id, p) in &topic.partitions {
                if *id < 0 || !p.desired {
                    continue;
                }
                let lag = match (p.consumer_lag, p.hi_offset, p.committed_offset) {
                    (lag, _, _) if lag >= 0 => lag,
                    (_, high, committed) if high >= 0 && committed >= 0 => (high - committed).max(0),
                    (_, high, _) if high >= 0 => high - p.lo_offset.max(0),
                    _ => continue,
                };
                total += lag;
                let labels = PartitionLabels { topic: name.clone(), partition: *id };
                self.metrics.lag_messages.get_or_create(&labels).set(lag);
                let age = match (lag, last.get(&(name.clone(), *id))) {
                    (0, _) | (_, None) => 0.0,
                    (_, Some(ts)) => (now_ms - ts).max(0) as f64 / 1000.0,
                };
                self.metrics.lag_seconds.get_or_create(&labels).set(age);
            }
        }
        self.metrics.total_lag.store(total, std::sync::atomic::Ordering::Relaxed);
    }
}

impl ConsumerContext for Context {
    fn post_rebalance(&self, _consumer: &rdkafka::consumer::BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => tracing::info!(partitions = list.count(), "partitions assigned by the group"),
            Rebalance::Revoke(list) => tracing::info!(partitions = list.count(), "partitions revoked by the group"),
            Rebalance::Error(e) => tracing::warn!(error = %e, "consumer group rebalance failed"),
        }
    }
}

pub type LiveConsumer = StreamConsumer<Context>;

pub fn consumer(config: &Config, metrics: Arc<Metrics>) -> KafkaResult<LiveConsumer> {
    let context = Context { metrics, last_timestamp: Mutex::default() };
    let consumer: LiveConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("statistics.interval.ms", "1000")
        .create_with_context(context)?;
    // No subscription: the instances share the partitions themselves (see `crate::assignment`) and
    // assign them with `assign`; the group id is where offsets are committed.
    Ok(consumer)
}

pub fn producer(config: &Config) -> KafkaResult<FutureProducer> {
    ClientConfig::new()
        .set("bootstrap.servers", &config.brokers)
        .set("message.timeout.ms", "30000")
        .set("acks", "all")
        .create()
}

/// Waits up to `idle` for one message, then takes whatever else arrives within `linger`, up to `max`
/// messages. Empty when nothing arrived. A consumer error ends the wait early; it is logged, as
/// librdkafka recovers from it by itself.
pub async fn next_batch(consumer: &LiveConsumer, max: usize, linger: Duration, idle: Duration) -> Vec<OwnedMessage> {
    let mut batch = Vec::new();
    match tokio::time::timeout(idle, consumer.recv()).await {
        Ok(Ok(message)) => batch.push(message.detach()),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "kafka consumer error");
            return batch;
        }
        Err(_) => return batch,
    }
    let deadline = Instant::now() + linger;
    while batch.len() < max {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(message)) => batch.push(message.detach()),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "kafka consumer error");
                break;
            }
            Err(_) => break,
        }
    }
    batch
}

/// The `type` a poison message claims, if its value is a JSON object with one; for metrics only.
pub fn claimed_type(message: &OwnedMessage) -> String {
    let claimed = message.payload().and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok());
    claimed.as_ref().and_then(|v| v.get("type")?.as_str()).unwrap_or("unknown").chars().take(64).collect()
}

/// A message set aside, with the reason.
pub struct DeadLetter<'a> {
    pub message: &'a OwnedMessage,
    pub reason: String,
}

/// Writes every dead letter to `<topic>.dlq` with its original key and value and waits until the broker
/// has them all. Headers carry the reason and where the message came from.
pub async fn dead_letter(producer: &FutureProducer, letters: &[DeadLetter<'_>]) -> KafkaResult<()> {
    let sends = letters.iter().map(|letter| {
        let m = letter.message;
        let topic = dead_letter_topic(m.topic());
        let partition = m.partition().to_string();
        let offset = m.offset().to_string();
        let headers = OwnedHeaders::new()
            .insert(Header { key: "dlq-reason", value: Some(letter.reason.as_bytes()) })
            .insert(Header { key: "dlq-topic", value: Some(m.topic().as_bytes()) })
            .insert(Header { key: "dlq-partition", value: Some(partition.as_bytes()) })
            .insert(Header { key: "dlq-offset", value: Some(offset.as_bytes()) });
        async move {
            let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic).headers(headers);
            if let Some(key) = m.key() {
                record = record.key(key);
            }
            if let Some(value) = m.payload() {
                record = record.payload(value);
            }
            producer.send(record, Duration::from_secs(10)).await.map(|_| ()).map_err(|(e, _)| e)
        }
    });
    futures::future::try_join_all(sends).await.map(|_| ())
}

/// The offsets to commit after a batch: one past the last message of each partition.
pub fn offsets(batch: &[OwnedMessage]) -> KafkaResult<TopicPartitionList> {
    let mut next: BTreeMap<(&str, i32), i64> = BTreeMap::new();
    for m in batch {
        let entry = next.entry((m.topic(), m.partition())).or_insert(0);
        *entry = (*entry).max(m.offset() + 1);
    }
    let mut list = TopicPartitionList::new();
    for ((topic, partition), offset) in next {
        list.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    }
    Ok(list)
}

/// Commits offsets. A failure is logged, not fatal: the messages are applied already, and applying them
/// again after a restart changes nothing.
pub fn commit(consumer: &LiveConsumer, offsets: &TopicPartitionList, mode: CommitMode) {
    if offsets.count() == 0 {
        return;
    }
    if let Err(e) = consumer.commit(offsets, mode) {
        tracing::warn!(error = %e, "offset commit failed; the batch will be applied again after a restart");
    }
}

/// A consumer for reading offsets and watermarks of `group` (it joins nothing).
pub fn inspector(config: &Config, group: &str) -> KafkaResult<rdkafka::consumer::BaseConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .create()
}

/// The partitions of a topic.
pub fn partitions<X: ConsumerContext, C: Consumer<X>>(consumer: &C, topic: &str) -> KafkaResult<Vec<i32>> {
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
    let partitions = metadata.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
    Ok(partitions)
}

/// Per partition of the given topics: the group's committed offset (if any) and the high watermark.
pub type Progress = Vec<(String, i32, Option<i64>, i64)>;

pub fn progress<X: ConsumerContext, C: Consumer<X>>(consumer: &C, topics: &[&str]) -> KafkaResult<Progress> {
    let mut list = TopicPartitionList::new();
    for topic in topics {
        for partition in partitions(consumer, topic)? {
            list.add_partition(topic, partition);
        }
    }
    let committed = consumer.committed_offsets(list, Duration::from_secs(10))?;
    let mut out = Vec::new();
    for element in committed.elements() {
        let (_, high) = consumer.fetch_watermarks(element.topic(), element.partition(), Duration::from_secs(10))?;
        let offset = match element.offset() {
            Offset::Offset(o) => Some(o),
            _ => None,
        };
        out.push((element.topic().to_string(), element.partition(), offset, high));
    }
    Ok(out)
}
