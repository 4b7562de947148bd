//! librdkafka's mock cluster: Kafka brokers inside the test process whose group coordinator balances
//! consumer groups (the classic protocol and KIP-848's), for the tests of the projector as a member of
//! its consumer group. Its brokers listen on loopback, so a projector binary reaches them too.

use std::process::{Command, Stdio};

use projector::{Config, Membership};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::ClientConfig;
use shared::Topic;

use crate::kafka::{Topics, PARTITIONS};
use crate::runner::{self, KillOnDrop};
use crate::unique;

/// How long a member that stopped heartbeating stays in the group: a SIGKILLed instance's partitions
/// move after this.
pub const SESSION_TIMEOUT_MS: u32 = 6000;

/// How long the mock's coordinator waits for the members to rejoin before it ends a rebalance: the
/// session less a second (`rdkafka_mock_cgrp.c`), however soon they rejoin.
pub const REBALANCE_ROUND_MS: u32 = SESSION_TIMEOUT_MS - 1000;

/// Three mock brokers.
pub struct MockKafka {
    cluster: MockCluster<'static, DefaultProducerContext>,
    brokers: String,
}

impl MockKafka {
    pub fn start() -> Self {
        let cluster = MockCluster::new(3).expect("mock cluster");
        let brokers = cluster.bootstrap_servers();
        Self { cluster, brokers }
    }

    /// Its bootstrap servers.
    pub fn brokers(&self) -> &str {
        &self.brokers
    }

    /// The settings of a client of these brokers.
    pub fn client(&self) -> ClientConfig {
        let mut client = ClientConfig::new();
        client.set("bootstrap.servers", &self.brokers);
        client
    }

    /// Fresh topics with their dead-letter topics (the mock has no CreateTopics).
    pub fn topics(&self) -> Topics {
        let run = unique("t");
        let topics = Topics {
            study: format!("{run}-study-events"),
            interview: format!("{run}-interview-events"),
            api_key: format!("{run}-api-key-events"),
        };
        for topic in Topic::ALL {
            let name = topics.name(topic);
            self.cluster.create_topic(name, PARTITIONS, 1).expect("topic created");
            self.cluster.create_topic(&format!("{name}.dlq"), PARTITIONS, 1).expect("dead-letter topic created");
        }
        topics
    }

    /// Refuses the next `count` offset commits, of any group, with an error the client does not retry
    /// (`OFFSET_METADATA_TOO_LARGE`): a broker that takes reads but loses or refuses commits.
    pub fn refuse_commits(&self, count: usize) {
        let errors = vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE; count];
        self.cluster.request_errors(RDKafkaApiKey::OffsetCommit, &errors);
    }

    /// A topic of one partition, for a member of another subscription.
    pub fn create_topic(&self, name: &str) {
        self.cluster.create_topic(name, 1, 1).expect("topic created");
    }

    /// A projector's settings on these brokers, a member of `group` with the given Kafka properties
    /// (a short session unless KIP-848's protocol is asked for, which has the broker's own).
    pub fn config(&self, topics: &Topics, prefix: &str, group: &str, properties: &[(&str, &str)]) -> Config {
        let mut config = runner::config(topics, prefix, group);
        config.brokers = Some(self.brokers.clone());
        config.membership = Membership::Group;
        config.kafka.kafka_property.extend(self.properties(properties));
        config
    }

    /// The projector binary on these brokers, as [`MockKafka::config`] sets it up.
    pub fn spawn_process(&self, topics: &Topics, prefix: &str, group: &str, properties: &[(&str, &str)]) -> KillOnDrop {
        let mut command = Command::new(runner::binary());
        command.args(runner::args_on(&self.brokers, topics, prefix, group)).args(["--membership", "group"]);
        for (key, value) in self.properties(properties) {
            command.args(["--kafka-property", &format!("{key}={value}")]);
        }
        KillOnDrop(command.stdout(Stdio::null()).spawn().expect("projector starts"))
    }

    fn properties(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let kip_848 = extra.iter().any(|(k, v)| *k == "group.protocol" && *v == "consumer");
        let mut all: Vec<(String, String)> = Vec::new();
        if !kip_848 {
            all.push(("session.timeout.ms".into(), SESSION_TIMEOUT_MS.to_string()));
            all.push(("heartbeat.interval.ms".into(), "500".into()));
        }
        all.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        all
    }
}
