//! Reading topics from their earliest offset to given ends, outside any consumer group: what a repair
//! reads. It joins no group and commits nothing, so it never takes partitions from the live projectors.
//! Each message is handed to the caller's filter as a [`Record`]; what the filter keeps is the caller's.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::Offset;
use shared::Topic;

use super::consumer::Inspector;
use super::offsets::{partition_list, partitions, BROKER_TIMEOUT};
use super::{consumer, BrokerError, Partition, Record};
use crate::config::Config;

/// How long the reader waits for a message before it asks whether the partitions it waits on are done.
const POLL: Duration = Duration::from_millis(200);

/// How long the reader waits without any message while partitions are short of their ends.
const SILENCE: Duration = Duration::from_secs(60);

/// A reader of some of the three topics.
pub struct Reader {
    consumer: Inspector,
    topics: HashMap<String, Topic>,
    /// Where each partition's next message is (once reading began).
    next: HashMap<Partition, i64>,
}

impl Reader {
    /// A reader of `topics` (by their configured names), reading nothing yet.
    pub fn open(config: &Config, topics: &[Topic]) -> Result<Self, BrokerError> {
        let group = format!("{}-repair-{}", config.group_id, uuid::Uuid::new_v4().simple());
        // Without `enable.partition.eof`: librdkafka would log each partition's end as an error. A
        // partition whose last offsets deliver nothing is found done by its position when polls come back
        // empty.
        let consumer = consumer::inspector(config, &group)?;
        let topics = topics.iter().map(|t| (config.topic_name(*t).to_string(), *t)).collect();
        Ok(Self { consumer, topics, next: HashMap::new() })
    }

    /// Every partition of the topics with its earliest offset and its end (high watermark) now.
    pub fn watermarks(&self) -> Result<HashMap<Partition, (i64, i64)>, BrokerError> {
        tokio::task::block_in_place(|| {
            let mut all = HashMap::new();
            for name in self.topics.keys() {
                for id in partitions(&self.consumer, name)? {
                    let marks = self.consumer.fetch_watermarks(name, id, BROKER_TIMEOUT)?;
                    all.insert(Partition::new(name, id), marks);
                }
            }
            Ok::<_, KafkaError>(all)
        })
        .map_err(BrokerError::from)
    }

    /// Reads every partition from where it stands (its earliest offset the first time) to `ends`, handing
    /// each message to `keep`, and `read` the count of messages read so far now and then. Blocks the
    /// calling thread (it is a tokio worker's, given up with `block_in_place`).
    pub fn read_to(
        &mut self,
        ends: &HashMap<Partition, (i64, i64)>,
        mut keep: impl FnMut(Record<'_>),
        mut read: impl FnMut(u64),
    ) -> Result<u64, BrokerError> {
        tokio::task::block_in_place(|| {
            let mut waiting: HashMap<Partition, i64> = HashMap::new();
            let mut start = Vec::new();
            for (p, (low, high)) in ends {
                let from = *self.next.get(p).unwrap_or(low);
                if from < *high {
                    waiting.insert(p.clone(), *high);
                }
                start.push((p, Offset::Offset(from.max(*low))));
            }
            if waiting.is_empty() {
                return Ok(0);
            }
            self.consumer.assign(&partition_list(start)?)?;
            let (mut count, mut quiet) = (0u64, std::time::Instant::now());
            while !waiting.is_empty() {
                let Some(message) = self.consumer.poll(POLL) else {
                    // Offsets with nothing to deliver (transaction markers, say) end some partitions.
                    self.drop_done(&mut waiting)?;
                    if !waiting.is_empty() && quiet.elapsed() > SILENCE {
                        let short: Vec<String> = waiting.keys().map(ToString::to_string).collect();
                        tracing::error!(partitions = %short.join(" "), "nothing arrived for a minute");
                        return Err(KafkaError::MessageConsumption(RDKafkaErrorCode::OperationTimedOut).into());
                    }
                    continue;
                };
                quiet = std::time::Instant::now();
                let m = match message {
                    Ok(m) => m,
                    // The end of what a partition holds now, should a property ask for it (it names no topic).
                    Err(KafkaError::PartitionEOF(_)) => {
                        self.drop_done(&mut waiting)?;
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let at = Partition::new(m.topic(), m.partition());
                // A message past its partition's end (fetched ahead) is left for the next reading.
                let Some(&end) = waiting.get(&at) else { continue };
                if m.offset() >= end {
                    self.next.insert(at.clone(), end);
                    waiting.remove(&at);
                    continue;
                }
                self.next.insert(at.clone(), m.offset() + 1);
                count += 1;
                if count % 10_000 == 0 {
                    read(count);
                }
                let topic = self.topics[m.topic()];
                keep(Record {
                    topic,
                    topic_name: m.topic(),
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key(),
                    value: m.payload(),
                    timestamp_ms: m.timestamp().to_millis(),
                });
                if m.offset() + 1 >= end {
                    waiting.remove(&at);
                }
            }
            read(count);
            // Nothing is fetched until the next reading: a fetch waiting at a partition's end would hold up
            // the broker's answers to the next `watermarks` (a broker answers a connection's requests in
            // order), and a repair asks for them while it holds the organization's writes.
            self.consumer.unassign()?;
            Ok(count)
        })
    }

    /// Forgets the partitions whose position reached their end.
    fn drop_done(&mut self, waiting: &mut HashMap<Partition, i64>) -> Result<(), KafkaError> {
        let positions = self.consumer.position()?;
        waiting.retain(|p, end| {
            let at = positions.find_partition(&p.topic, p.partition).map(|e| e.offset());
            match at {
                Some(Offset::Offset(at)) if at >= *end => {
                    self.next.insert(p.clone(), *end);
                    false
                }
                _ => true,
            }
        });
        Ok(())
    }
}
