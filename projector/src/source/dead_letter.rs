//! Dead letters: messages set aside with the reason, listed for an operator, and replayed after a fix.
//!
//! A dead letter is the original message (key, value and headers as they were) published to
//! `<topic>.dlq`, with `dlq-*` headers added saying why and where it came from. A replay publishes each one
//! back to its original topic with the original headers (the `dlq-*` ones left out), so a `traceparent` the
//! product set follows the message there; it goes through the same rules as any message: one that is
//! still bad returns to the dead-letter topic. Which dead letters were replayed is remembered as the offsets of the consumer group
//! `<group>-dlq-replay`, so a replay never publishes the same dead letter twice.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use rdkafka::Offset;
use shared::Topic;

use super::consumer::{Inspector, Producer};
use super::offsets::{partition_list, partitions};
use super::{consumer, Batch, BrokerError, Partition, Record};
use crate::config::Config;

const REASON: &str = "dlq-reason";
const TOPIC: &str = "dlq-topic";
const PARTITION: &str = "dlq-partition";
const OFFSET: &str = "dlq-offset";
/// Set when the broker would not take the original value: its size, and the value is left out.
const VALUE_DROPPED: &str = "dlq-value-dropped";
const SUFFIX: &str = ".dlq";
/// What the names of the headers a dead letter adds begin with.
const PREFIX: &str = "dlq-";
/// The most bytes of a reason a letter carries: a reason may quote the offending value, and a header of
/// megabytes would make a letter no dead-letter topic takes.
const REASON_LIMIT: usize = 1024;

/// The dead-letter topic of a topic.
pub fn dead_letter_topic(topic: &str) -> String {
    format!("{topic}{SUFFIX}")
}

/// A message set aside: where it was, what it held, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The topic, partition and offset the message was first read from.
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub reason: String,
}

impl DeadLetter {
    pub fn new(record: &Record<'_>, reason: String) -> Self {
        Self {
            topic: record.topic_name.to_string(),
            partition: record.partition,
            offset: record.offset,
            key: record.key.map(<[u8]>::to_vec),
            value: record.value.map(<[u8]>::to_vec),
            reason: capped(reason),
        }
    }

    fn record<'a>(&'a self, topic: &'a str) -> FutureRecord<'a, [u8], [u8]> {
        let mut record = FutureRecord::to(topic);
        if let Some(key) = &self.key {
            record = record.key(key.as_slice());
        }
        if let Some(value) = &self.value {
            record = record.payload(value.as_slice());
        }
        record
    }
}

/// `reason`, cut to at most [`REASON_LIMIT`] bytes on a character boundary, saying how much was cut.
fn capped(mut reason: String) -> String {
    if reason.len() <= REASON_LIMIT {
        return reason;
    }
    let note = format!("... ({} bytes in all)", reason.len());
    let mut end = REASON_LIMIT - note.len();
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason.truncate(end);
    reason.push_str(&note);
    reason
}

/// Writes every dead letter of `batch` to its dead-letter topic, with the headers its message came with,
/// and waits until the broker has them all. A letter whose value is larger than the broker takes goes
/// without it (its key, headers, where it came from, why, and the size of what was left out), so that no
/// message can stall its partition for ever.
pub async fn write(producer: &Producer, letters: &[DeadLetter], batch: &Batch) -> Result<(), KafkaError> {
    let sends = letters.iter().map(|letter| async move {
        let original = batch.headers_of(&letter.topic, letter.partition, letter.offset);
        match send(producer, letter, original, false).await {
            Err(KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)) => {
                tracing::warn!(topic = %letter.topic, offset = letter.offset, "dead letter too large; set aside without its value");
                send(producer, letter, original, true).await
            }
            sent => sent,
        }
    });
    futures::future::try_join_all(sends).await.map(|_| ())
}

async fn send(
    producer: &Producer,
    letter: &DeadLetter,
    original: Option<&OwnedHeaders>,
    drop_value: bool,
) -> Result<(), KafkaError> {
    let topic = dead_letter_topic(&letter.topic);
    let (partition, offset) = (letter.partition.to_string(), letter.offset.to_string());
    let dropped = format!("{} bytes", letter.value.as_ref().map_or(0, Vec::len));
    let mut fields =
        vec![(REASON, letter.reason.as_str()), (TOPIC, &letter.topic), (PARTITION, &partition), (OFFSET, &offset)];
    if drop_value {
        fields.push((VALUE_DROPPED, &dropped));
    }
    // The original's headers first (any `dlq-*` among them are this letter's to say), then its own.
    let headers = original.map_or_else(OwnedHeaders::new, |h| without_dead_letter_headers(h.iter()));
    let headers = fields
        .into_iter()
        .fold(headers, |headers, (key, value)| headers.insert(Header { key, value: Some(value.as_bytes()) }));
    let mut record = letter.record(&topic).headers(headers);
    if drop_value {
        record.payload = None;
    }
    producer.send(record, Duration::from_secs(10)).await.map(|_| ()).map_err(|(e, _)| e)
}

/// Headers without the ones a dead letter adds.
fn without_dead_letter_headers<'a>(headers: impl Iterator<Item = Header<'a, &'a [u8]>>) -> OwnedHeaders {
    headers.filter(|h| !h.key.starts_with(PREFIX)).fold(OwnedHeaders::new(), |kept, h| kept.insert(h))
}

/// A dead letter as read back, with where it sits in its dead-letter topic.
#[derive(Debug, Clone)]
pub struct Listed {
    pub at: Partition,
    pub at_offset: i64,
    pub letter: DeadLetter,
    /// The headers the original message came with (the dead letter's own `dlq-*` ones left out).
    pub headers: OwnedHeaders,
}

/// Reads the dead-letter topics from the group's committed offsets (or the beginning, unless
/// `from_committed`) up to their ends as they were when reading began.
fn read(consumer: &Inspector, config: &Config, from_committed: bool) -> Result<Vec<Listed>, KafkaError> {
    let mut start = HashMap::new();
    let mut ends = HashMap::new();
    for topic in Topic::ALL {
        let dlq = dead_letter_topic(config.topic_name(topic));
        for id in partitions(consumer, &dlq)? {
            let (low, high) = consumer.fetch_watermarks(&dlq, id, Duration::from_secs(10))?;
            start.insert(Partition::new(&dlq, id), low);
            ends.insert(Partition::new(&dlq, id), high);
        }
    }
    if from_committed {
        let committed = consumer.committed_offsets(
            partition_list(start.iter().map(|(p, o)| (p, Offset::Offset(*o))))?,
            Duration::from_secs(10),
        )?;
        for element in committed.elements() {
            if let Offset::Offset(o) = element.offset() {
                start.insert(Partition::new(element.topic(), element.partition()), o);
            }
        }
    }
    let mut remaining: i64 = start.iter().map(|(p, o)| (ends[p] - o).max(0)).sum();
    consumer.assign(&partition_list(start.iter().map(|(p, o)| (p, Offset::Offset(*o))))?)?;
    let mut letters = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while remaining > 0 && std::time::Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(500)) else { continue };
        let m = message?;
        let at = Partition::new(m.topic(), m.partition());
        if m.offset() >= ends[&at] {
            continue;
        }
        remaining -= 1;
        let header = |name: &str| {
            let h = m.headers()?.iter().find(|h| h.key == name)?;
            Some(String::from_utf8_lossy(h.value?).into_owned())
        };
        let letter = DeadLetter {
            topic: header(TOPIC).unwrap_or_else(|| m.topic().strip_suffix(SUFFIX).unwrap_or(m.topic()).to_string()),
            partition: header(PARTITION).and_then(|p| p.parse().ok()).unwrap_or(-1),
            offset: header(OFFSET).and_then(|o| o.parse().ok()).unwrap_or(-1),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            reason: header(REASON).unwrap_or_default(),
        };
        let headers = m.headers().map_or_else(OwnedHeaders::new, |h| without_dead_letter_headers(h.iter()));
        letters.push(Listed { at, at_offset: m.offset(), letter, headers });
    }
    Ok(letters)
}

/// Every dead letter.
pub fn list(config: &Config) -> Result<Vec<Listed>, BrokerError> {
    let consumer = consumer::inspector(config, &format!("{}-dlq-list", config.group_id))?;
    Ok(tokio::task::block_in_place(|| read(&consumer, config, false))?)
}

/// Where a dead letter sits in its dead-letter topic, as `dlq list` prints it: `TOPIC/PARTITION@OFFSET`.
pub fn letter_at(listed: &Listed) -> String {
    format!("{}/{}@{}", listed.at.topic, listed.at.partition, listed.at_offset)
}

/// The reader of what was replayed: the offsets of the group `<group>-dlq-replay`.
fn replay_reader(config: &Config) -> Result<Inspector, BrokerError> {
    Ok(consumer::inspector(config, &format!("{}-dlq-replay", config.group_id))?)
}

/// The dead letters not replayed yet, a letter named in `corrected` (by [`letter_at`]) with that value
/// instead of its own. A name in `corrected` that is no letter left to replay is refused.
fn pending(
    consumer: &Inspector,
    config: &Config,
    corrected: &HashMap<String, Vec<u8>>,
) -> Result<Vec<Listed>, ReplayError> {
    let mut letters = tokio::task::block_in_place(|| read(consumer, config, true))?;
    let named: std::collections::HashSet<String> = letters.iter().map(letter_at).collect();
    if let Some(unknown) = corrected.keys().find(|at| !named.contains(*at)) {
        return Err(ReplayError::Unknown(unknown.clone()));
    }
    for listed in &mut letters {
        if let Some(value) = corrected.get(&letter_at(listed)) {
            listed.letter.value = Some(value.clone());
        }
    }
    Ok(letters)
}

/// What [`replay`] would publish, as it would publish it; nothing is published or committed.
pub fn to_replay(config: &Config, corrected: &HashMap<String, Vec<u8>>) -> Result<Vec<Listed>, ReplayError> {
    pending(&replay_reader(config)?, config, corrected)
}

/// Publishes every dead letter not replayed yet back to its original topic, a letter named in
/// `corrected` (by [`letter_at`]) with that value instead of its own; returns the letters as published.
/// A name in `corrected` that is no letter left to replay is refused before anything is published.
pub async fn replay(config: &Config, corrected: &HashMap<String, Vec<u8>>) -> Result<Vec<DeadLetter>, ReplayError> {
    let consumer = replay_reader(config)?;
    let letters = pending(&consumer, config, corrected)?;
    let producer = consumer::producer(config)?;
    for listed in &letters {
        let letter = &listed.letter;
        let record = letter.record(&letter.topic).headers(listed.headers.clone());
        producer.send(record, Duration::from_secs(10)).await.map_err(|(e, _)| BrokerError::from(e))?;
    }
    let mut next = BTreeMap::new();
    for listed in &letters {
        let entry = next.entry(&listed.at).or_insert(0);
        *entry = (listed.at_offset + 1).max(*entry);
    }
    let done = partition_list(next.into_iter().map(|(p, o)| (p, Offset::Offset(o)))).map_err(BrokerError::from)?;
    if done.count() > 0 {
        consumer.commit(&done, CommitMode::Sync).map_err(BrokerError::from)?;
    }
    Ok(letters.into_iter().map(|listed| listed.letter).collect())
}

/// Why a replay did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("{0} is no dead letter left to replay (see `projector dlq list`)")]
    Unknown(String),
}

impl From<KafkaError> for ReplayError {
    fn from(e: KafkaError) -> Self {
        ReplayError::Broker(e.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_capped_on_a_character_boundary_and_says_how_long_it_was() {
        assert_eq!(capped("short".into()), "short");
        let exact = "x".repeat(REASON_LIMIT);
        assert_eq!(capped(exact.clone()), exact);
        let long = format!("invalid type: string \"{}\"", "é".repeat(1_000_000));
        let cut = capped(long.clone());
        assert!(cut.len() <= REASON_LIMIT, "{}", cut.len());
        assert!(cut.starts_with("invalid type: string"));
        assert!(cut.ends_with(&format!("... ({} bytes in all)", long.len())), "{cut}");
    }
}
