//! Topics of one test, and publishing to and reading from them.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use shared::Topic;

use crate::broker_control;
use crate::events::Outgoing;
use crate::{env, unique};

pub const PARTITIONS: i32 = 3;

/// The three topics (and their dead-letter topics) of one test.
#[derive(Debug, Clone)]
pub struct Topics {
    pub study: String,
    pub interview: String,
    pub api_key: String,
}

impl Topics {
    /// Creates fresh topics with [`PARTITIONS`] partitions each.
    pub async fn create() -> Self {
        Self::with_partitions(PARTITIONS).await
    }

    /// Creates fresh topics with `partitions` partitions each.
    pub async fn with_partitions(partitions: i32) -> Self {
        Self::create_on(client(), partitions, true).await
    }

    /// Creates fresh topics on the broker `client` reaches, with their dead-letter topics or without.
    pub async fn create_on(client: ClientConfig, partitions: i32, dead_letters: bool) -> Self {
        let run = unique("t");
        let topics = Self {
            study: format!("{run}-study-events"),
            interview: format!("{run}-interview-events"),
            api_key: format!("{run}-api-key-events"),
        };
        let mut names: Vec<String> = Topic::ALL.iter().map(|t| topics.name(*t).to_string()).collect();
        if dead_letters {
            names.extend(Topic::ALL.iter().map(|t| format!("{}.dlq", topics.name(*t))));
        }
        // The mock cluster answers no CreateTopics: its control port creates them.
        let on_mock = client.get("bootstrap.servers") == Some(env("KAFKA_BROKERS").as_str());
        if let Some(control) = broker_control::address().filter(|_| on_mock) {
            let create = move || {
                for name in &names {
                    broker_control::order(&control, &format!("create {name} {partitions}"));
                }
            };
            tokio::task::spawn_blocking(create).await.expect("topics created");
            return topics;
        }
        let admin: AdminClient<DefaultClientContext> = client.create().expect("admin client");
        let new: Vec<NewTopic> =
            names.iter().map(|n| NewTopic::new(n, partitions, TopicReplication::Fixed(1))).collect();
        let results = admin.create_topics(&new, &AdminOptions::new()).await.expect("create topics");
        for result in results {
            result.expect("topic created");
        }
        topics
    }

    /// Fresh topics (see [`Topics::create`]) holding `messages`, all published.
    pub async fn holding(messages: &[Outgoing]) -> Self {
        let topics = Self::create().await;
        publish(&producer(), &topics, messages).await;
        topics
    }

    pub fn name(&self, topic: Topic) -> &str {
        match topic {
            Topic::Study => &self.study,
            Topic::Interview => &self.interview,
            Topic::ApiKey => &self.api_key,
        }
    }
}

/// The settings of a client of the stack's broker.
pub fn client() -> ClientConfig {
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", env("KAFKA_BROKERS"));
    client
}

/// The settings of a client of the stack's broker behind TLS, trusting the stack's CA.
pub fn tls_client() -> ClientConfig {
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", env("KAFKA_TLS_BROKERS"))
        .set("security.protocol", "SSL")
        .set("ssl.ca.location", env("TLS_CA_FILE"));
    client
}

/// A producer as the main product might configure it, allowing messages up to 10 MB.
pub fn producer() -> FutureProducer {
    producer_on(client())
}

/// A producer of the broker `client` reaches, configured as [`producer`].
pub fn producer_on(mut client: ClientConfig) -> FutureProducer {
    client
        .set("message.max.bytes", "10000000")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "60000")
        .create()
        .expect("producer")
}

/// Publishes the messages in order (per key, order is kept: one key goes to one partition).
pub async fn publish(producer: &FutureProducer, topics: &Topics, messages: &[Outgoing]) {
    for chunk in messages.chunks(2000) {
        let sends = chunk.iter().map(|m| {
            let record = FutureRecord::to(topics.name(m.topic)).key(&m.key).payload(&m.value);
            producer.send(record, Duration::from_secs(30))
        });
        for result in futures::future::join_all(sends).await {
            result.map_err(|(e, _)| e).expect("message delivered");
        }
    }
}

/// Publishes one message with headers, as the product sets a `traceparent` on the events it publishes.
pub async fn publish_with_headers(
    producer: &FutureProducer,
    topics: &Topics,
    message: &Outgoing,
    headers: &[(&str, &str)],
) {
    let headers = headers
        .iter()
        .fold(OwnedHeaders::new(), |all, (key, value)| all.insert(Header { key, value: Some(value.as_bytes()) }));
    let record =
        FutureRecord::to(topics.name(message.topic)).key(&message.key).payload(&message.value).headers(headers);
    producer.send(record, Duration::from_secs(30)).await.map_err(|(e, _)| e).expect("message delivered");
}

/// A message read back from a topic, with its headers as strings.
#[derive(Debug, Clone)]
pub struct Received {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, String)>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// Reads every partition of `topic` from the start until `count` messages are in, or `timeout` passes.
pub async fn read(topic: &str, count: usize, timeout: Duration) -> Vec<Received> {
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", env("KAFKA_BROKERS"))
            .set("group.id", unique("reader"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut list = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            list.add_partition_offset(&topic, p, Offset::Beginning).expect("partition");
        }
        consumer.assign(&list).expect("assign");
        let deadline = std::time::Instant::now() + timeout;
        let mut out = Vec::new();
        while out.len() < count && std::time::Instant::now() < deadline {
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), String::from_utf8_lossy(h.value.unwrap_or_default()).into()))
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Received {
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    headers,
                });
            }
        }
        out
    })
    .await
    .expect("reader thread")
}

/// Commits every partition of `topics` for `group` at its earliest or its latest offset, as
/// `kafka-consumer-groups --reset-offsets --to-earliest` (or `--to-latest`) does while the group is empty,
/// through a client of `client`'s broker. A coordinator may take commits from members only (the mock
/// cluster's does), so this joins the group to commit, and leaves.
pub fn reset_offsets(mut client: ClientConfig, topics: &Topics, group: &str, latest: bool) {
    use rdkafka::consumer::CommitMode;
    use std::time::Instant;
    const TIMEOUT: Duration = Duration::from_secs(10);
    client
        .set("group.id", group)
        .set("session.timeout.ms", "6000")
        .set("partition.assignment.strategy", "cooperative-sticky");
    let consumer: BaseConsumer = client.create().expect("consumer");
    let names: Vec<&str> = Topic::ALL.iter().map(|t| topics.name(*t)).collect();
    let mut list = TopicPartitionList::new();
    for name in &names {
        let metadata = consumer.fetch_metadata(Some(name), TIMEOUT).expect("the topic's metadata");
        for partition in metadata.topics().iter().flat_map(|t| t.partitions()) {
            let (low, high) = consumer.fetch_watermarks(name, partition.id(), TIMEOUT).expect("watermarks");
            let at = Offset::Offset(if latest { high } else { low });
            list.add_partition_offset(name, partition.id(), at).expect("offset");
        }
    }
    consumer.subscribe(&names).expect("subscribed");
    let joined = Instant::now() + Duration::from_secs(30);
    while consumer.assignment().expect("assignment").count() < list.count() {
        assert!(Instant::now() < joined, "the resetting consumer was given every partition");
        let _ = consumer.poll(Duration::from_millis(100));
    }
    // Sent without waiting (a commit that waits has no deadline), then read back until it holds, and sent
    // again each second meanwhile: a commit that meets a rebalance (a cooperative assignor's second round)
    // is refused and not tried again by the client.
    let committed = Instant::now() + Duration::from_secs(30);
    let mut sent = Instant::now();
    consumer.commit(&list, CommitMode::Async).expect("offsets reset");
    let offsets = |list: &TopicPartitionList| {
        let mut all: Vec<_> =
            list.elements().iter().map(|e| (e.topic().to_string(), e.partition(), e.offset().to_raw())).collect();
        all.sort();
        all
    };
    while consumer.committed(TIMEOUT).ok().is_none_or(|now| offsets(&now) != offsets(&list)) {
        assert!(Instant::now() < committed, "the reset offsets were committed");
        let _ = consumer.poll(Duration::from_millis(100));
        if sent.elapsed() >= Duration::from_secs(1) {
            consumer.commit(&list, CommitMode::Async).expect("offsets reset");
            sent = Instant::now();
        }
    }
    consumer.unsubscribe();
    let left = Instant::now() + Duration::from_secs(30);
    while consumer.assignment().expect("assignment").count() > 0 {
        assert!(Instant::now() < left, "the resetting consumer left the group");
        let _ = consumer.poll(Duration::from_millis(100));
    }
}
