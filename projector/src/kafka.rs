//! The Kafka side of the projector: the consumer group, batches of messages, the dead-letter topics, and
//! offset commits, which only ever cover messages already applied to Redis or set aside.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaResult;
use rdkafka::message::{Header, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tokio::time::Instant;

use crate::config::{dead_letter_topic, Config};

pub fn consumer(config: &Config) -> KafkaResult<StreamConsumer> {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", &config.brokers)
        .set("group.id", &config.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "range,roundrobin")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "1000")
        .create()?;
    let topics: Vec<&str> = shared::Topic::ALL.iter().map(|t| config.topic_name(*t)).collect();
    consumer.subscribe(&topics)?;
    Ok(consumer)
}

pub fn producer(config: &Config) -> KafkaResult<FutureProducer> {
    ClientConfig::new()
        .set("bootstrap.servers", &config.brokers)
        .set("message.timeout.ms", "30000")
        .set("acks", "all")
        .create()
}

/// Waits for one message, then takes whatever else arrives within `linger`, up to `max` messages.
/// A consumer error ends the batch early; it is logged, as librdkafka recovers from it by itself.
pub async fn next_batch(consumer: &StreamConsumer, max: usize, linger: Duration) -> Vec<OwnedMessage> {
    let mut batch = Vec::new();
    loop {
        match consumer.recv().await {
            Ok(message) => {
                batch.push(message.detach());
                break;
            }
            Err(e) => {
                tracing::warn!(error = %e, "kafka consumer error");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
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
pub fn commit(consumer: &StreamConsumer, offsets: &TopicPartitionList, mode: CommitMode) {
    if offsets.count() == 0 {
        return;
    }
    if let Err(e) = consumer.commit(offsets, mode) {
        tracing::warn!(error = %e, "offset commit failed; the batch will be applied again after a restart");
    }
}
