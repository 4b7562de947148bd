//! The consumer and producer as librdkafka sees them: client settings, the context that turns
//! librdkafka's statistics into lag gauges, and batches of messages (with their headers, which carry the
//! product's trace context).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use opentelemetry::propagation::Extractor;
use rdkafka::client::OAuthToken;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{Headers, Message, OwnedHeaders, OwnedMessage};
use rdkafka::producer::FutureProducer;
use rdkafka::statistics::Statistics;
use rdkafka::{ClientConfig, ClientContext};
use shared::Topic;
use tokio::time::Instant;

use super::auth::Auth;
use super::group::GroupShare;
use super::{Partition, Record};
use crate::config::Config;
use crate::observe::{now, Metrics, PartitionLabels};

/// The consumer's context: it turns librdkafka's statistics (once a second, from its own fetches, with no
/// extra request to the broker) into the lag gauges.
pub struct Context {
    metrics: Arc<Metrics>,
    /// Timestamp (ms) of the last message read from each partition, for the lag in seconds.
    last_timestamp: Mutex<HashMap<Partition, i64>>,
    /// The end (high watermark) of each partition read, as the last statistics gave it.
    pub ends: Mutex<HashMap<Partition, i64>>,
    /// Each partition's end as the last statistics gave it, and whether this consumer had fetched up to it
    /// with nothing of it left in its queue (then a partition applied short of its end has nothing more to
    /// deliver there: see `undelivered`).
    pub fetched_to_end: Mutex<HashMap<Partition, bool>>,
    /// What the consumer group gave this consumer, once it joined the group (`None`: it is no member,
    /// and assigns partitions itself).
    pub group: Mutex<Option<GroupShare>>,
    auth: Auth,
}

impl ClientContext for Context {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _config: Option<&str>) -> Result<OAuthToken, Box<dyn std::error::Error>> {
        self.auth.oauth_token()
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.metrics.kafka.client_error(&code(&error), reason);
    }

    /// librdkafka's log, as every client's; and an asynchronous commit the broker refused, which
    /// librdkafka reports by this log line alone (facility `COMMITFAIL`: the Rust client sets no commit
    /// callback for commits it did not make by itself), counted.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if facility == "COMMITFAIL" {
            self.metrics.kafka.commit_refused(COMMIT_REFUSED);
        }
        rdkafka::client::DefaultClientContext.log(level, facility, message);
    }

    fn stats(&self, statistics: Statistics) {
        let now_ms = (now() * 1000.0) as i64;
        let last = self.last_timestamp.lock().expect("lag timestamps");
        let mut ends = self.ends.lock().expect("partition ends");
        let mut fetched = self.fetched_to_end.lock().expect("fetched to the end");
        let mut total = 0;
        for (name, topic) in &statistics.topics {
            for (id, p) in &topic.partitions {
                if *id < 0 || !p.desired {
                    continue;
                }
                if p.hi_offset >= 0 {
                    ends.insert(Partition::new(name, *id), p.hi_offset);
                    fetched.insert(Partition::new(name, *id), drained(p.next_offset, p.fetchq_cnt, p.hi_offset));
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
                let age = match (lag, last.get(&Partition::new(name, *id))) {
                    (0, _) | (_, None) => 0.0,
                    (_, Some(ts)) => (now_ms - ts).max(0) as f64 / 1000.0,
                };
                self.metrics.lag_seconds.get_or_create(&labels).set(age);
            }
        }
        self.metrics.set_measured_lag(total);
    }
}

/// The code an asynchronous commit the broker refused is counted under: librdkafka names the broker's
/// error in its log line only.
pub const COMMIT_REFUSED: &str = "CommitRefused";

impl Context {
    /// Counts a commit that could not be sent, or that the broker refused, by `error`'s code.
    pub fn commit_failed(&self, error: &KafkaError) {
        self.metrics.kafka.commit_failed(&code(error), &error.to_string());
    }
}

/// Whether a partition's messages are all out of the consumer's hands: it fetched to the partition's end
/// (`next`, its next offset to fetch, at or past `end`; librdkafka moves it over transaction markers) and
/// none of them waits in its queue (`queued`).
fn drained(next: i64, queued: i64, end: i64) -> bool {
    next >= end && queued == 0
}

/// The `code` label of an error: librdkafka's code by name (`Other` when it has none).
fn code(error: &KafkaError) -> String {
    error.rdkafka_error_code().map_or_else(|| "Other".into(), |c| format!("{c:?}"))
}

pub type LiveConsumer = StreamConsumer<Context>;

/// A consumer that reads offsets, watermarks or partitions by itself, outside the group's assignment.
pub type Inspector = BaseConsumer<Auth>;

/// The producer of dead letters and replays.
pub type Producer = FutureProducer<Auth>;

/// Every client's settings: librdkafka's defaults, the operator's properties over them, and what the
/// projector owns. `fetch.wait.max.ms` is librdkafka's 500 ms unless a property says otherwise: Apache
/// Kafka and MSK answer a waiting fetch as soon as data arrives, so it costs no freshness there; a broker
/// that answers only when the wait is up (the local stack's) adds it to every event, and is given 10 ms
/// (`KAFKA_PROPERTY_FETCH_WAIT_MAX_MS`, docs/configuration.md).
pub(super) fn settings(config: &Config, group: &str) -> ClientConfig {
    let mut settings = ClientConfig::new();
    config.kafka_properties().apply(&mut settings);
    settings
        .set("bootstrap.servers", config.brokers())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    settings
}

/// The consumer of the projection's group. It subscribes to nothing until told to join the group
/// (`Source::join`); otherwise it is given its partitions, and the group id is where offsets are
/// committed.
pub fn consumer(config: &Config, metrics: Arc<Metrics>) -> KafkaResult<LiveConsumer> {
    let context = Context {
        metrics,
        last_timestamp: Mutex::default(),
        ends: Mutex::default(),
        fetched_to_end: Mutex::default(),
        group: Mutex::default(),
        auth: config.kafka_properties().auth(),
    };
    let consumer: LiveConsumer = live_settings(config).create_with_context(context)?;
    // Its first token, before anything asks the broker: nothing is assigned yet, so no message is taken.
    let _ = consumer.recv().now_or_never();
    Ok(consumer)
}

/// The live consumer's settings: as every client's, with statistics, and the cooperative-sticky
/// assignor unless the operator chose another or KIP-848's protocol (whose assignor is the broker's).
/// Cooperative: a rebalance moves only the partitions that change hands, the others are read on.
/// Its `client.id` is the instance's host name (`HOSTNAME`: the pod's name in Kubernetes, the container's
/// in compose), or `projector`, unless the operator set one: `kafka-consumer-groups --describe` shows it
/// beside each member's partitions.
fn live_settings(config: &Config) -> ClientConfig {
    let mut settings = settings(config, &config.group_id);
    settings.set("statistics.interval.ms", "1000");
    if settings.get("client.id").is_none() {
        settings.set("client.id", client_id(std::env::var("HOSTNAME").ok().as_deref()));
    }
    let consumer_protocol = settings.get("group.protocol").is_some_and(|p| p.eq_ignore_ascii_case("consumer"));
    if settings.get("partition.assignment.strategy").is_none() && !consumer_protocol {
        settings.set("partition.assignment.strategy", "cooperative-sticky");
    }
    // A refused asynchronous commit is reported by a warning alone (counted by `Context::log`), so
    // librdkafka sends warnings whatever the log filter shows (the filter still decides what is written).
    if (settings.log_level as i32) < RDKafkaLogLevel::Warning as i32 {
        settings.set_log_level(RDKafkaLogLevel::Warning);
    }
    settings
}

/// The live consumer's `client.id` on host `host`.
fn client_id(host: Option<&str>) -> String {
    match host.map(str::trim).filter(|h| !h.is_empty()) {
        Some(host) => host.to_string(),
        None => "projector".into(),
    }
}

/// A consumer for reading offsets and watermarks of `group`, or for reading a topic by itself; it joins
/// nothing.
pub fn inspector(config: &Config, group: &str) -> KafkaResult<Inspector> {
    Ok(authenticated(settings(config, group).create_with_context(config.kafka_properties().auth())?))
}

/// A consumer that reads a partition to find its end (see `undelivered`): it reports reaching the end
/// of a partition, and joins and commits nothing.
pub fn end_reader(config: &Config) -> KafkaResult<Inspector> {
    let settings = settings(config, &config.group_id).set("enable.partition.eof", "true").clone();
    Ok(authenticated(settings.create_with_context(config.kafka_properties().auth())?))
}

/// A consumer with its first OAUTHBEARER token, when it uses any: librdkafka asks for it at the
/// client's first poll and connects to no broker before, so a client that only asks for metadata or
/// offsets would wait for ever. Later tokens are asked for at the polls that read messages (a client
/// idle when its token is due gets it at its next poll). Nothing is assigned yet: no message is taken,
/// and an error this early is the context's to report; the client's next call meets its cause.
pub(super) fn authenticated<C: ConsumerContext>(consumer: BaseConsumer<C>) -> BaseConsumer<C> {
    let _ = consumer.poll(Duration::ZERO);
    consumer
}

/// The producer of dead letters and replays. Its largest message is the largest the consumer accepts
/// (librdkafka's `receive.message.max.bytes`), so that any message read can be set aside whole. Its own
/// thread polls it, tokens included.
pub fn producer(config: &Config) -> KafkaResult<Producer> {
    let mut settings = ClientConfig::new();
    config.kafka_properties().apply(&mut settings);
    settings
        .set("bootstrap.servers", config.brokers())
        .set("message.max.bytes", "100000000")
        .set("message.timeout.ms", "30000")
        .set("acks", "all")
        .create_with_context(config.kafka_properties().auth())
}

/// Messages taken from the broker together, each with the contract topic it was read from.
pub struct Batch(Vec<(Topic, OwnedMessage)>);

impl Batch {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each message as the projection reads it.
    pub fn records(&self) -> impl Iterator<Item = Record<'_>> {
        self.0.iter().map(|(topic, m)| Record {
            topic: *topic,
            topic_name: m.topic(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key(),
            value: m.payload(),
            timestamp_ms: m.timestamp().to_millis(),
        })
    }

    /// The headers of the message read from `topic`, `partition` and `offset`, if it is in the batch and
    /// has any.
    pub fn headers_of(&self, topic: &str, partition: i32, offset: i64) -> Option<&OwnedHeaders> {
        let (_, m) =
            self.0.iter().find(|(_, m)| m.offset() == offset && m.partition() == partition && m.topic() == topic)?;
        m.headers()
    }

    /// The headers of each message that has any, as a trace-context propagator reads them.
    pub fn carriers(&self) -> impl Iterator<Item = Carrier<'_>> {
        self.0.iter().filter_map(|(_, m)| m.headers()).map(Carrier)
    }
}

/// A message's headers as OpenTelemetry's propagators read them: where the product puts a `traceparent`.
pub struct Carrier<'a>(&'a OwnedHeaders);

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let header = self.0.iter().find(|h| h.key.eq_ignore_ascii_case(key))?;
        std::str::from_utf8(header.value?).ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|h| h.key).collect()
    }
}

/// Waits up to `idle` for one message, then takes whatever else arrives within `linger`, up to `max`
/// messages. Empty when nothing arrived. A consumer error ends the wait early: librdkafka fetches the
/// message again rather than skip it, and the error is counted and named by `/readyz`.
pub async fn next_batch(
    consumer: &LiveConsumer,
    topics: &[String; 3],
    max: usize,
    linger: Duration,
    idle: Duration,
) -> Batch {
    let mut batch = Vec::new();
    let mut deadline = Instant::now() + idle;
    while batch.len() < max {
        match tokio::time::timeout_at(deadline, consumer.recv()).await {
            Ok(Ok(message)) => batch.push(message.detach()),
            Ok(Err(e)) => {
                consumer.context().metrics.kafka.consumer_error(&code(&e), &e.to_string());
                break;
            }
            Err(_) => break,
        }
        if batch.len() == 1 {
            deadline = Instant::now() + linger;
        }
    }
    let mut last = consumer.context().last_timestamp.lock().expect("lag timestamps");
    for m in &batch {
        if let Some(ts) = m.timestamp().to_millis() {
            last.insert(Partition::new(m.topic(), m.partition()), ts);
        }
    }
    // Only the three topics are ever assigned.
    let of = |m: &OwnedMessage| Topic::ALL.into_iter().zip(topics).find(|(_, name)| *name == m.topic()).map(|(t, _)| t);
    Batch(batch.into_iter().filter_map(|m| Some((of(&m)?, m))).collect())
}

#[cfg(test)]
#[path = "consumer_tests.rs"]
mod tests;
