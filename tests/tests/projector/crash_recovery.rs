//! The real projector binary killed with SIGKILL again and again during a large replay ends with exactly
//! the read model of an uninterrupted run: offsets are committed only after Redis has the events, and
//! applying an event twice changes nothing.

use std::time::Duration;

use end_to_end::dump::{digest, dump};
use end_to_end::kafka::{self, Topics};
use end_to_end::scenario::{self, Scenario};
use end_to_end::{read_model, redis, runner, unique};
use shared::Keyspace;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_killed_repeatedly_ends_identical_to_an_uninterrupted_run() {
    let (topics, scenario) = scenario::published(0x5eed_0002, 5, 25, 10).await;
    let total = scenario.messages.len();
    let mut conn = redis().await;

    let reference = runner::build_from_scratch(&topics, total as u64).await;
    let expected = dump(&mut conn, &reference).await;
    assert!(expected.len() > 1000, "a large read model: {} keys", expected.len());

    let killed = Keyspace::new(unique("rm"), 1);
    let group = unique("g");
    let mut child = runner::spawn_process(&topics, killed.prefix(), &group);
    for quarter in 1..=3 {
        // Kill once the projector has reached the aggregate of a message further along the stream.
        let message = &scenario.messages[total * quarter / 4];
        read_model::wait_until_reached(&conn, &killed, message, Duration::from_secs(120), "progress before the kill")
            .await;
        child.sigkill();
        child = runner::spawn_process(&topics, killed.prefix(), &group);
    }
    read_model::wait_until_applied_everything(&conn, &killed, &scenario, Duration::from_secs(180)).await;
    let actual = dump(&mut conn, &killed).await;
    assert_eq!(digest(&actual), digest(&expected));
    assert_eq!(actual, expected);
    terminate(child);
}

/// SIGTERM, then the projector must finish its batch, commit and exit cleanly.
fn terminate(mut child: runner::KillOnDrop) {
    let status = std::process::Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    assert!(status.expect("kill runs").success());
    let exit = child.wait().expect("projector exits");
    assert!(exit.success(), "graceful shutdown exits 0, got {exit}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_projector_resumes_from_its_committed_offsets() {
    let scenario = Scenario::generate(0x5eed_0003, 1, 4, 3);
    let (first, second) = scenario.messages.split_at(scenario.messages.len() / 2);
    let topics = Topics::holding(first).await;
    let (prefix, group) = (unique("rm"), unique("g"));
    runner::build(runner::config(&topics, &prefix, &group), first.len() as u64, Duration::from_secs(60)).await;

    kafka::publish(&kafka::producer(), &topics, second).await;
    let running = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    running.wait_until_consumed(second.len() as u64, Duration::from_secs(60)).await;
    // Nothing of the first half was consumed again: the group's offsets were committed on shutdown.
    assert_eq!(running.consumed(), second.len() as u64);
    let keys = Keyspace::new(prefix, 1);
    let org = &scenario.organizations()[0];
    let actual = end_to_end::read_model::read(&mut redis().await, &keys, &scenario, org).await;
    assert_eq!(actual, scenario.expected(org));
    running.stop().await;
}
