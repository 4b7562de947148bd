//! The read model heals itself when Redis loses data: for each fault, a projector and an API on a Redis
//! of the test's own, a generated stream with duplicates, and a prober asking for every organization's
//! studies throughout. Each test ends with the active generation digesting like a from-scratch build, and
//! no valid key refused and no short list answered 200 once the loss was detected. The same on a Redis
//! Cluster of the test's own: `faults::cluster`.

use std::time::{Duration, Instant};

use end_to_end::faults::{assert_no_wrong_answer_after, reference, Healing, Prober, Publisher, CONVERGENCE, DETECTION};
use end_to_end::kafka::{self, Topics};
use end_to_end::own_redis::{OwnRedis, Persistence};
use end_to_end::runner;
use end_to_end::scenario::Scenario;

/// A read model on `redis` that saved a snapshot a third of the way through `scenario` and then took in
/// the rest: a restart of `redis` now rolls it back. Its topics, the projector and API, and the digest of
/// a from-scratch build of the whole scenario.
async fn snapshot_a_third_of_the_way(redis: &OwnRedis, scenario: &Scenario) -> (Topics, Healing, String) {
    let (first, rest) = scenario.messages.split_at(scenario.messages.len() / 3);
    let topics = Topics::holding(first).await;
    let world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(first.len() as u64, Duration::from_secs(60)).await;
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    kafka::publish(&kafka::producer(), &topics, rest).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let expected = reference(&topics, scenario).await;
    (topics, world, expected)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_flushall_the_read_model_is_projected_again_and_no_valid_key_is_refused() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    let scenario = Scenario::generate(0x5eed_1101, 3, 10, 4);
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;

    let prober = Prober::start(&world.app, &scenario);
    prober.wait_answered(Instant::now(), Duration::from_secs(10)).await;
    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    let detected = world.wait_detected(DETECTION).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_no_wrong_answer_after(&prober.finish().await, detected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_from_an_older_snapshot_gets_the_events_it_lost_again() {
    let mut redis = OwnRedis::with(Persistence::Snapshots);
    let scenario = Scenario::generate(0x5eed_1102, 8, 15, 6);
    let after = scenario.messages.len() - scenario.messages.len() / 3;
    assert!(after > 2000, "a few thousand events after the snapshot: {after}");
    let (_topics, mut world, expected) = snapshot_a_third_of_the_way(&redis, &scenario).await;
    let prober = Prober::start(&world.app, &scenario);
    redis.kill();
    redis.restart();
    let detected = world.wait_detected(DETECTION).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_no_wrong_answer_after(&prober.finish().await, detected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_back_from_an_older_snapshot_refusing_writes_for_a_while_gives_no_wrong_answer_once_the_loss_is_counted(
) {
    let mut redis = OwnRedis::with(Persistence::Snapshots);
    let scenario = Scenario::generate(0x5eed_1115, 6, 12, 5);
    let (_topics, mut world, expected) = snapshot_a_third_of_the_way(&redis, &scenario).await;
    let prober = Prober::start(&world.app, &scenario);

    // Back from the older snapshot, and refusing writes for a few seconds (reads go on): the projector
    // sees the restart at once but cannot mark the read model incomplete until writes come back.
    redis.kill();
    redis.restart();
    redis.cli(&["CLIENT", "PAUSE", "3000", "WRITE"]);
    let restarted = Instant::now();
    // The loss can be counted only once writes come back.
    let detected = world.wait_detected(Duration::from_secs(3) + DETECTION).await;
    println!("counted {:?} after the restart", detected - restarted);
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_no_wrong_answer_after(&prober.finish().await, detected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_rolled_back_while_no_projector_runs_is_marked_incomplete_at_the_next_start() {
    let mut redis = OwnRedis::with(Persistence::Snapshots);
    let scenario = Scenario::generate(0x5eed_1106, 6, 12, 5);
    let (_topics, world, expected) = snapshot_a_third_of_the_way(&redis, &scenario).await;
    let prober = Prober::start(&world.app, &scenario);

    // The projector stops (committing everything it applied); Redis comes back from the older snapshot
    // while none runs, which no look of a running projector can see.
    let (mut world, started) = world
        .with_projector_down(|| {
            redis.kill();
            redis.restart();
        })
        .await;
    assert!(world.losses() >= 1.0, "the start found the positions behind the group's commits");
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_no_wrong_answer_after(&prober.finish().await, started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restored_from_before_a_rebuild_switch_is_put_forward_again_and_the_old_generation_never_served() {
    let mut redis = OwnRedis::with(Persistence::Snapshots);
    let scenario = Scenario::generate(0x5eed_1107, 6, 12, 5);
    let (first, rest) = scenario.messages.split_at(scenario.messages.len() / 3);
    let topics = Topics::holding(first).await;
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(first.len() as u64, Duration::from_secs(60)).await;
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    // A rebuild switches to generation 2 (generation 1 is deleted a second later); the live projector and
    // the API follow it; the rest of the events arrive.
    let switched = runner::rebuild(world.config().clone()).await.expect("the rebuild succeeds");
    assert_eq!(switched, Some(2));
    kafka::publish(&kafka::producer(), &topics, rest).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let expected = reference(&topics, &scenario).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_eq!(world.active_generation().await, Some(2));
    let prober = Prober::start(&world.app, &scenario);

    // Redis comes back from the snapshot taken before the switch: generation 1 active, generation 2 gone.
    redis.kill();
    redis.restart();
    let detected = world.wait_detected(DETECTION).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_eq!(world.active_generation().await, Some(2), "generations only go forward");
    assert_no_wrong_answer_after(&prober.finish().await, detected);
}

/// The least-privileged user docs/security.md documents: every command but the `@dangerous` ones (no `INFO`,
/// no `CONFIG`, no `KEYS`). The projector then tells a loss by its positions alone, and still heals.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_redis_user_that_may_not_run_info_the_read_model_is_complete_and_every_flush_is_healed() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    // Keys of the read model only: every prefix the test makes starts with `heal`.
    let acl = ["ACL", "SETUSER", "readmodel", "on", ">s3cret-pass", "~heal*", "+@all", "-@dangerous"];
    assert_eq!(redis.cli(&acl), "OK");
    let url = redis.url().replacen("redis://", "redis://readmodel:s3cret-pass@", 1);
    let scenario = Scenario::generate(0x5eed_1108, 3, 10, 4);
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let mut world = Healing::start(&topics, &url, false).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let refused = world.projector.metrics_text();
    assert!(!refused.contains("projector_redis_memory_used_bytes{"), "INFO was refused to this user");

    // Twice: the second loss is told by the same words as the first (the same partition's positions, the
    // same generation), and is healed again, not taken for the loss already answered.
    for round in 1..=2 {
        let prober = Prober::start(&world.app, &scenario);
        prober.wait_answered(Instant::now(), Duration::from_secs(10)).await;
        assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
        let detected = end_to_end::eventually(DETECTION, &format!("loss {round} to be detected"), || async {
            (world.losses() >= round as f64).then(Instant::now)
        })
        .await;
        world.wait_converged(&expected, CONVERGENCE).await;
        assert_no_wrong_answer_after(&prober.finish().await, detected);
    }
}

/// Two flushes during one heal, told by the same words (a user without `INFO`: the same partition's
/// positions lost on the same generation): the second is a new loss, and what was projected again between
/// the two is projected again once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_redis_user_that_may_not_run_info_a_second_flush_during_the_heal_of_the_first_is_healed_too() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    let acl = ["ACL", "SETUSER", "readmodel", "on", ">s3cret-pass", "~heal*", "+@all", "-@dangerous"];
    assert_eq!(redis.cli(&acl), "OK");
    let url = redis.url().replacen("redis://", "redis://readmodel:s3cret-pass@", 1);
    let scenario = Scenario::generate(0x5eed_1116, 8, 15, 6);
    let total = scenario.messages.len() as u64;
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let mut world = Healing::start(&topics, &url, false).await;
    world.wait_ready(total, Duration::from_secs(60)).await;
    let prober = Prober::start(&world.app, &scenario);
    prober.wait_answered(Instant::now(), Duration::from_secs(10)).await;

    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    let detected = world.wait_detected(DETECTION).await;
    // Some of the stream projected again, not all of it: the first heal is under way.
    let consumed = world.projector.consumed();
    end_to_end::eventually(Duration::from_secs(30), "part of the stream projected again", || async {
        (world.projector.consumed() >= consumed + 200).then_some(())
    })
    .await;
    let healing = end_to_end::metrics::sample(&world.projector.metrics_text(), "projector_healing_partitions", &[]);
    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    assert!(healing > 0.0, "the second flush came during the first heal");
    end_to_end::eventually(DETECTION, "the second loss to be counted", || async {
        (world.losses() >= 2.0).then_some(())
    })
    .await;
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_no_wrong_answer_after(&prober.finish().await, detected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_during_a_heavy_replay_with_appendfsync_everysec_ends_complete() {
    let mut redis = OwnRedis::with(Persistence::AofEverySecond);
    let scenario = Scenario::generate(0x5eed_1103, 8, 20, 6);
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let world = Healing::start(&topics, &redis.url(), false).await;
    let total = scenario.messages.len() as u64;
    end_to_end::eventually(Duration::from_secs(60), "a tenth of the replay", || async {
        (world.projector.consumed() >= total / 10).then_some(())
    })
    .await;
    assert!(world.projector.consumed() < total, "killed during the replay");
    let prober = Prober::start(&world.app, &scenario);
    redis.kill();
    redis.restart();
    let mut world = world;
    let detected = world.wait_detected(DETECTION).await;
    world.wait_converged(&expected, CONVERGENCE).await;
    // A new read model is incomplete until its first catch-up, so not one answer was wrong, not even
    // before the kill was detected: the healing entries of the new read model survived it.
    let probes = prober.finish().await;
    let wrong: Vec<_> = probes.iter().filter(|p| p.is_wrong()).collect();
    assert!(wrong.is_empty(), "{} wrong answers, first {:?}", wrong.len(), wrong.first());
    assert_no_wrong_answer_after(&probes, detected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_redis_refuses_for_good_are_dead_lettered_and_their_partition_goes_on() {
    use end_to_end::events::event;
    use serde_json::json;
    use shared::{Keyspace, Topic};

    let at = "2026-05-01T10:00:00Z";
    let study = |org: &str, seq, kind, data| event(Topic::Study, org, &format!("{org}-s"), seq, kind, at, data);
    let (bad, good) = (end_to_end::unique("wrongtype"), end_to_end::unique("fine"));
    let mut messages = Vec::new();
    for org in [&bad, &good] {
        messages.push(study(org, 1, "study.created", json!({"internalTitle": "T"})));
        messages.push(study(org, 2, "study.launched", json!({})));
        messages.push(study(org, 3, "study.completed", json!({"completedAt": at})));
    }
    // One partition, so that the refused aggregate stands before the good one in it.
    let topics = Topics::with_partitions(1).await;
    kafka::publish(&kafka::producer(), &topics, &messages).await;
    let prefix = end_to_end::unique("rm");
    let keys = Keyspace::new(prefix.clone(), 1);
    let mut conn = end_to_end::redis().await;
    // A key of the wrong type where the completed studies of `bad` go: every write of it fails.
    let _: () = redis::cmd("SET").arg(keys.studies(&bad)).arg("not a sorted set").query_async(&mut conn).await.unwrap();

    let running = runner::spawn(runner::config(&topics, &prefix, &end_to_end::unique("g"))).await;
    running.wait_until_consumed(6, Duration::from_secs(60)).await;
    assert_eq!(running.snapshot().dead_lettered, 3, "{:?}", running.snapshot());
    let letters = kafka::read(&format!("{}.dlq", topics.study), 3, Duration::from_secs(30)).await;
    assert_eq!(letters.len(), 3);
    for letter in &letters {
        let reason = letter.header("dlq-reason").unwrap_or_default();
        assert!(reason.contains("WRONGTYPE"), "{reason}");
    }
    let score: Option<f64> =
        redis::cmd("ZSCORE").arg(keys.studies(&good)).arg(format!("{good}-s")).query_async(&mut conn).await.unwrap();
    assert!(score.is_some(), "the partition went on past the refused aggregate");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_is_reported_by_readiness_and_gauges_and_writes_resume_once_it_has_room() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    let scenario = Scenario::generate(0x5eed_1105, 2, 4, 3);
    let (first, rest) = scenario.messages.split_at(scenario.messages.len() / 2);
    let topics = Topics::holding(first).await;
    let mut config = runner::config(&topics, &end_to_end::unique("rm"), &end_to_end::unique("g"));
    config.redis.url = redis.url().into();
    config.redis.cluster = false;
    config.http_addr = "127.0.0.1:0".parse().unwrap();
    let running = runner::spawn(config).await;
    running.wait_until_consumed(first.len() as u64, Duration::from_secs(60)).await;
    let base = format!("http://{}", running.http.expect("an HTTP server"));
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
    let used = end_to_end::metrics::sample(&metrics, "projector_redis_memory_used_bytes", &["node=\"redis\""]);
    assert!(used > 100_000.0, "memory used is reported: {used}");

    // No room: Redis refuses every write with OOM.
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    kafka::publish(&kafka::producer(), &topics, rest).await;
    let body = end_to_end::eventually(Duration::from_secs(30), "readiness to say Redis is full", || async {
        let response = reqwest::get(format!("{base}/readyz")).await.unwrap();
        (response.status() == 503).then_some(())?;
        Some(response.text().await.unwrap()).filter(|b| b.contains("out of memory"))
    })
    .await;
    println!("{body}");
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
    assert_eq!(end_to_end::metrics::sample(&metrics, "projector_redis_out_of_memory", &[]), 1.0);
    // The memory gauges are read once a second, apart from the batch that waits for room.
    end_to_end::eventually(Duration::from_secs(30), "the gauge of maxmemory to follow", || async {
        let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
        let max = end_to_end::metrics::sample(&metrics, "projector_redis_memory_max_bytes", &["node=\"redis\""]);
        (max == 1.0).then_some(())
    })
    .await;

    // Room again: the writes that were refused are applied, nothing is lost.
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    running.wait_until_consumed(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let metrics = reqwest::get(format!("{base}/metrics")).await.unwrap().text().await.unwrap();
    assert_eq!(end_to_end::metrics::sample(&metrics, "projector_redis_out_of_memory", &[]), 0.0);
    assert_eq!(reqwest::get(format!("{base}/readyz")).await.unwrap().status(), 200);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_waiting_for_a_redis_that_comes_back_empty_is_not_written_onto_the_loss() {
    use end_to_end::events::{event, key_sha256};
    use serde_json::json;
    use shared::Topic;

    // Study s1 completed; Redis dies; s1 is retitled while it is away; Redis comes back empty. The
    // retitle must not be folded onto the empty state (a study from seq 4 alone, never completed, and
    // seq 1 to 3 then skipped as duplicates): the batch is dropped and the topics read again.
    let org = end_to_end::unique("org");
    let at = "2026-05-01T10:00:00Z";
    let study = |seq, kind, data| event(Topic::Study, &org, "s1", seq, kind, at, data);
    let secret = format!("{org}-secret");
    let key = json!({"name": "k", "keySha256": key_sha256(&secret)});
    let first = vec![
        event(Topic::ApiKey, &org, "k1", 1, "api_key.created", at, key),
        study(1, "study.created", json!({"internalTitle": "Before"})),
        study(2, "study.launched", json!({})),
        study(3, "study.completed", json!({"completedAt": at})),
    ];
    let retitled = vec![study(4, "study.retitled", json!({"internalTitle": "After"}))];
    let mut redis = OwnRedis::with(Persistence::Snapshots);
    let topics = Topics::with_partitions(1).await;
    kafka::publish(&kafka::producer(), &topics, &first).await;
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(first.len() as u64, Duration::from_secs(60)).await;

    redis.kill();
    kafka::publish(&kafka::producer(), &topics, &retitled).await;
    end_to_end::eventually(Duration::from_secs(30), "the retitle to wait for Redis", || async {
        (world.projector.snapshot().retries > 0).then_some(())
    })
    .await;
    redis.restart();

    let expected = runner::digest(&runner::build_from_scratch(&topics, 5).await).await;
    world.wait_converged(&expected, Duration::from_secs(60)).await;
    let (status, body) = world.app.json("/v1/studies/s1", &secret).await;
    assert_eq!((status, body["internalTitle"].as_str()), (200, Some("After")), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_while_a_rebuild_builds_is_read_again_and_the_switch_is_to_a_complete_generation() {
    use shared::Keyspace;
    let redis = OwnRedis::with(Persistence::AofAlways);
    let scenario = Scenario::generate(0x5eed_1110, 6, 20, 5);
    let total = scenario.messages.len() as u64;
    let topics = Topics::holding(&scenario.messages).await;
    let expected = reference(&topics, &scenario).await;
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(total, Duration::from_secs(60)).await;
    let prober = Prober::start(&world.app, &scenario);

    let rebuild = tokio::spawn(runner::rebuild_noting(world.config().clone()));
    // Redis is flushed once the rebuild has written part of generation 2.
    let building = Keyspace::new(world.prefix().to_string(), 2);
    end_to_end::eventually(Duration::from_secs(60), "the rebuild to write generation 2", || async {
        let keys = runner::generation_keys(&mut world.conn.clone(), &building).await;
        (keys.len() > 100).then_some(())
    })
    .await;
    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    let detected = world.wait_detected(DETECTION).await;
    let (switched, notices) = rebuild.await.expect("the rebuild task");
    assert_eq!(switched.expect("the rebuild succeeds"), Some(2));
    assert!(notices.iter().any(|n| n.contains("reading again")), "the rebuild read again: {notices:?}");
    world.wait_converged(&expected, CONVERGENCE).await;
    assert_eq!(world.active_generation().await, Some(2));
    assert_no_wrong_answer_after(&prober.finish().await, detected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_events_flow_a_flush_then_a_restart_from_an_older_snapshot_both_end_converged() {
    let mut redis = OwnRedis::with(Persistence::Snapshots);
    let scenario = Scenario::generate(0x5eed_1111, 4, 10, 4);
    let topics = Topics::holding(&scenario.messages).await;
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let prober = Prober::start(&world.app, &scenario);
    let publisher = Publisher::start(&topics, &scenario);
    publisher.wait_more(20).await;
    assert_eq!(redis.cli(&["SAVE"]), "OK");
    publisher.wait_more(20).await;

    // A flush while retitles arrive, then, once healed and with more arrived, Redis back from the
    // snapshot taken before the flush: older than everything applied since.
    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    let flushed = world.wait_detection(DETECTION).await;
    end_to_end::eventually(CONVERGENCE, "the API to answer again after the flush", || async {
        (world.app.admin_get("/readyz").await.status() == 200).then_some(())
    })
    .await;
    publisher.wait_more(20).await;
    let losses = world.losses();
    let killed = Instant::now();
    redis.kill();
    redis.restart();
    let rolled_back = world.wait_losses_above(losses, DETECTION * 2).await;
    let published = world.converge_after(publisher, &topics, scenario.messages.len()).await;
    println!("{published} retitles published during the faults");
    assert!(published > 20, "events flowed throughout: {published}");
    let probes = prober.finish().await;
    let (first, second): (Vec<_>, Vec<_>) = probes.into_iter().partition(|p| p.at < killed);
    assert_no_wrong_answer_after(&first, flushed);
    assert_no_wrong_answer_after(&second, rolled_back);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_resynchronized_from_an_older_copy_and_was_promoted_again_is_seen_and_healed() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    let copy = OwnRedis::with(Persistence::AofAlways);
    let scenario = Scenario::generate(0x5eed_1113, 4, 10, 4);
    let topics = Topics::holding(&scenario.messages).await;
    let mut world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let prober = Prober::start(&world.app, &scenario);
    let publisher = Publisher::start(&topics, &scenario);
    publisher.wait_more(20).await;

    // A copy taken now, detached; retitles go on arriving in the original only.
    let synchronized = |server: &OwnRedis| server.cli(&["INFO", "replication"]).contains("master_link_status:up");
    copy.cli(&["REPLICAOF", "127.0.0.1", &redis.port().to_string()]);
    // A full synchronization starts after the primary's `repl-diskless-sync-delay` (5 s by default).
    let synchronizing = Duration::from_secs(30);
    end_to_end::eventually(synchronizing, "the copy", || async { synchronized(&copy).then_some(()) }).await;
    copy.cli(&["REPLICAOF", "NO", "ONE"]);
    publisher.wait_more(40).await;
    // The same process, neither restarted nor flushed, takes the older copy's data by a full
    // synchronization, and is promoted again.
    redis.cli(&["REPLICAOF", "127.0.0.1", &copy.port().to_string()]);
    end_to_end::eventually(synchronizing, "the resynchronization", || async { synchronized(&redis).then_some(()) })
        .await;
    let replaced = Instant::now();
    redis.cli(&["REPLICAOF", "NO", "ONE"]);
    let detected = world.wait_detected(DETECTION).await;
    println!("detected {:?} after the data was replaced", detected - replaced);
    world.converge_after(publisher, &topics, scenario.messages.len()).await;
    assert_no_wrong_answer_after(&prober.finish().await, detected);
}
