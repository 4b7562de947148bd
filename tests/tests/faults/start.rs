//! A projector's start checks what Redis holds against the broker's commits (a loss while no projector
//! ran), and from then on its looks compare every primary's `INFO` with the one before. A loss between the
//! two, after the check and before the first look, must be seen too: the first look is not where watching
//! begins, or that loss is taken for the state of things and never healed.

use std::time::Duration;

use end_to_end::faults::reference;
use end_to_end::kafka::Topics;
use end_to_end::own_redis::{OwnCluster, Persistence};
use end_to_end::scenario::Scenario;
use end_to_end::{eventually_showing, metrics, runner, unique};
use shared::connection::{Connection, Settings};
use shared::keys::slot;
use shared::redis_url::Target;
use shared::Keyspace;

const DEADLINE: Duration = Duration::from_secs(60);

/// On a cluster, the flushed primary holds some organizations' data and nothing of the read model's
/// bookkeeping (the pointer, the healing state, the projectors' reports): nothing but the look can tell
/// the projector. On one Redis a flush takes the healing state too, which a live projector reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_primary_flushed_between_a_starts_check_and_its_first_look_is_seen_and_healed() {
    let cluster = OwnCluster::start(Persistence::Snapshots).await;
    let (prefix, _, data_node) = cluster.prefix_with_the_healing_state_apart();
    let scenario = Scenario::generate(0x5eed_1161, 6, 4, 3);
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    config.redis.url = cluster.urls().into();
    config.redis.cluster = true;
    runner::build(config.clone(), scenario.messages.len() as u64, DEADLINE).await;
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
    let conn = Connection::connect(&Target::new(&cluster.urls(), true), settings).await.expect("own cluster");
    let keys = Keyspace::new(prefix.clone(), 1);
    assert_eq!(runner::digest_of(&mut conn.clone(), &keys).await.unwrap().to_string(), expected);
    let on_data_node = |org: &String| cluster.primary_of(slot(&keys.org_epoch(org))) == data_node;
    let flushed: Vec<String> = scenario.organizations().into_iter().filter(on_data_node).collect();
    assert!(!flushed.is_empty(), "the primary to flush holds some organizations");

    // Started again: its check finds nothing behind the commits. Then the flush, before it looks.
    let projector = runner::spawn_then(config, async {
        assert_eq!(cluster.nodes[data_node].cli(&["FLUSHALL"]), "OK");
    })
    .await;

    eventually_showing(DEADLINE, "the flush seen and the read model whole again", || async {
        let losses = metrics::sample(&projector.metrics_text(), "projector_redis_losses_total", &[]);
        let healing = metrics::sample(&projector.metrics_text(), "projector_healing_partitions", &[]);
        let digest = runner::digest_of(&mut conn.clone(), &keys).await.map_err(|e| e.to_string())?.to_string();
        if losses >= 1.0 && healing == 0.0 && digest == expected {
            return Ok(());
        }
        Err(format!("{losses} losses counted, {healing} partitions healing, digest {digest} (want {expected})"))
    })
    .await;
    projector.stop().await;
}
