//! librdkafka's mock cluster: Kafka brokers inside the test process whose group coordinator balances
//! consumer groups (the classic protocol and KIP-848's), for the tests of the projector as a member of
//! its consumer group. Its brokers listen on loopback, so a projector binary reaches them too.

use std::process::{Command, Stdio};

use projector::{Config, Membership};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, DefaultProducerContext, Producer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{bindings, ClientConfig};
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

/// The heartbeat interval the mock's coordinator gives members under KIP-848's protocol (its own default
/// is 3 s): an assignment the coordinator changed reaches a member within this.
const KIP_848_HEARTBEAT_MS: i32 = 500;

/// Three mock brokers.
pub struct MockKafka {
    /// The client that owns the mock cluster (`test.mock.num.brokers`): the cluster lives as long as it.
    owner: BaseProducer,
    brokers: String,
}

impl MockKafka {
    pub fn start() -> Self {
        let owner: BaseProducer = ClientConfig::new().set("test.mock.num.brokers", "3").create().expect("mock cluster");
        let cluster = owner.client().native_ptr();
        // SAFETY: `owner` is a live client created with `test.mock.num.brokers`, so it owns a mock
        // cluster, which lives until the client is dropped; the setters only store the values. Under
        // KIP-848's protocol the mock's coordinator has its own session (30 s by default) whatever the
        // members ask: a member whose leave did not reach it keeps its partitions that long. It is the
        // classic protocol's session here, so the tests wait alike under either.
        unsafe {
            let cluster = bindings::rd_kafka_handle_mock_cluster(cluster);
            assert!(!cluster.is_null(), "the client owns a mock cluster");
            bindings::rd_kafka_mock_set_group_consumer_session_timeout_ms(cluster, SESSION_TIMEOUT_MS as i32);
            bindings::rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(cluster, KIP_848_HEARTBEAT_MS);
        }
        let brokers = MockKafka::cluster_of(&owner).bootstrap_servers();
        Self { owner, brokers }
    }

    fn cluster_of(owner: &BaseProducer) -> MockCluster<'_, DefaultProducerContext> {
        owner.client().mock_cluster().expect("the client owns a mock cluster")
    }

    fn cluster(&self) -> MockCluster<'_, DefaultProducerContext> {
        MockKafka::cluster_of(&self.owner)
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
            self.cluster().create_topic(name, PARTITIONS, 1).expect("topic created");
            self.cluster().create_topic(&format!("{name}.dlq"), PARTITIONS, 1).expect("dead-letter topic created");
        }
        topics
    }

    /// Refuses the next `count` offset commits, of any group, with an error the client does not retry
    /// (`OFFSET_METADATA_TOO_LARGE`): a broker that takes reads but loses or refuses commits.
    pub fn refuse_commits(&self, count: usize) {
        let errors = vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE; count];
        self.cluster().request_errors(RDKafkaApiKey::OffsetCommit, &errors);
    }

    /// Fails the next `count` reads of committed offsets, of any group, with an error the client does not
    /// retry (Kafka's `UNKNOWN_SERVER_ERROR`, -1: librdkafka's `RD_KAFKA_RESP_ERR_UNKNOWN`): a coordinator that
    /// has a bad moment.
    pub fn fail_offset_fetches(&self, count: usize) {
        let errors = vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN; count];
        self.cluster().request_errors(RDKafkaApiKey::OffsetFetch, &errors);
    }

    /// A topic of one partition, for a member of another subscription.
    pub fn create_topic(&self, name: &str) {
        self.cluster().create_topic(name, 1, 1).expect("topic created");
    }

    /// A projector's settings on these brokers, a member of `group` with the given Kafka properties
    /// (a short session; under KIP-848's protocol the coordinator's, set alike in [`MockKafka::start`]).
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
