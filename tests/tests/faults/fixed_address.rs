//! Redis behind a fixed primary address, the way docs/deploying.md supports Redis Sentinel and managed
//! services' failovers: the projector and the API know one address, and a failover moves it to a promoted
//! replica. The replica is behind when promoted (replication is asynchronous): the loss is seen, healed,
//! and no answer is wrong once it was.

use std::time::{Duration, Instant};

use end_to_end::faults::{assert_no_wrong_answer_after, Healing, Prober, Publisher, DETECTION};
use end_to_end::fixed_address::FixedAddress;
use end_to_end::kafka::Topics;
use end_to_end::own_redis::{OwnRedis, Persistence};
use end_to_end::scenario::Scenario;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_behind_a_fixed_primary_address_to_a_replica_that_lags_is_seen_and_healed() {
    let mut primary = OwnRedis::with(Persistence::AofAlways);
    let replica = OwnRedis::with(Persistence::AofAlways);
    let address = FixedAddress::start(&format!("127.0.0.1:{}", primary.port())).await;
    replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    let scenario = Scenario::generate(0x5eed_1201, 4, 10, 4);
    let topics = Topics::holding(&scenario.messages).await;
    let mut world = Healing::start(&topics, &address.url(), false).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let synchronized = |server: &OwnRedis| server.cli(&["INFO", "replication"]).contains("master_link_status:up");
    // A full synchronization starts after the primary's `repl-diskless-sync-delay` (5 s by default).
    end_to_end::eventually(Duration::from_secs(30), "the replica", || async { synchronized(&replica).then_some(()) })
        .await;
    let prober = Prober::start(&world.app, &scenario);
    let publisher = Publisher::start(&topics, &scenario);
    publisher.wait_more(20).await;

    // The replica falls behind (its link cut, as a partition or a slow link leaves it), the primary takes
    // more, then dies; the replica is promoted and the address moved to it.
    replica.cli(&["REPLICAOF", "NO", "ONE"]);
    publisher.wait_more(30).await;
    primary.kill();
    let failed_over = Instant::now();
    address.point_at(&format!("127.0.0.1:{}", replica.port()));
    let detected = world.wait_detected(DETECTION).await;
    println!("detected {:?} after the failover", detected - failed_over);
    let published = world.converge_after(publisher, &topics, scenario.messages.len()).await;
    assert!(published > 50, "events flowed throughout: {published}");
    assert_no_wrong_answer_after(&prober.finish().await, detected);
}
