//! Where each partition stands: the offsets this projector applied and commits, the offsets a consumer
//! group committed, the ends of the partitions, and how far behind a reader is.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::{Offset, TopicPartitionList};

use super::{Partition, Record};

pub const BROKER_TIMEOUT: Duration = Duration::from_secs(10);

/// The metadata every offset the projector commits carries. An offset committed without it was set by
/// something else (an operator's `kafka-consumer-groups --reset-offsets`, an older projector) and says
/// nothing about what the read model held: the read model's own positions decide where it reads.
pub const COMMIT_MARK: &str = "read-model-projector";

/// One past the last offset of each partition among `records`: what to commit once they are applied.
pub fn next_offsets<'a>(records: impl Iterator<Item = Record<'a>>) -> BTreeMap<Partition, i64> {
    let mut next = BTreeMap::new();
    for r in records {
        let entry = next.entry(Partition::new(r.topic_name, r.partition)).or_insert(0);
        *entry = (r.offset + 1).max(*entry);
    }
    next
}

/// A list of partitions at the given offsets, as librdkafka takes it.
pub fn partition_list<'a>(
    offsets: impl IntoIterator<Item = (&'a Partition, Offset)>,
) -> KafkaResult<TopicPartitionList> {
    let mut list = TopicPartitionList::new();
    for (p, offset) in offsets {
        list.add_partition_offset(&p.topic, p.partition, offset)?;
    }
    Ok(list)
}

fn offset(offset: Offset) -> Option<i64> {
    match offset {
        Offset::Offset(o) => Some(o),
        _ => None,
    }
}

/// A list of offsets to commit, each marked as the projector's ([`COMMIT_MARK`]).
pub fn commit_list<'a>(offsets: impl IntoIterator<Item = (&'a Partition, i64)>) -> KafkaResult<TopicPartitionList> {
    let mut list = TopicPartitionList::new();
    for (p, offset) in offsets {
        let mut element = list.add_partition(&p.topic, p.partition);
        element.set_offset(Offset::Offset(offset))?;
        element.set_metadata(COMMIT_MARK);
    }
    Ok(list)
}

/// The partitions of a topic.
pub fn partitions<X: ConsumerContext, C: Consumer<X>>(consumer: &C, topic: &str) -> KafkaResult<Vec<i32>> {
    let metadata = consumer.fetch_metadata(Some(topic), BROKER_TIMEOUT)?;
    let partitions = metadata.topics().iter().flat_map(|t| t.partitions().iter().map(|p| p.id())).collect();
    Ok(partitions)
}

/// Where a consumer group stands on one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub partition: Partition,
    /// The group's committed offset, if it committed one.
    pub committed: Option<i64>,
    /// Whether that offset was committed by a projector ([`COMMIT_MARK`]).
    pub by_projector: bool,
    /// The partition's high watermark.
    pub end: i64,
}

impl Progress {
    /// Messages the group has yet to commit.
    pub fn lag(&self) -> i64 {
        (self.end - self.committed.unwrap_or(0)).max(0)
    }
}

/// Per partition of `topics`: the consumer's group's committed offset and the high watermark.
pub fn progress<X: ConsumerContext, C: Consumer<X>>(consumer: &C, topics: &[&str]) -> KafkaResult<Vec<Progress>> {
    let mut list = TopicPartitionList::new();
    for topic in topics {
        for partition in partitions(consumer, topic)? {
            list.add_partition(topic, partition);
        }
    }
    let committed = consumer.committed_offsets(list, BROKER_TIMEOUT)?;
    let mut out = Vec::new();
    for element in committed.elements() {
        let (_, end) = consumer.fetch_watermarks(element.topic(), element.partition(), BROKER_TIMEOUT)?;
        let partition = Partition::new(element.topic(), element.partition());
        let by_projector = element.metadata() == COMMIT_MARK;
        out.push(Progress { partition, committed: offset(element.offset()), by_projector, end });
    }
    Ok(out)
}

/// The committed offsets of `progress`, by partition.
pub fn committed(progress: Vec<Progress>) -> HashMap<Partition, i64> {
    progress.into_iter().filter_map(|p| Some((p.partition, p.committed?))).collect()
}

/// Messages waiting in a topic: the sum over its partitions of high minus low watermark.
pub fn depth<C: ConsumerContext>(consumer: &BaseConsumer<C>, topic: &str) -> KafkaResult<i64> {
    let mut depth = 0;
    for partition in partitions(consumer, topic)? {
        let (low, high) = consumer.fetch_watermarks(topic, partition, BROKER_TIMEOUT)?;
        depth += high - low;
    }
    Ok(depth)
}

/// Messages behind the end of every partition the consumer reads, with the high watermarks asked of the
/// broker (exact, unlike the once-a-second statistics). `applied` stands in for partitions with no
/// position yet. `None` while the consumer has no assignment or a watermark is unknown.
pub fn exact_lag<X: ConsumerContext, C: Consumer<X>>(consumer: &C, applied: &HashMap<Partition, i64>) -> Option<i64> {
    let positions = consumer.position().ok()?;
    if positions.count() == 0 {
        return None;
    }
    // A partition read to its end before a restart delivers nothing afterwards, so it has no position:
    // its committed offset stands for it.
    let committed = consumer.committed(Duration::from_secs(5)).ok()?;
    let mut total = 0;
    for element in positions.elements() {
        let partition = Partition::new(element.topic(), element.partition());
        let (low, high) =
            consumer.fetch_watermarks(&partition.topic, partition.partition, Duration::from_secs(5)).ok()?;
        let committed = committed.find_partition(element.topic(), element.partition()).and_then(|c| offset(c.offset()));
        let position = offset(element.offset()).or(applied.get(&partition).copied()).or(committed).unwrap_or(low);
        total += (high - position).max(0);
    }
    Some(total)
}
