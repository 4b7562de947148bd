//! The benchmark's topics on the broker: creating them, preloading them, and reading their offsets.

use std::time::Duration;

use anyhow::{Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use shared::Topic;

use crate::stream::Stream;

/// Partitions of each benchmark topic.
pub const PARTITIONS: i32 = 3;

/// The three topic names of one benchmark run, in [`Topic::ALL`] order.
pub fn topic_names(run: &str) -> [String; 3] {
    Topic::ALL.map(|t| format!("{run}-{}", t.default_name()))
}

/// Creates the topics of a run and their dead-letter topics.
pub async fn create_topics(brokers: &str, run: &str) -> Result<[String; 3]> {
    let names = topic_names(run);
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", brokers).create().context("admin client")?;
    let all: Vec<String> = names.iter().flat_map(|n| [n.clone(), format!("{n}.dlq")]).collect();
    let new: Vec<NewTopic> = all.iter().map(|n| NewTopic::new(n, PARTITIONS, TopicReplication::Fixed(1))).collect();
    for result in admin.create_topics(&new, &AdminOptions::new()).await? {
        result.map_err(|(topic, e)| anyhow::anyhow!("creating {topic}: {e}"))?;
    }
    Ok(names)
}

/// A producer for preloading a run's topics: large batches, many messages in flight, patient.
pub fn bulk_producer(brokers: &str) -> Result<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("message.timeout.ms", "300000")
        .create()?)
}

/// Publishes a whole stream, a chunk at a time with every message of the chunk in flight at once.
/// Returns how many messages were delivered.
pub async fn publish(brokers: &str, topics: &[String; 3], mut stream: Stream) -> Result<usize> {
    let producer = bulk_producer(brokers)?;
    let mut sent = 0;
    while let Some(chunk) = stream.next_chunk() {
        let sends = chunk.iter().map(|m| {
            let topic = &topics[Topic::ALL.iter().position(|t| *t == m.topic).expect("a known topic")];
            producer.send(FutureRecord::to(topic).key(&m.key).payload(&m.value), Duration::from_secs(300))
        });
        for result in futures::future::join_all(sends).await {
            result.map_err(|(e, _)| e).context("publishing")?;
        }
        sent += chunk.len();
    }
    Ok(sent)
}

/// A consumer that joins no group, for offsets and for reading assigned partitions.
pub fn plain_consumer(brokers: &str, group: &str) -> Result<BaseConsumer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?)
}

/// Every partition of the topics with its low and high watermark.
pub fn watermarks(consumer: &BaseConsumer, topics: &[String]) -> Result<Vec<(String, i32, i64, i64)>> {
    let mut out = Vec::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
            let (low, high) = consumer.fetch_watermarks(topic, partition.id(), Duration::from_secs(10))?;
            out.push((topic.clone(), partition.id(), low, high));
        }
    }
    Ok(out)
}

/// Messages of the partitions (with their low watermarks) that the group has committed past.
pub fn committed_messages(consumer: &BaseConsumer, partitions: &[(String, i32, i64, i64)]) -> Result<i64> {
    let mut list = TopicPartitionList::new();
    for (topic, partition, _, _) in partitions {
        list.add_partition(topic, *partition);
    }
    let committed = consumer.committed_offsets(list, Duration::from_secs(10))?;
    let mut total = 0;
    for (topic, partition, low, _) in partitions {
        if let Some(Offset::Offset(o)) = committed.find_partition(topic, *partition).map(|e| e.offset()) {
            total += (o - low).max(0);
        }
    }
    Ok(total)
}
