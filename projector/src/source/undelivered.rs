//! Offsets that hold nothing to deliver. A transactional producer's commit or abort leaves a marker
//! that takes an offset and is never delivered, and the records of an aborted transaction are skipped
//! (the consumer reads committed data only). A partition whose last offsets are such is read to its
//! end, yet no message of it says so: its applied offset would stay one short of the end, and healing,
//! readiness, the lag and a rebuild's handover, which all wait for the end, would wait for ever.
//!
//! So a partition that stays short of its end with nothing arriving is read once more from its applied
//! offset by a consumer of its own: if that consumer reaches the end (librdkafka's end-of-partition
//! event) before any message, the offsets between were nothing to deliver, and the partition's applied
//! offset moves to where that consumer stands (past the markers; librdkafka moves its position over
//! them). A message arriving first means there is something to deliver: the live consumer will.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::consumer::Inspector;
use super::Partition;

/// How long a partition must stay short of its end, unchanged, before it is read again to find out.
pub const STALLED_FOR: Duration = Duration::from_secs(1);

/// How long one partition is read to find its end.
const READ_FOR: Duration = Duration::from_secs(3);

/// The consumer that reads a stalled partition again, and what was seen at the last look.
pub struct Passer {
    reader: Inspector,
    /// When the last look ran, and each partition's applied offset then.
    last: Option<(Instant, HashMap<Partition, i64>)>,
}

impl Passer {
    pub fn new(reader: Inspector) -> Self {
        Self { reader, last: None }
    }

    /// Whether a look is due: at most one per [`STALLED_FOR`].
    pub fn due(&self) -> bool {
        self.last.as_ref().is_none_or(|(at, _)| at.elapsed() >= STALLED_FOR)
    }

    /// Given each partition's applied offset and end, returns the partitions to move and where to: those
    /// short of their end, at the same offset as at the last look, read to their end with nothing to
    /// deliver.
    pub fn look(&mut self, standing: &[(Partition, i64, i64)]) -> KafkaResult<Vec<(Partition, i64)>> {
        let before = self.last.take().map(|(_, seen)| seen).unwrap_or_default();
        let stalled = stalled(standing, &before);
        let mut moved = Vec::new();
        // librdkafka names the partition of an end it reports by its number only: one topic at a time.
        let mut by_topic: BTreeMap<&str, Vec<(i32, i64)>> = BTreeMap::new();
        for (p, at) in &stalled {
            by_topic.entry(&p.topic).or_default().push((p.partition, *at));
        }
        for (topic, partitions) in by_topic {
            let ended = ends_with_nothing_to_deliver(&self.reader, topic, &partitions)?;
            moved.extend(ended.into_iter().map(|(id, past)| (Partition::new(topic, id), past)));
        }
        let seen = standing.iter().map(|(p, at, _)| (p.clone(), *at)).collect();
        self.last = Some((Instant::now(), seen));
        Ok(moved)
    }
}

/// The partitions short of their end and where they were at the last look (`before`).
fn stalled(standing: &[(Partition, i64, i64)], before: &HashMap<Partition, i64>) -> Vec<(Partition, i64)> {
    standing
        .iter()
        .filter(|(p, at, end)| at < end && before.get(p) == Some(at))
        .map(|(p, at, _)| (p.clone(), *at))
        .collect()
}

/// Reads `partitions` of `topic`, each from its offset: those whose end is reached before any message
/// of theirs, with where their consumer stands then (past every marker).
fn ends_with_nothing_to_deliver(
    reader: &Inspector,
    topic: &str,
    partitions: &[(i32, i64)],
) -> KafkaResult<Vec<(i32, i64)>> {
    let mut list = TopicPartitionList::new();
    for (id, from) in partitions {
        list.add_partition_offset(topic, *id, Offset::Offset(*from))?;
    }
    reader.assign(&list)?;
    let mut open: HashMap<i32, i64> = partitions.iter().copied().collect();
    let mut ended = Vec::new();
    let deadline = Instant::now() + READ_FOR;
    let result = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if open.is_empty() || left.is_zero() {
            break Ok(ended);
        }
        match reader.poll(left) {
            None => break Ok(ended),
            // Something to deliver: the live consumer will.
            Some(Ok(message)) => drop(open.remove(&message.partition())),
            Some(Err(KafkaError::PartitionEOF(id))) => {
                let Some(from) = open.remove(&id) else { continue };
                // Events of an earlier assignment are dropped by librdkafka: this end is of this reading,
                // and the position counts every marker passed on the way.
                let position = reader.position()?;
                let at = position.find_partition(topic, id).and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                });
                if let Some(at) = at.filter(|at| *at > from) {
                    ended.push((id, at));
                }
            }
            Some(Err(e)) => break Err(e),
        }
    };
    reader.unassign()?;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_partition_short_of_its_end_that_did_not_move_since_the_last_look_is_read_again() {
        let p = |id| Partition::new("t", id);
        let before = HashMap::from([(p(0), 5), (p(1), 5), (p(2), 9)]);
        let standing = [
            (p(0), 5, 6), // short and still: read again
            (p(1), 6, 8), // short but moving: the live consumer is at work
            (p(2), 9, 9), // at its end
            (p(3), 1, 4), // not seen at the last look
        ];
        assert_eq!(stalled(&standing, &before), vec![(p(0), 5)]);
        assert!(stalled(&standing, &HashMap::new()).is_empty(), "the first look only remembers");
    }
}
