//! The read model heals itself when one primary of a Redis Cluster loses data (a flush, a restart from an
//! older snapshot, a real failover to a lagging replica), on a cluster of the test's own, and only the
//! organizations whose keys lived there wait meanwhile. As in `faults::one_redis`, each test ends converged,
//! with no wrong answer once the loss was detected.

use std::time::{Duration, Instant};

use end_to_end::faults::{
    assert_no_wrong_answer_after, reference, Detection, Healing, Probe, Prober, Publisher, CONVERGENCE, DETECTION,
    GRACE,
};
use end_to_end::kafka::{self, Topics};
use end_to_end::own_redis::{OwnCluster, Persistence};
use end_to_end::scenario::Scenario;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_one_flushed_primary_and_one_rolled_back_primary_are_both_healed() {
    let mut cluster = OwnCluster::start(Persistence::Snapshots).await;
    let scenario = Scenario::generate(0x5eed_1104, 9, 8, 4);
    let (first, rest) = scenario.messages.split_at(scenario.messages.len() / 2);
    let topics = Topics::holding(first).await;
    let mut world = Healing::start(&topics, &cluster.urls(), true).await;
    world.wait_ready(first.len() as u64, Duration::from_secs(60)).await;
    assert_eq!(cluster.nodes[1].cli(&["SAVE"]), "OK");
    kafka::publish(&kafka::producer(), &topics, rest).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let expected = reference(&topics, &scenario).await;
    let prober = Prober::start(&world.app, &scenario);

    // One primary flushed.
    assert_eq!(cluster.nodes[0].cli(&["FLUSHALL"]), "OK");
    let detected = world.wait_detection(DETECTION).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    prober.wait_answered(Instant::now(), Duration::from_secs(10)).await;

    // Another restarted from its older snapshot.
    // Answers from the kill on belong to the second fault: until the rollback is detected, the restarted
    // primary may serve its older snapshot (the window docs/operating.md names).
    let losses = world.losses();
    let started = Instant::now();
    cluster.nodes[1].kill();
    cluster.nodes[1].restart();
    cluster.wait_ok().await;
    let detected_again = world.wait_losses_above(losses, DETECTION * 2).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    let probes = prober.finish().await;
    let (first, second): (Vec<_>, Vec<_>) = probes.into_iter().partition(|p| p.at < started);
    assert_no_wrong_answer_after(&first, detected);
    assert_no_wrong_answer_after(&second, detected_again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_failover_of_the_api_keys_primary_to_a_lagging_replica_is_seen_and_healed() {
    let cluster = OwnCluster::with_replicas(Persistence::Snapshots, 1).await;
    let scenario = Scenario::generate(0x5eed_1112, 4, 10, 4);
    let topics = Topics::holding(&scenario.messages).await;
    let mut world = Healing::start(&topics, &cluster.urls(), true).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let prober = Prober::start(&world.app, &scenario);
    let publisher = Publisher::start(&topics, &scenario);
    publisher.wait_more(20).await;

    // The replica of the primary that holds the key index stops reading for a second; its primary dies
    // meanwhile: what it took in that second is gone, and the replica is promoted without it.
    let slot: u16 = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", "{apikeys}"]).parse().unwrap();
    let (primary, replica) = cluster.primary_and_replica_of(slot);
    println!("slot {slot}: primary {}, replica {}", cluster.nodes[primary].port(), cluster.nodes[replica].port());
    let mut sleeping = std::process::Command::new("redis-cli")
        .args(cluster.nodes[replica].cli_args())
        .args(["DEBUG", "SLEEP", "1"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    publisher.wait_more(20).await;
    let crashed = Instant::now();
    cluster.nodes[primary].cli(&["DEBUG", "SEGFAULT"]);
    sleeping.wait().unwrap();
    // A primary is taken for failed after the node timeout (5 s), then its replica is elected. The
    // promotion is bracketed by the last look that found a replica: a busy machine can see it late,
    // after the projector has healed.
    let mut unpromoted = Instant::now();
    end_to_end::eventually(Duration::from_secs(120), "the replica to be promoted", || {
        let looked = Instant::now();
        let promoted = cluster.nodes[replica].cli(&["ROLE"]).starts_with("master");
        if !promoted {
            unpromoted = looked;
        }
        async move { promoted.then_some(()) }
    })
    .await;
    println!("replica promoted {:?} after the crash", crashed.elapsed());
    let detection = world.wait_detection(Duration::from_secs(30)).await;
    println!("failover detected {:?} after the crash", detection.seen - crashed);
    world.converge_after(publisher, &topics, scenario.messages.len()).await;
    // The promoted replica lacks data from its promotion on, and a heal after the detection can be over
    // in less time than the prober takes to ask every organization: the API's 503s are looked for from
    // the promotion, wrong answers from the detection.
    let detected = Detection { unseen: unpromoted.min(detection.unseen), seen: detection.seen };
    assert_no_wrong_answer_after(&prober.finish().await, detected);
    // Those 503s were the heal's, not only the outage's before the promotion.
    let metrics = world.app.admin_get("/metrics").await.text().await.unwrap();
    let refused =
        |cause: &str| end_to_end::metrics::sample(&metrics, "api_refused_total", &[&format!("cause=\"{cause}\"")]);
    println!("refused while healing: {}; while unsure of the read model: {}", refused("healing"), refused("unsure"));
    assert!(refused("healing") > 0.0, "the API refused requests because the read model was healing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_flushed_primary_makes_only_its_organizations_wait_and_the_others_are_served() {
    only_the_flushed_primarys_organizations_wait(true).await;
}

/// A projector whose Redis user may not run `INFO` tells a loss by its positions alone: that loss names
/// the slots of the primary that lost them too, not every slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_loss_told_by_the_positions_alone_makes_only_that_primarys_organizations_wait() {
    only_the_flushed_primarys_organizations_wait(false).await;
}

/// One primary flushed while the prober asks for every organization: once the loss is known, the
/// organizations whose keys lived there are answered 503 until healed, and the others are served
/// throughout. With `info` false the projector runs as a user that may not run `INFO`.
async fn only_the_flushed_primarys_organizations_wait(info: bool) {
    let cluster = OwnCluster::start(Persistence::Snapshots).await;
    let (prefix, flushed) = prefix_sparing_a_primary(&cluster);
    let scenario = Scenario::generate(0x5eed_1114, 9, 8, 4);
    let (waiting, served) = organizations_on(&cluster, &prefix, flushed, &scenario);
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let projector_urls = if info {
        cluster.urls()
    } else {
        for node in &cluster.nodes {
            let user = ["ACL", "SETUSER", "no-info", "on", ">no-info-password", "~*", "&*", "+@all", "-info"];
            assert_eq!(node.cli(&user), "OK");
        }
        cluster.urls().replace("redis://", "redis://no-info:no-info-password@")
    };
    let mut world = Healing::start_configured(&prefix, &topics, &cluster.urls(), true, |projector| {
        projector.redis.url = projector_urls.into();
    })
    .await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let prober = Prober::start(&world.app, &scenario);
    prober.wait_answered(Instant::now(), Duration::from_secs(10)).await;

    assert_eq!(cluster.nodes[flushed].cli(&["FLUSHALL"]), "OK");
    let detected = world.wait_detected(DETECTION).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    let healed = Instant::now();
    // Every organization heard answering after the grace too: a heal over within the grace of its
    // detection would otherwise leave no answer after it to check.
    prober.wait_answered(detected + GRACE, Duration::from_secs(10)).await;
    let probes = prober.finish().await;
    assert_no_wrong_answer_after(&probes, detected);
    // The 503s from a grace before the detection until healed (a heal may be over within the grace); the
    // others' 200s from the grace after the detection on (the whole generation is marked for a moment
    // before the loss's slots are), through the heal and after it: a heal over within the grace would
    // leave none before it.
    let answers = |orgs: &[String], from: Instant, until: Option<Instant>| -> Vec<u16> {
        let within = |p: &&Probe| p.at >= from && until.is_none_or(|until| p.at < until) && orgs.contains(&p.org);
        probes.iter().filter(within).map(|p| p.status).collect()
    };
    let (waited, kept) = (answers(&waiting, detected - GRACE, Some(healed)), answers(&served, detected + GRACE, None));
    println!(
        "while healing: {} answers to the flushed primary's organizations; from the grace on, {} to the others",
        waited.len(),
        kept.len()
    );
    assert!(waited.contains(&503), "the flushed primary's organizations waited: {waited:?}");
    assert!(!kept.is_empty() && kept.iter().all(|s| *s == 200), "the others were served throughout: {kept:?}");
}

/// A prefix whose shared keys (the active generation, the projectors' reports, the healing entries, the
/// key index) all live off one primary of `cluster`, and that primary.
pub(super) fn prefix_sparing_a_primary(cluster: &OwnCluster) -> (String, usize) {
    use shared::keys::slot;
    use shared::Keyspace;
    let node_of = |key: &str| cluster.primary_of(slot(key));
    (0..100)
        .find_map(|_| {
            let prefix = end_to_end::unique("heal");
            let keys = Keyspace::new(prefix.clone(), 1);
            let shared = [Keyspace::active_generation(&prefix), Keyspace::projectors(&prefix), keys.healing()];
            let used: Vec<usize> = shared.iter().map(|k| node_of(k)).chain([node_of(&keys.api_key_epoch())]).collect();
            (0..3).find(|n| !used.contains(n)).map(|n| (prefix, n))
        })
        .expect("a prefix whose shared keys leave a primary free")
}

/// The scenario's organizations whose keys live on primary `node` under `prefix`, and the others; both
/// sides hold some.
pub(super) fn organizations_on(
    cluster: &OwnCluster,
    prefix: &str,
    node: usize,
    scenario: &Scenario,
) -> (Vec<String>, Vec<String>) {
    let keys = shared::Keyspace::new(prefix, 1);
    let (on, off): (Vec<String>, Vec<String>) = scenario
        .organizations()
        .into_iter()
        .partition(|org| cluster.primary_of(shared::keys::slot(&keys.org_epoch(org))) == node);
    assert!(!on.is_empty() && !off.is_empty(), "organizations on both sides: {on:?} {off:?}");
    (on, off)
}

/// A primary flushed while no projector runs, so that no loss is marked: its organizations' keys are still
/// found (the key index lives elsewhere), their data is gone. The API, finding such an organization
/// without its epoch, sees that primary holding none of the projector's positions either and answers 503,
/// never an empty list; the other primaries' organizations are served; a projector that starts heals it,
/// and its start's loss names that primary's slots, so the others are still served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_primary_flushed_while_no_projector_runs_never_serves_its_organizations_empty() {
    let cluster = OwnCluster::start(Persistence::Snapshots).await;
    let (prefix, flushed) = prefix_sparing_a_primary(&cluster);
    let scenario = Scenario::generate(0x5eed_1115, 9, 8, 4);
    let (waiting, served) = organizations_on(&cluster, &prefix, flushed, &scenario);
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let world = Healing::start_under(&prefix, &topics, &cluster.urls(), true).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let prober = Prober::start(&world.app, &scenario);
    prober.wait_answered(Instant::now(), Duration::from_secs(10)).await;

    let (mut flushed_at, mut restarting) = (Instant::now(), Instant::now());
    let (mut world, _) = world
        .with_projector_down_for(async || {
            assert_eq!(cluster.nodes[flushed].cli(&["FLUSHALL"]), "OK");
            flushed_at = Instant::now();
            prober.wait_rounds(flushed_at + GRACE, 5, Duration::from_secs(20)).await;
            restarting = Instant::now();
        })
        .await;
    world.wait_converged(&expected, CONVERGENCE).await;
    let probes = prober.finish().await;
    assert_no_wrong_answer_after(&probes, flushed_at);
    let down = |orgs: &[String]| -> Vec<u16> {
        let answers = probes.iter().filter(|p| p.at >= flushed_at + GRACE && p.at < restarting);
        answers.filter(|p| orgs.contains(&p.org)).map(|p| p.status).collect()
    };
    let (waited, kept) = (down(&waiting), down(&served));
    println!(
        "with no projector: {} answers to the flushed primary's organizations, {} to the others",
        waited.len(),
        kept.len()
    );
    assert!(
        !waited.is_empty() && waited.iter().all(|s| *s == 503),
        "the flushed primary's organizations waited: {waited:?}"
    );
    assert!(!kept.is_empty() && kept.iter().all(|s| *s == 200), "the others were served: {kept:?}");
    // The start that finds the loss names the flushed primary's slots: the others are served throughout.
    let after: Vec<u16> =
        probes.iter().filter(|p| p.at >= restarting && served.contains(&p.org)).map(|p| p.status).collect();
    assert!(
        !after.is_empty() && after.iter().all(|s| *s == 200),
        "the others were served while the start's loss healed: {after:?}"
    );
}
