//! How long a member's partitions wait for another when it goes, the figures of docs/operating.md's
//! takeover table: a member stopped by SIGTERM leaves the group, so its partitions move after one
//! rebalance rather than after its session; a static member (`group.instance.id`, under KIP-848's
//! protocol, whose coordinator on the mock keeps static members) stopped and started again takes its own
//! partitions back, and no other member's partitions move meanwhile. Each prints what it measured.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use end_to_end::mock_kafka::{REBALANCE_ROUND_MS, SESSION_TIMEOUT_MS};
use end_to_end::{eventually, read_model, runner};

use super::{split_among, HalfPublished, ALL_PARTITIONS, STOP};

/// A member SIGTERMed while events flow: its partitions are held by the other within one rebalance of
/// the coordinator, sooner than its session could end and a rebalance follow (what a SIGKILL waits
/// for), and the read model ends identical to one run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stopped_by_sigterm_leaves_the_group_and_its_partitions_move_before_its_session_could_end() {
    let world = HalfPublished::start(0x5eed_0852).await;
    let leaving = world.kafka.spawn_process(&world.topics, &world.prefix, &world.group, &[]);
    let staying = runner::spawn(world.config(&[])).await;
    split_among(&world.conn, &world.prefix, 2, Duration::from_secs(60)).await;
    let publishing = world.publish_second();
    leaving.sigterm();
    let stopped = Instant::now();
    let held_all = async {
        eventually(Duration::from_secs(60), "the one left to hold every partition", || async {
            let all = runner::instances(&world.conn, &world.prefix).await;
            all.iter().any(|(_, partitions, _)| *partitions == ALL_PARTITIONS).then(|| stopped.elapsed())
        })
        .await
    };
    let (took, ()) = tokio::join!(held_all, publishing);
    println!("the member left held every partition {took:?} after the SIGTERM");
    let session_then_rebalance = Duration::from_millis(u64::from(SESSION_TIMEOUT_MS + REBALANCE_ROUND_MS));
    assert!(took < session_then_rebalance, "took {took:?}: the stopped member did not leave the group");
    world.ends_as_one_run(staying).await;
}

/// A rolling restart of a static member under KIP-848's protocol: stopped by SIGTERM and started again
/// under the same `group.instance.id` within its session, it is given back its own partitions, and the
/// other member's never change hands (no rebalance: nothing of theirs paused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_kip_848s_protocol_a_static_member_restarted_within_its_session_takes_its_own_partitions_back() {
    let world = HalfPublished::start(0x5eed_0853).await;
    let member = |id: &'static str| [("group.protocol", "consumer"), ("group.instance.id", id)];
    // The one staying starts first, so that it is known as the only one reporting.
    let other = runner::spawn(world.config(&member("projector-1"))).await;
    split_among(&world.conn, &world.prefix, 1, Duration::from_secs(60)).await;
    let other_id = runner::instances(&world.conn, &world.prefix).await.remove(0).0;
    let restarted = world.kafka.spawn_process(&world.topics, &world.prefix, &world.group, &member("projector-0"));
    split_among(&world.conn, &world.prefix, 2, Duration::from_secs(60)).await;
    let before = runner::instances(&world.conn, &world.prefix).await;
    let held = |all: &[(String, usize, u64)], id: &str| all.iter().find(|(i, ..)| i == id).map(|(_, n, _)| *n);
    let others = held(&before, &other_id).expect("the other member reports");
    let gone: HashSet<String> = before.iter().map(|(id, ..)| id.clone()).filter(|id| *id != other_id).collect();

    let mut restarted = restarted;
    restarted.sigterm();
    let stopped = Instant::now();
    let exited = restarted.wait().expect("the stopped member exits");
    assert!(exited.success(), "the stopped member ends cleanly: {exited}");
    let _again = world.kafka.spawn_process(&world.topics, &world.prefix, &world.group, &member("projector-0"));
    let took = eventually(Duration::from_secs(60), "the restarted member to hold its partitions again", || async {
        let all = runner::instances(&world.conn, &world.prefix).await;
        assert_eq!(held(&all, &other_id), Some(others), "the other member's partitions changed hands: {all:?}");
        let back = all.iter().any(|(id, n, _)| !gone.contains(id) && *id != other_id && n + others == ALL_PARTITIONS);
        back.then(|| stopped.elapsed())
    })
    .await;
    println!("the restarted static member held its partitions again {took:?} after the SIGTERM");
    world.publish_second().await;
    read_model::wait_until_applied_everything(&world.conn, &world.keys(), &world.scenario, Duration::from_secs(60))
        .await;
    let all = runner::instances(&world.conn, &world.prefix).await;
    assert_eq!(held(&all, &other_id), Some(others), "the other member's partitions changed hands: {all:?}");
    other.stop_within(STOP).await;
}
