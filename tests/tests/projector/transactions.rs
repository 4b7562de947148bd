//! Topics written by a transactional producer: each commit leaves a marker that takes an offset and is
//! never delivered to a consumer, so the last offset of a quiet partition may be one no projector will
//! ever apply. Healing, readiness and a rebuild's handover must end there all the same.

use std::time::{Duration, Instant};

use end_to_end::faults::{assert_no_wrong_answer_after, reference, Healing, Prober, Publisher, CONVERGENCE, DETECTION};
use end_to_end::kafka::{self, Topics, PARTITIONS};
use end_to_end::markers::append_commit_marker;
use end_to_end::own_redis::{OwnRedis, Persistence};
use end_to_end::scenario::Scenario;
use end_to_end::{eventually, runner};
use shared::Topic;

/// Appends a commit marker to every partition of the three topics.
async fn commit_markers_everywhere(topics: &Topics) {
    for topic in Topic::ALL {
        for partition in 0..PARTITIONS {
            append_commit_marker(topics.name(topic), partition).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_ending_in_transaction_markers_become_ready_heal_a_flush_and_rebuild() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    let scenario = Scenario::generate(0x5eed_7a01, 3, 8, 4);
    let (first, rest) = scenario.messages.split_at(scenario.messages.len() / 2);
    let topics = Topics::holding(first).await;
    commit_markers_everywhere(&topics).await;
    kafka::publish(&kafka::producer(), &topics, rest).await;
    commit_markers_everywhere(&topics).await;
    let expected = reference(&topics, &scenario).await;

    // A new read model is incomplete until every partition is read to its end: a marker ends them all.
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;

    let prober = Prober::start(&world.app, &scenario);
    prober.wait_answered(Instant::now(), Duration::from_secs(10)).await;
    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    let detected = world.wait_detected(DETECTION).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_no_wrong_answer_after(&prober.finish().await, detected);

    // A rebuild hands over once it reached what the live projector committed: past the markers too.
    let switched = tokio::time::timeout(CONVERGENCE, runner::rebuild(world.config().clone())).await;
    assert_eq!(switched.expect("the rebuild ends").expect("the rebuild succeeds"), Some(2));
    world.wait_converged(&expected, CONVERGENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_never_idle_still_passes_the_markers_ending_the_quiet_key_partitions_and_heals() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    let scenario = Scenario::generate(0x5eed_7a02, 3, 8, 4);
    let topics = Topics::holding(&scenario.messages).await;
    for partition in 0..PARTITIONS {
        append_commit_marker(topics.name(Topic::ApiKey), partition).await;
    }
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;

    // A steady stream of study events: every batch the projector takes has a message in it.
    let publisher = Publisher::start(&topics, &scenario);
    publisher.wait_more(20).await;
    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    world.wait_detected(DETECTION).await;
    // Healed (every partition read to its end again, the key partitions past their markers) while the
    // stream goes on.
    eventually(Duration::from_secs(60), "healed while events flow", || async {
        (world.app.admin_get("/readyz").await.status() == 200).then_some(())
    })
    .await;
    publisher.wait_more(20).await;
    world.converge_after(publisher, &topics, scenario.messages.len()).await;
}
