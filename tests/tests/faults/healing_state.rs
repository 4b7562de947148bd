//! The generation's healing state (`P:gN:healing`) has no hash tag: on a cluster it lives on one primary,
//! apart from the data whose heal it records, and a flush of that primary takes it while others heal. From
//! layout 4 it holds a field from the generation's start on, so that its absence reads as "lost" and never
//! as "nothing heals": the API answers 503 until a projector has marked every partition as healing again.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use end_to_end::api::{self, TestApp};
use end_to_end::faults::{reference, Healing, Probe, Prober, CONVERGENCE, DETECTION, GRACE};
use end_to_end::kafka::Topics;
use end_to_end::own_redis::{OwnCluster, OwnRedis, Persistence};
use end_to_end::runner::{self, KillOnDrop};
use end_to_end::scenario::Scenario;
use end_to_end::{eventually, eventually_showing, unique};
use shared::connection::{Connection, Settings};
use shared::keys::{slot, HEALING_OPENED};
use shared::redis_url::Target;
use shared::Keyspace;

/// On one Redis a flush takes everything, the active generation with it; the healing state lost alone is
/// what a cluster's flush of its primary leaves, made here by deleting it while no projector runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healing_state_lost_while_no_projector_runs_is_answered_503_until_a_projector_marks_it_again() {
    let redis = OwnRedis::start();
    let scenario = Scenario::generate(0x5eed_1151, 4, 6, 3);
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let prober = Prober::start(&world.app, &scenario);
    prober.wait_answered(Instant::now(), Duration::from_secs(10)).await;
    let healing = Keyspace::new(world.prefix(), 1).healing();

    let (mut lost, mut restarting) = (Instant::now(), Instant::now());
    let (mut world, _) = world
        .with_projector_down_for(async || {
            assert_eq!(redis.cli(&["DEL", &healing]), "1");
            lost = Instant::now();
            prober.wait_rounds(lost + GRACE, 5, Duration::from_secs(20)).await;
            restarting = Instant::now();
        })
        .await;
    let detected = world.wait_detected(DETECTION).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    prober.wait_answered(detected + GRACE, Duration::from_secs(10)).await;
    let probes = prober.finish().await;

    let down: Vec<u16> =
        probes.iter().filter(|p| p.at >= lost + GRACE && p.at < restarting).map(|p| p.status).collect();
    println!("{} answers with the healing state lost and no projector", down.len());
    assert!(!down.is_empty() && down.iter().all(|s| *s == 503), "answered while nothing was known: {down:?}");
    assert_no_wrong_answer_from(&probes, lost + GRACE);
    assert_eq!(redis.cli(&["HGET", &healing, HEALING_OPENED]), "1", "the projector opened it again");
    assert_eq!(redis.cli(&["HLEN", &healing]), "1", "and every partition it marked has healed");
}

/// The overlap a randomized cluster soak found: a primary flushed, its loss marked and being healed, and
/// then the primary holding the healing state flushed before the heal ended. The projector is frozen
/// mid-heal (SIGSTOP) so that the second flush lands while the first heal holds: the flushed primary's
/// positions are recorded again and some of its organizations' epochs written again, so only the
/// healing state says they are incomplete. Losing it must not make them served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_healing_state_flushed_mid_heal_never_lets_a_healing_organization_be_served() {
    let cluster = OwnCluster::start(Persistence::Snapshots).await;
    let (prefix, healing_node, data_node) = cluster.prefix_with_the_healing_state_apart();
    let keys = Keyspace::new(prefix.clone(), 1);
    // About 950 events: read again one a batch, a heal lasts seconds (to be frozen in), not minutes.
    let scenario = Scenario::generate(0x5eed_1152, 9, 4, 3);
    let on_data_node = |org: &String| cluster.primary_of(slot(&keys.org_epoch(org))) == data_node;
    let healing_orgs: Vec<String> = scenario.organizations().into_iter().filter(on_data_node).collect();
    assert!(!healing_orgs.is_empty(), "organizations on the flushed primary");
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let mut config = api::config(&prefix, &cluster.urls());
    config.redis.cluster = true;
    let app = api::spawn_app(config).await;
    let projector = one_event_a_batch(&topics, &prefix, &cluster.urls());
    let prober = Prober::start(&app, &scenario);
    // The read model complete (nothing healing) and every organization heard served, before the faults.
    app.wait_serving(Duration::from_secs(120)).await;
    prober.wait_answered(Instant::now(), Duration::from_secs(30)).await;
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
    let mut conn = Connection::connect(&Target::new(&cluster.urls(), true), settings).await.expect("own cluster");
    let tag = (0..).map(|n| format!("position-{n}")).find(|tag| cluster.primary_of(slot(tag)) == data_node);
    let positions = keys.position(&tag.expect("a position tag on every primary"));

    assert_eq!(cluster.nodes[data_node].cli(&["FLUSHALL"]), "OK");
    eventually_showing(Duration::from_secs(30), "the loss marked, and the positions recorded again", || async {
        let (entries, recorded) = (partition_entries(&mut conn.clone(), &keys).await, exists(&conn, &positions).await);
        if entries > 0 && recorded {
            return Ok(());
        }
        let fields: redis::RedisResult<Vec<String>> =
            redis::cmd("HKEYS").arg(keys.healing()).query_async(&mut conn.clone()).await;
        Err(format!("{entries} partitions marked healing (the healing state's fields: {fields:?}), positions recorded: {recorded}"))
    })
    .await;
    let marked = Instant::now();
    projector.freeze();
    assert!(
        partition_entries(&mut conn, &keys).await > 0,
        "the heal ended before the projector was frozen: nothing is held (slow it further)"
    );
    assert_eq!(cluster.nodes[healing_node].cli(&["FLUSHALL"]), "OK");
    let lost = Instant::now();
    prober.wait_rounds(lost + GRACE, 10, Duration::from_secs(30)).await;
    let thawed = Instant::now();
    projector.thaw();
    converged(&app, &mut conn, &keys, &expected).await;
    prober.wait_answered(Instant::now(), Duration::from_secs(30)).await;
    let probes = prober.finish().await;

    let held: Vec<u16> = probes
        .iter()
        .filter(|p| p.at >= lost + GRACE && p.at < thawed && healing_orgs.contains(&p.org))
        .map(|p| p.status)
        .collect();
    println!("{} answers to the healing organizations while the heal was held", held.len());
    assert!(!held.is_empty() && held.iter().all(|s| *s == 503), "served while healing: {held:?}");
    assert_no_wrong_answer_from(&probes, marked + GRACE);
    drop(projector);
}

/// Fails the test on any wrong answer (a live key refused, a short list) given from `from` on.
fn assert_no_wrong_answer_from(probes: &[Probe], from: Instant) {
    let wrong: Vec<&Probe> = probes.iter().filter(|p| p.at >= from && p.is_wrong()).collect();
    let later = probes.iter().filter(|p| p.at >= from).count();
    assert!(wrong.is_empty(), "{} of {later} answers wrong, first: {:?}", wrong.len(), wrong.first());
}

/// The real projector binary on the cluster, one event a batch: a heal lasts long enough to be frozen in.
fn one_event_a_batch(topics: &Topics, prefix: &str, urls: &str) -> KillOnDrop {
    let mut args = runner::args(topics, prefix, &unique("g"));
    let url = args.iter().position(|arg| arg == "--redis-url").expect("a Redis URL argument") + 1;
    args[url] = urls.to_string();
    args.extend(["--redis-cluster", "true", "--batch-size", "1"].map(String::from));
    let mut command = Command::new(runner::binary());
    command.args(args).env("RUST_LOG", "warn").stdout(Stdio::null()).stderr(Stdio::inherit());
    KillOnDrop(command.spawn().expect("projector starts"))
}

/// The generation's healing entries of partitions (the whole generation's and the field that keeps the
/// hash are none).
async fn partition_entries(conn: &mut Connection, keys: &Keyspace) -> usize {
    let fields: Vec<String> = redis::cmd("HKEYS").arg(keys.healing()).query_async(conn).await.unwrap_or_default();
    fields.iter().filter(|field| field.contains('/')).count()
}

async fn exists(conn: &Connection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query_async(&mut conn.clone()).await.unwrap_or(false)
}

/// Waits until the generation digests like `reference` and the API is ready; a timeout says what it saw.
async fn converged(app: &TestApp, conn: &mut Connection, keys: &Keyspace, reference: &str) {
    eventually_showing(CONVERGENCE, "the read model to converge", || async {
        let digest = runner::digest_of(&mut conn.clone(), keys).await.map_err(|e| e.to_string())?.to_string();
        let readyz = app.admin_get("/readyz").await;
        let ready = readyz.status() == 200;
        if ready && digest == reference {
            return Ok(());
        }
        Err(format!("{digest} (want {reference}), api {}", readyz.text().await.unwrap_or_default()))
    })
    .await;
}

/// An API instance that starts while the generation's meta has lost its layout reads layout 1 (the field
/// is absent from generations of layout 1 too). It keeps that reading only until the field is back (a
/// projector writes it back when it marks the loss), so that a healing state lost afterwards is read by
/// the generation's own rule: 503, never "nothing heals".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_started_while_the_meta_lost_its_layout_reads_the_layout_again_once_written_back() {
    let (prefix, keys, mut conn) = built_with_the_meta_layout_lost().await;
    let field = shared::layout::FIELD;
    let app = api::spawn_app(api::config(&prefix, &end_to_end::env("REDIS_URL"))).await;
    app.wait_serving(CONVERGENCE).await;

    let layout = shared::layout::LAYOUT;
    let _: () = redis::cmd("HSET").arg(keys.meta()).arg(field).arg(layout).query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("DEL").arg(keys.healing()).query_async(&mut conn).await.unwrap();
    eventually(Duration::from_secs(10), "the API to answer 503 for the lost healing state", || async {
        (app.admin_get("/readyz").await.status() == 503).then_some(())
    })
    .await;
}

/// An API instance that starts while the generation's meta has lost its layout, and before any projector
/// looked, reads the layout every primary records beside its positions: a healing state lost with the
/// meta (on a cluster both may sit on the primary flushed) is then read by the generation's own rule,
/// 503, never as layout 1's "nothing heals".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_started_while_the_meta_and_the_healing_state_are_lost_reads_the_layout_of_the_positions() {
    let (prefix, keys, mut conn) = built_with_the_meta_layout_lost().await;
    let _: () = redis::cmd("DEL").arg(keys.healing()).query_async(&mut conn).await.unwrap();
    let app = api::spawn_app(api::config(&prefix, &end_to_end::env("REDIS_URL"))).await;
    // Asked until the API has read the active generation: then it must refuse, for the lost healing state.
    let (status, body) = eventually(Duration::from_secs(30), "the API to read the active generation", || async {
        let response = app.admin_get("/readyz").await;
        let (status, body) = (response.status(), response.text().await.unwrap_or_default());
        (!body.contains("not known yet")).then_some((status, body))
    })
    .await;
    assert_eq!(status, 503, "served with the healing state lost: {body}");
    assert!(body.contains("healing state was lost"), "refused for another reason: {body}");
    let (status, _) = app.json("/v1/studies", end_to_end::fixture::ACME_KEY).await;
    assert_eq!(status, 503, "a data route served with the healing state lost");
}

/// A projector that starts while the generation's layout is found nowhere (the meta and every primary's
/// positions lost it) reads layout 1 for now, but neither keeps that reading nor records it beside the
/// positions: once the field is back, a healing state lost afterwards is its generation's rule's again,
/// and the projector marks it. Kept, layout 1 would have been recorded over every primary's layout and
/// no loss of the healing state ever seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_that_found_no_layout_records_none_and_reads_it_again_once_written_back() {
    let redis = OwnRedis::start();
    let messages = end_to_end::fixture::dataset();
    let topics = Topics::holding(&messages).await;
    let prefix = unique("heal");
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    (config.redis.url, config.redis.cluster) = (redis.url().into(), false);
    runner::build(config.clone(), messages.len() as u64, CONVERGENCE).await;
    let keys = Keyspace::new(prefix.clone(), 1);
    let field = shared::layout::FIELD;
    let positions = redis.cli(&["--scan", "--pattern", &format!("{prefix}:g1:*:position")]);
    let positions: Vec<&str> = positions.lines().collect();
    assert!(!positions.is_empty(), "the generation records its positions");
    for key in [keys.meta().as_str()].into_iter().chain(positions.iter().copied()) {
        redis.cli(&["HDEL", key, field]);
    }

    let projector = runner::spawn(config).await;
    eventually(Duration::from_secs(30), "the projector to report itself", || async {
        (redis.cli(&["HLEN", &Keyspace::projectors(&prefix)]) != "0").then_some(())
    })
    .await;
    assert_eq!(redis.cli(&["HSET", &keys.meta(), field, &shared::layout::LAYOUT.to_string()]), "1");
    assert_eq!(redis.cli(&["DEL", &keys.healing()]), "1");
    eventually(Duration::from_secs(10), "the projector to mark the lost healing state", || async {
        (redis.cli(&["HGET", &keys.healing(), HEALING_OPENED]) == "1").then_some(())
    })
    .await;
    for key in &positions {
        assert_ne!(redis.cli(&["HGET", key, field]), "1", "layout 1 recorded over {key}");
    }
    projector.stop().await;
}

/// The fixture's dataset built into generation 1 of a prefix of its own, and then the layout field taken
/// from the generation's meta (as a loss of its primary would): the prefix, its keys and a connection.
async fn built_with_the_meta_layout_lost() -> (String, Keyspace, Connection) {
    let runner::Built { prefix, .. } = runner::dataset_built("heal").await;
    let keys = Keyspace::new(prefix.clone(), 1);
    let mut conn = end_to_end::redis().await;
    let _: () = redis::cmd("HDEL").arg(keys.meta()).arg(shared::layout::FIELD).query_async(&mut conn).await.unwrap();
    (prefix, keys, conn)
}

/// A heal's targets are the partitions' ends when the loss was marked. A broker that lost the tail of a
/// partition since (one broker without replicas, killed) never holds that much again once producers stop:
/// the heal ends at the partition's end, and the broker's loss is counted, rather than 503 for ever. The
/// entry is written here as such a broker leaves it: its target past everything the partition holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healing_target_past_what_the_broker_still_holds_ends_at_the_partitions_end_and_is_counted() {
    use projector::{Healing as Entry, Opened, Partition};
    let redis = OwnRedis::start();
    let scenario = Scenario::generate(0x5eed_1153, 3, 6, 3);
    let total = scenario.messages.len() as u64;
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(total, Duration::from_secs(60)).await;
    let keys = Keyspace::new(world.prefix(), 1);

    let loss = shared::loss::Losses::one(shared::loss::Loss::Other("a loss the broker outlived".into()));
    let past_the_end = Entry { target: total as i64 + 1000, losses: loss };
    let entries = [(Partition::new(topics.study.clone(), 0), past_the_end)].into();
    projector::mark_healing(&mut world.conn.clone(), &keys, Opened::Kept, &entries).await.unwrap();

    eventually_showing(Duration::from_secs(30), "the entry past the end to be ended", || async {
        match partition_entries(&mut world.conn.clone(), &keys).await {
            0 => Ok(()),
            left => Err(format!("{left} entries left")),
        }
    })
    .await;
    let counted =
        end_to_end::metrics::sample(&world.projector.metrics_text(), "projector_healing_targets_past_end_total", &[]);
    assert_eq!(counted, 1.0, "the broker's loss counted once");
    world.wait_converged(&expected, CONVERGENCE).await;
}
