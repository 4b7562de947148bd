//! The projector when Redis goes away mid-stream: it retries with backoff, loses and skips nothing, and
//! ends with exactly the model's read model once Redis is back. Uses a Redis of its own, so stopping it
//! disturbs no other test.

use std::time::Duration;

use end_to_end::cut::Cutting;
use end_to_end::kafka::{self, Topics};
use end_to_end::own_redis::OwnRedis;
use end_to_end::scenario::Scenario;
use end_to_end::{eventually, read_model, runner, unique};
use shared::connection::{Connection, Settings};
use shared::redis_url::Target;
use shared::Keyspace;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projector_rides_out_a_redis_outage_without_losing_or_skipping_events() {
    let mut redis = OwnRedis::start();
    let scenario = Scenario::generate(0x5eed_0004, 2, 6, 5);
    let (first, second) = scenario.messages.split_at(scenario.messages.len() / 2);
    let topics = Topics::holding(first).await;

    let prefix = unique("rm");
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    config.redis.url = redis.url().into();
    config.redis.cluster = false;
    config.redis.timeout_ms = 500;
    let running = eventually(Duration::from_secs(10), "the projector to connect", || {
        let config = config.clone();
        async move { Some(runner::spawn(config).await) }
    })
    .await;
    running.wait_until_consumed(first.len() as u64, Duration::from_secs(60)).await;

    redis.stop();
    kafka::publish(&kafka::producer(), &topics, second).await;
    eventually(Duration::from_secs(30), "the projector to hit the outage", || async {
        (running.snapshot().retries > 0).then_some(())
    })
    .await;
    assert!(running.consumed() < scenario.messages.len() as u64, "nothing was applied while Redis was away");
    redis.restart();
    let total = scenario.messages.len() as u64;
    running.wait_until_consumed(total, Duration::from_secs(60)).await;

    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 0 };
    let mut conn = Connection::connect(&Target::Single(redis.url()), settings).await.unwrap();
    let keys = Keyspace::new(prefix, 1);
    for org in scenario.organizations() {
        assert_eq!(read_model::read(&mut conn, &keys, &scenario, &org).await, scenario.expected(&org), "{org}");
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_refuses_a_redis_that_may_evict_keys_with_one_line_saying_what_to_set() {
    let redis = OwnRedis::start();
    let mut conn = eventually(Duration::from_secs(10), "redis to answer", || async {
        ::redis::Client::open(redis.url()).ok()?.get_multiplexed_async_connection().await.ok()
    })
    .await;
    let _: () = ::redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query_async(&mut conn)
        .await
        .unwrap();
    let topics = Topics::create().await;
    let mut config = runner::config(&topics, &unique("rm"), &unique("g"));
    (config.redis.url, config.redis.cluster) = (redis.url().into(), false);
    let outcome = tokio::time::timeout(Duration::from_secs(30), runner::run(config)).await;
    let error = outcome.expect("it refuses at once, it does not run").expect_err("it refuses");
    let line = error.to_string();
    assert!(line.contains("maxmemory-policy allkeys-lru") && line.contains("noeviction"), "{line}");
    assert_eq!(line.lines().count(), 1, "{line}");
}

/// Redis restarting or failing over while a projector starts: a connection cut in the middle of the start
/// (here as it reads the active generation) is met again with a new one, as in the live loop; the process
/// does not exit (it did, with `Error: redis: broken pipe`, and was restarted with growing delays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_while_the_projector_starts_is_made_again_and_the_start_goes_on() {
    let redis = OwnRedis::start();
    let scenario = Scenario::generate(0x5eed_0005, 1, 3, 2);
    let topics = Topics::holding(&scenario.messages).await;
    let prefix = unique("rm");
    let cutting = Cutting::start(&format!("127.0.0.1:{}", redis.port()), &Keyspace::active_generation(&prefix)).await;
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    (config.redis.url, config.redis.cluster) = (format!("redis://127.0.0.1:{}", cutting.port).into(), false);
    let started = tokio::time::timeout(Duration::from_secs(30), runner::spawn(config)).await;
    let running = started.expect("the start goes on within 30 s");
    assert!(cutting.has_cut(), "the connection was cut during the start");
    running.wait_until_consumed(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    running.stop().await;
}

/// Redis failing under a repair (a restart, a failover, a timeout) aborts that run with the live data as
/// it was; the repair runs again by itself, whole, rather than leave the operator a `redis: broken pipe`.
/// Here the repair's connection is cut as it stages its first key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_whose_connection_is_cut_as_it_stages_runs_again_and_repairs_the_organization() {
    let redis = OwnRedis::start();
    let scenario = Scenario::generate(0x5eed_0006, 1, 6, 3);
    let org = scenario.organizations()[0].clone();
    let topics = Topics::holding(&scenario.messages).await;
    let published = scenario.messages.len() as u64;
    let own = |prefix: &str| {
        let mut config = runner::config(&topics, prefix, &unique("g"));
        (config.redis.url, config.redis.cluster) = (redis.url().into(), false);
        config
    };
    let prefix = unique("rm");
    let config = own(&prefix);
    let live = eventually(Duration::from_secs(10), "the projector to connect", || {
        let config = config.clone();
        async move { Some(runner::spawn(config).await) }
    })
    .await;
    live.wait_until_consumed(published, Duration::from_secs(60)).await;
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 0 };
    let mut conn = Connection::connect(&Target::Single(redis.url()), settings).await.unwrap();
    let keys = Keyspace::new(prefix.clone(), 1);
    // Something for the repair to put right: a study's document gone.
    let study = scenario.expected(&org).studies[0].0.clone();
    let _: () = ::redis::cmd("HDEL").arg(keys.study_documents(&org)).arg(&study).query_async(&mut conn).await.unwrap();

    // The repair's staged keys are named `{org}:repair:<run>:…`: the first one it writes cuts its connection.
    let cutting = Cutting::start(&format!("127.0.0.1:{}", redis.port()), "}:repair:").await;
    let mut config = own(&prefix);
    config.redis.url = format!("redis://127.0.0.1:{}", cutting.port).into();
    let target = projector::RepairTarget::Organization(org.clone());
    let report = projector::repair(&config, target, projector::REPAIR_ATTEMPTS, &|_, _| {}).await;
    assert!(cutting.has_cut(), "the connection was cut as the repair staged");
    let report = report.expect("the repair runs again and succeeds");
    assert!(report.keys_swapped > 0, "{report:?}");
    live.stop().await;

    let scratch = own(&unique("rm"));
    let scratch_keys = Keyspace::new(scratch.redis.key_prefix.clone(), 1);
    runner::build(scratch, published, Duration::from_secs(60)).await;
    let digest = |keys: Keyspace| {
        let mut conn = conn.clone();
        let org = org.clone();
        async move { projector::Digest::of_organization(&mut conn, &keys, &org).await.unwrap().to_string() }
    };
    assert_eq!(digest(keys).await, digest(scratch_keys).await, "repaired as a build from scratch");
}

/// Redis runs a repair's swap, but the reply never reaches the repair (its connection is cut between the
/// two, as a failover or a timeout leaves it): the repair finds its swap done and reports the organization
/// repaired, rather than `not swapped in` over the data it had just replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_whose_swap_reply_was_lost_finds_its_swap_done_and_reports_the_organization_repaired() {
    let redis = OwnRedis::start();
    let scenario = Scenario::generate(0x5eed_0007, 1, 6, 3);
    let org = scenario.organizations()[0].clone();
    let topics = Topics::holding(&scenario.messages).await;
    let prefix = unique("rm");
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    (config.redis.url, config.redis.cluster) = (redis.url().into(), false);
    runner::build(config.clone(), scenario.messages.len() as u64, Duration::from_secs(60)).await;
    // A first repair loads the swap's script into Redis: the next one's swap runs at its first call.
    let target = || projector::RepairTarget::Organization(org.clone());
    projector::repair(&config, target(), 1, &|_, _| {}).await.expect("the first repair succeeds");

    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 0 };
    let mut conn = Connection::connect(&Target::Single(redis.url()), settings).await.unwrap();
    let keys = Keyspace::new(prefix, 1);
    let study = scenario.expected(&org).studies[0].0.clone();
    let documents = keys.study_documents(&org);
    let _: () = ::redis::cmd("HDEL").arg(&documents).arg(&study).query_async(&mut conn).await.unwrap();

    // Of the repair's commands, the swap alone names the organization's live `rewritten` key.
    let cutting = Cutting::after_sending(&format!("127.0.0.1:{}", redis.port()), "}:rewritten").await;
    config.redis.url = format!("redis://127.0.0.1:{}", cutting.port).into();
    let report = projector::repair(&config, target(), 1, &|_, _| {}).await;
    assert!(cutting.has_cut(), "the swap's reply was lost");
    let report = report.expect("the repair finds its swap done");
    assert!(report.keys_swapped > 0, "{report:?}");
    let restored: bool = ::redis::cmd("HEXISTS").arg(&documents).arg(&study).query_async(&mut conn).await.unwrap();
    assert!(restored, "the swap put the study's document back");
    let left: Vec<String> = conn.scan(&keys.org_pattern(&org)).await.unwrap();
    assert!(!left.iter().any(|k| k.contains("}:repair:")), "nothing staged is left: {left:?}");
    assert!(!left.contains(&keys.hold(&org)), "the hold is released");
}

/// The swap's call cut before it reached Redis, and the organization's primary flushed before the call is
/// made again (the hold, the staged copies and the live data gone, as a flush, an empty restart or a
/// failover of the primary takes them): the hold and the copies gone prove no swap, and the repair says
/// its outcome is unknown rather than report the organization repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_whose_swap_was_cut_and_whose_primary_was_then_flushed_is_never_reported_repaired() {
    let redis = OwnRedis::start();
    let scenario = Scenario::generate(0x5eed_0008, 1, 6, 3);
    let org = scenario.organizations()[0].clone();
    let topics = Topics::holding(&scenario.messages).await;
    let mut config = runner::config(&topics, &unique("rm"), &unique("g"));
    (config.redis.url, config.redis.cluster) = (redis.url().into(), false);
    runner::build(config.clone(), scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let target = || projector::RepairTarget::Organization(org.clone());
    projector::repair(&config, target(), 1, &|_, _| {}).await.expect("the first repair succeeds");

    // Of the repair's commands, the swap alone names the organization's live `rewritten` key.
    let port = redis.port().to_string();
    let cutting = Cutting::start_then(&format!("127.0.0.1:{port}"), "}:rewritten", move || {
        let out = std::process::Command::new("redis-cli").args(["-p", &port, "FLUSHALL"]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
    })
    .await;
    config.redis.url = format!("redis://127.0.0.1:{}", cutting.port).into();
    let report = projector::repair(&config, target(), 1, &|_, _| {}).await;
    assert!(cutting.has_cut(), "the swap's call was cut");
    assert!(
        matches!(report, Err(projector::Error::SwapUnknown { .. })),
        "the swap's outcome is unknown, not {report:?}"
    );
    assert_eq!(redis.cli(&["DBSIZE"]), "0", "nothing was swapped in after the flush");
}
