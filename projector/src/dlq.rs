//! Dead letters: listing them with their reasons, and replaying them after a fix.
//!
//! A replay publishes each dead letter's original key and value back to its original topic, where it
//! goes through the same rules as any message: one that is still bad returns to the dead-letter topic.
//! Which dead letters were replayed is remembered as the offsets of the consumer group
//! `<group>-dlq-replay`, so a replay never publishes the same dead letter twice.

use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use shared::Topic;

use crate::config::{dead_letter_topic, Config};
use crate::{kafka, Error};

/// One dead letter.
#[derive(Debug, Clone)]
pub struct Letter {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub reason: String,
    pub original_topic: String,
}

/// Reads the dead-letter topics from `start` (per partition: the group's committed offset, or the
/// beginning) up to their end as it was when reading began.
fn read(consumer: &BaseConsumer, config: &Config, from_committed: bool) -> Result<Vec<Letter>, Error> {
    let mut list = TopicPartitionList::new();
    let mut ends = std::collections::HashMap::new();
    for topic in Topic::ALL {
        let dlq = dead_letter_topic(config.topic_name(topic));
        for partition in kafka::partitions(consumer, &dlq)? {
            let (low, high) = consumer.fetch_watermarks(&dlq, partition, Duration::from_secs(10))?;
            ends.insert((dlq.clone(), partition), high);
            list.add_partition_offset(&dlq, partition, Offset::Offset(low))?;
        }
    }
    if from_committed {
        let committed = consumer.committed_offsets(list.clone(), Duration::from_secs(10))?;
        for element in committed.elements() {
            if let Offset::Offset(o) = element.offset() {
                list.set_partition_offset(element.topic(), element.partition(), Offset::Offset(o))?;
            }
        }
    }
    let mut remaining: i64 = list
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(o) => (ends[&(e.topic().to_string(), e.partition())] - o).max(0),
            _ => 0,
        })
        .sum();
    consumer.assign(&list)?;
    let mut letters = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while remaining > 0 && std::time::Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(500)) else { continue };
        let m = message?;
        if m.offset() >= ends[&(m.topic().to_string(), m.partition())] {
            continue;
        }
        remaining -= 1;
        let header = |name: &str| {
            let headers = m.headers()?;
            let h = headers.iter().find(|h| h.key == name)?;
            Some(String::from_utf8_lossy(h.value?).into_owned())
        };
        letters.push(Letter {
            topic: m.topic().to_string(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            reason: header("dlq-reason").unwrap_or_default(),
            original_topic: header("dlq-topic").unwrap_or_else(|| m.topic().trim_end_matches(".dlq").to_string()),
        });
    }
    Ok(letters)
}

/// Every dead letter.
pub fn list(config: &Config) -> Result<Vec<Letter>, Error> {
    let consumer = kafka::inspector(config, &format!("{}-dlq-list", config.group_id))?;
    read(&consumer, config, false)
}

/// Publishes every dead letter not replayed yet back to its original topic; returns how many.
pub async fn replay(config: &Config) -> Result<usize, Error> {
    let group = format!("{}-dlq-replay", config.group_id);
    let consumer = kafka::inspector(config, &group)?;
    let letters = tokio::task::block_in_place(|| read(&consumer, config, true))?;
    let producer: FutureProducer = kafka::producer(config)?;
    for letter in &letters {
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&letter.original_topic);
        if let Some(key) = &letter.key {
            record = record.key(key);
        }
        if let Some(value) = &letter.value {
            record = record.payload(value);
        }
        producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| e)?;
    }
    let mut next = std::collections::BTreeMap::new();
    for letter in &letters {
        let entry = next.entry((letter.topic.as_str(), letter.partition)).or_insert(0);
        *entry = (*entry).max(letter.offset + 1);
    }
    let mut done = TopicPartitionList::new();
    for ((topic, partition), offset) in next {
        done.add_partition_offset(topic, partition, Offset::Offset(offset))?;
    }
    if done.count() > 0 {
        consumer.commit(&done, CommitMode::Sync)?;
    }
    Ok(letters.len())
}
