//! The projector as a member of its Kafka consumer group (the default membership), on librdkafka's mock
//! cluster, whose coordinator rebalances: instances join, leave and are SIGKILLed while events flow, and
//! the read model ends identical to one run; what an operator's offset reset does.

mod takeovers;

use std::time::{Duration, Instant};

use end_to_end::events::Outgoing;
use end_to_end::kafka::{self, Topics, PARTITIONS};
use end_to_end::mock_kafka::{MockKafka, REBALANCE_ROUND_MS, SESSION_TIMEOUT_MS};
use end_to_end::scenario::Scenario;
use end_to_end::{eventually, eventually_showing, metrics, read_model, redis, runner, unique};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use shared::connection::Connection;
use shared::{Keyspace, Topic};

/// Every partition of the three event topics.
const ALL_PARTITIONS: usize = 3 * PARTITIONS as usize;

/// Waits until `count` live instances report partitions that add up to all of them, each holding some;
/// returns how many each holds.
async fn split_among(conn: &Connection, prefix: &str, count: usize, timeout: Duration) -> Vec<usize> {
    let what = format!("{count} members to hold every partition between them");
    eventually(timeout, &what, || async {
        let held: Vec<usize> = runner::instances(conn, prefix).await.into_iter().map(|(_, n, _)| n).collect();
        (held.len() == count && held.iter().sum::<usize>() == ALL_PARTITIONS && held.iter().all(|&n| n > 0))
            .then_some(held)
    })
    .await
}

/// Runs a member of `config` until it consumed `total` messages, then stops it.
async fn build(config: projector::Config, total: u64) {
    let running = runner::spawn(config).await;
    running.wait_until_consumed(total, Duration::from_secs(120)).await;
    running.stop_within(STOP).await;
}

/// The read model of `topics` built by one member alone.
async fn one_run(kafka: &MockKafka, topics: &Topics, total: u64) -> String {
    let keys = Keyspace::new(unique("scratch"), 1);
    let config = kafka.config(topics, keys.prefix(), &unique("g"), &[]);
    build(config, total).await;
    runner::digest(&keys).await
}

/// A mock cluster with fresh topics holding the first half of a generated scenario, and a read model
/// and a group of the test's own.
struct HalfPublished {
    kafka: MockKafka,
    topics: Topics,
    producer: FutureProducer,
    scenario: Scenario,
    conn: Connection,
    prefix: String,
    group: String,
}

impl HalfPublished {
    async fn start(seed: u64) -> Self {
        let kafka = MockKafka::start();
        let topics = kafka.topics();
        let producer = kafka::producer_on(kafka.client());
        let scenario = Scenario::generate(seed, 3, 12, 6);
        kafka::publish(&producer, &topics, Self::halves(&scenario).0).await;
        let (conn, prefix, group) = (redis().await, unique("rm"), unique("g"));
        Self { kafka, topics, producer, scenario, conn, prefix, group }
    }

    fn halves(scenario: &Scenario) -> (&[Outgoing], &[Outgoing]) {
        scenario.messages.split_at(scenario.messages.len() / 2)
    }

    fn first(&self) -> &[Outgoing] {
        Self::halves(&self.scenario).0
    }

    async fn publish_second(&self) {
        kafka::publish(&self.producer, &self.topics, Self::halves(&self.scenario).1).await;
    }

    /// A member's settings, with the given Kafka properties.
    fn config(&self, properties: &[(&str, &str)]) -> projector::Config {
        self.kafka.config(&self.topics, &self.prefix, &self.group, properties)
    }

    fn keys(&self) -> Keyspace {
        Keyspace::new(self.prefix.clone(), 1)
    }

    /// Waits until the read model holds the whole scenario, stops `member`, and checks that the read
    /// model equals one member's run of the same topics.
    async fn ends_as_one_run(&self, member: runner::Running) {
        read_model::wait_until_applied_everything(&self.conn, &self.keys(), &self.scenario, Duration::from_secs(60))
            .await;
        member.stop_within(STOP).await;
        let total = self.scenario.messages.len() as u64;
        assert_eq!(runner::digest(&self.keys()).await, one_run(&self.kafka, &self.topics, total).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_that_join_leave_and_are_sigkilled_share_the_partitions_the_group_assigns_and_end_identical_to_one_run()
{
    let kafka = MockKafka::start();
    let topics = kafka.topics();
    let producer = kafka::producer_on(kafka.client());
    let scenario = Scenario::generate(0x5eed_0848, 4, 20, 8);
    let total = scenario.messages.len();
    let parts: Vec<&[_]> = scenario.messages.chunks(total.div_ceil(3)).collect();
    kafka::publish(&producer, &topics, parts[0]).await;
    let conn = redis().await;
    let (prefix, group) = (unique("rm"), unique("g"));
    let keys = Keyspace::new(prefix.clone(), 1);

    // A binary (to be SIGKILLed) and an instance in this process join; the group splits the partitions.
    let mut doomed = kafka.spawn_process(&topics, &prefix, &group, &[]);
    let leaving = runner::spawn(kafka.config(&topics, &prefix, &group, &[])).await;
    split_among(&conn, &prefix, 2, Duration::from_secs(60)).await;

    // A third joins while the second part arrives.
    let publishing = {
        let (producer, topics, part) = (producer.clone(), topics.clone(), parts[1].to_vec());
        tokio::spawn(async move { kafka::publish(&producer, &topics, &part).await })
    };
    let survivor = runner::spawn(kafka.config(&topics, &prefix, &group, &[])).await;
    split_among(&conn, &prefix, 3, Duration::from_secs(60)).await;
    publishing.await.expect("published");

    // One leaves cleanly and one dies by SIGKILL while the last part arrives.
    let publishing = {
        let (producer, topics, part) = (producer.clone(), topics.clone(), parts[2].to_vec());
        tokio::spawn(async move { kafka::publish(&producer, &topics, &part).await })
    };
    leaving.stop_within(STOP).await;
    doomed.sigkill();
    let killed = Instant::now();
    publishing.await.expect("published");
    // The group takes the dead member's partitions back once its session is over, and gives them to the
    // survivor: no partition is left unread for longer than that, plus the mock's rebalance rounds (the
    // leave's, which the dead member still counts in, then the one without it), plus 3 s for the looks
    // of a loaded machine.
    let stall = Duration::from_millis(u64::from(SESSION_TIMEOUT_MS + 2 * REBALANCE_ROUND_MS + 3000));
    eventually(stall, "the survivor to hold every partition within the session timeout", || async {
        let all = runner::instances(&conn, &prefix).await;
        (all.len() == 1 && all[0].1 == ALL_PARTITIONS).then_some(())
    })
    .await;
    println!("the survivor held every partition {:?} after the SIGKILL", killed.elapsed());
    read_model::wait_until_applied_everything(&conn, &keys, &scenario, Duration::from_secs(120)).await;
    survivor.wait_until_consumed(1, Duration::from_secs(1)).await;
    let digest = runner::digest(&keys).await;
    survivor.stop_within(STOP).await;
    assert_eq!(digest, one_run(&kafka, &topics, total as u64).await, "identical to one member's run");
}

/// What the group has committed on each of `topics`' partitions, and each partition's end.
fn committed_and_ends(kafka: &MockKafka, topics: &Topics, group: &str) -> Vec<(i64, i64)> {
    let consumer: BaseConsumer = kafka.client().set("group.id", group).create().expect("consumer");
    let committed =
        consumer.committed_offsets(partitions(topics, Offset::Invalid), TIMEOUT).expect("committed offsets");
    committed
        .elements()
        .iter()
        .map(|e| {
            let (_, end) = consumer.fetch_watermarks(e.topic(), e.partition(), TIMEOUT).expect("watermarks");
            (e.offset().to_raw().unwrap_or(-1), end)
        })
        .collect()
}

/// Every partition of `topics` at `offset`.
fn partitions(topics: &Topics, offset: Offset) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for topic in Topic::ALL {
        for partition in 0..PARTITIONS {
            list.add_partition_offset(topics.name(topic), partition, offset).expect("partition");
        }
    }
    list
}

/// Commits every partition of `topics` for `group` at its earliest or its latest offset, on the mock.
fn reset_offsets(kafka: &MockKafka, topics: &Topics, group: &str, latest: bool) {
    kafka::reset_offsets(kafka.client(), topics, group, latest);
}

const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a member may take to leave the group and stop.
const STOP: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_offset_reset_neither_skips_nor_rereads_events_and_the_group_shows_the_true_positions() {
    let world = HalfPublished::start(0x5eed_0849).await;
    let (kafka, topics, group, keys) = (&world.kafka, &world.topics, world.group.as_str(), world.keys());
    let total = world.scenario.messages.len() as u64;
    build(world.config(&[]), world.first().len() as u64).await;

    // While the group is empty, events arrive and an operator resets its offsets past them.
    world.publish_second().await;
    reset_offsets(kafka, topics, group, true);
    let running = runner::spawn(world.config(&[])).await;
    read_model::wait_until_applied_everything(&world.conn, &keys, &world.scenario, Duration::from_secs(60)).await;
    let second = total - world.first().len() as u64;
    // A batch is counted after Redis took it: the read model can be whole a moment before the count.
    running.wait_until_consumed(second, Duration::from_secs(30)).await;
    assert_eq!(running.consumed(), second, "the reset skipped nothing and nothing was read twice");
    running.stop_within(STOP).await;
    let digest = runner::digest(&keys).await;

    // Reset to the earliest offsets: nothing is read again, and the group's offsets go back to where the
    // read model stands as soon as the partitions are taken.
    reset_offsets(kafka, topics, group, false);
    assert!(committed_and_ends(kafka, topics, group).iter().any(|(committed, end)| committed < end));
    let running = runner::spawn(world.config(&[])).await;
    eventually(Duration::from_secs(30), "the group's offsets back at the ends", || async {
        committed_and_ends(kafka, topics, group).iter().all(|(committed, end)| committed == end).then_some(())
    })
    .await;
    assert_eq!(running.consumed(), 0, "nothing read again");
    let losses =
        |running: &runner::Running| metrics::sample(&running.metrics_text(), "projector_redis_losses_total", &[]);
    assert_eq!(losses(&running), 0.0, "a reset is no loss");
    running.stop_within(STOP).await;
    assert_eq!(runner::digest(&keys).await, digest);
    assert_eq!(digest, one_run(kafka, topics, total).await);

    // Offsets the projector committed still tell a Redis that lost the read model while none ran.
    runner::delete_generation(&mut redis().await, &keys).await;
    let running = runner::spawn(world.config(&[])).await;
    assert_eq!(losses(&running), 1.0, "the start found the positions behind the projector's commits");
    read_model::wait_until_applied_everything(&world.conn, &keys, &world.scenario, Duration::from_secs(60)).await;
    running.wait_until_consumed(total, Duration::from_secs(60)).await;
    running.stop_within(STOP).await;
    assert_eq!(runner::digest(&keys).await, digest);
}

/// A commit the broker refuses is sent again until one is taken: the group's offsets come to show the read
/// model's positions though the commit placing the partitions and the next ones were refused, and no new
/// event comes to carry a later commit. Red when a refused commit waits for its partition to move. Each
/// refusal is counted by its code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_the_broker_refuses_are_sent_again_until_the_group_shows_the_read_models_positions() {
    let world = HalfPublished::start(0x5eed_0851).await;
    let (kafka, topics, group) = (&world.kafka, &world.topics, world.group.as_str());
    build(world.config(&[]), world.first().len() as u64).await;
    reset_offsets(kafka, topics, group, false);
    assert!(committed_and_ends(kafka, topics, group).iter().any(|(committed, end)| committed < end));

    kafka.refuse_commits(5);
    let running = runner::spawn(world.config(&[])).await;
    eventually_showing(Duration::from_secs(30), "the group's offsets at the read model's positions", || async {
        let now = committed_and_ends(kafka, topics, group);
        if now.iter().all(|(committed, end)| committed == end) {
            return Ok(());
        }
        Err(format!("{now:?} (committed, end)"))
    })
    .await;
    assert_eq!(running.consumed(), 0, "nothing read again");
    let refused = ["source=\"commit\"", "code=\"CommitRefused\""];
    let counted = metrics::sample(&running.metrics_text(), "projector_kafka_errors_total", &refused);
    assert!(counted >= 5.0, "every refused commit counted: {counted} of 5");
    running.stop_within(STOP).await;
}

/// A member reads the partitions the group assigns it from the read model's positions, so it never needs
/// the group's committed offsets: a coordinator that fails to return them (once, or again and again)
/// holds up no partition. Red when the assignment waits for them: librdkafka starts no partition whose
/// committed offset it failed to read, and the member never reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_reads_its_partitions_though_the_coordinator_fails_to_return_the_committed_offsets() {
    let world = HalfPublished::start(0x5eed_0852).await;
    world.kafka.fail_offset_fetches(3);
    let member = runner::spawn(world.config(&[])).await;
    world.publish_second().await;
    world.ends_as_one_run(member).await;
}

/// KIP-848's protocol, where the broker offers it: the broker assigns, and the members ask for nothing
/// but the topics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_kip_848s_protocol_two_members_share_the_partitions_and_one_takes_over_when_the_other_leaves() {
    let world = HalfPublished::start(0x5eed_0850).await;
    let kip_848 = [("group.protocol", "consumer")];
    let leaving = runner::spawn(world.config(&kip_848)).await;
    let staying = runner::spawn(world.config(&kip_848)).await;
    split_among(&world.conn, &world.prefix, 2, Duration::from_secs(60)).await;
    leaving.stop_within(STOP).await;
    world.publish_second().await;
    eventually(Duration::from_secs(60), "the one left to hold every partition", || async {
        let all = runner::instances(&world.conn, &world.prefix).await;
        (all.len() == 1 && all[0].1 == ALL_PARTITIONS).then_some(())
    })
    .await;
    world.ends_as_one_run(staying).await;
}

/// An eager assignor (the operator's `range`) takes every partition away at each rebalance and gives
/// them back: a member given back exactly what it read still places them and reads on. Here another
/// member of the group, subscribed to a topic of its own, makes the rebalance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_an_eager_assignor_a_member_given_back_the_same_partitions_reads_on() {
    let world = HalfPublished::start(0x5eed_0851).await;
    let range = [("partition.assignment.strategy", "range")];
    let member = runner::spawn(world.config(&range)).await;
    split_among(&world.conn, &world.prefix, 1, Duration::from_secs(60)).await;
    member.wait_until_consumed(world.first().len() as u64, Duration::from_secs(60)).await;

    let other = unique("other-topic");
    world.kafka.create_topic(&other);
    let mut client = world.kafka.client();
    client
        .set("group.id", &world.group)
        .set("partition.assignment.strategy", "range")
        .set("session.timeout.ms", "6000");
    let rebalancer: BaseConsumer = client.create().expect("consumer");
    rebalancer.subscribe(&[&other]).expect("subscribed");
    let joined = Instant::now() + Duration::from_secs(30);
    while rebalancer.assignment().expect("assignment").count() == 0 {
        assert!(Instant::now() < joined, "the other member was given its topic");
        let _ = rebalancer.poll(Duration::from_millis(100));
    }

    world.publish_second().await;
    read_model::wait_until_applied_everything(&world.conn, &world.keys(), &world.scenario, Duration::from_secs(30))
        .await;
    rebalancer.unsubscribe();
    member.stop_within(STOP).await;
}
