//! Several instances of each binary: projectors sharing one consumer group's partitions and taking over
//! from one that dies, a rebuild switching every live projector at once, and API instances that answer
//! alike and follow the same key deletions and generation switches.

use std::time::Duration;

use end_to_end::api::{config, spawn_serving_app, unsigned, World};
use end_to_end::dump::dump;
use end_to_end::fixture::{self, key, ACME, ACME_KEY};
use end_to_end::kafka::{self, Topics, PARTITIONS};
use end_to_end::scenario::{self, Scenario};
use end_to_end::{env, eventually, metrics, read_model, redis, runner, unique};
use redis::AsyncCommands;
use serde_json::json;
use shared::Keyspace;

/// Every partition of the three event topics.
const ALL_PARTITIONS: usize = 3 * PARTITIONS as usize;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_projectors_split_the_partitions_and_the_survivor_of_a_sigkill_ends_identical_to_one_run() {
    let scenario = Scenario::generate(0x5eed_0061, 4, 20, 8);
    let total = scenario.messages.len();
    let (first, second) = scenario.messages.split_at(total / 2);
    let topics = Topics::holding(first).await;
    let mut conn = redis().await;

    let (prefix, group) = (unique("rm"), unique("g"));
    let mut doomed = runner::spawn_process(&topics, &prefix, &group);
    let survivor = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    // Partitions go by rendezvous hashing over random instance ids: once in 256 starts one of two
    // instances is given none of the nine. The doomed one is then started again, under a new id, so that
    // the SIGKILL below takes partitions away. A share of none is taken for good once it lasted 2 s (eight
    // reports).
    let mut split = Vec::new();
    for _ in 0..5 {
        let none_since = std::cell::Cell::new(None::<std::time::Instant>);
        split = eventually(Duration::from_secs(60), "two projectors to hold every partition", || async {
            let all = runner::instances(&conn, &prefix).await;
            let counts: Vec<usize> = all.iter().map(|(_, partitions, _)| *partitions).collect();
            if counts.len() != 2 || counts.iter().sum::<usize>() != ALL_PARTITIONS {
                none_since.set(None);
                return None;
            }
            if counts.iter().all(|&n| n > 0) {
                return Some(counts);
            }
            let since = none_since.get().unwrap_or_else(std::time::Instant::now);
            none_since.set(Some(since));
            (since.elapsed() >= Duration::from_secs(2)).then_some(counts)
        })
        .await;
        if split.iter().all(|&n| n > 0) {
            break;
        }
        println!("split {split:?}: the doomed instance starts again under another id");
        doomed.sigkill();
        doomed = runner::spawn_process(&topics, &prefix, &group);
    }
    assert!(split.iter().all(|&n| n > 0), "both projectors hold partitions: {split:?}");
    assert_eq!(split.iter().sum::<usize>(), ALL_PARTITIONS);

    // The second half arrives while both run; one dies by SIGKILL partway through it.
    let publishing = {
        let (topics, second) = (topics.clone(), second.to_vec());
        tokio::spawn(async move { kafka::publish(&kafka::producer(), &topics, &second).await })
    };
    let keys = Keyspace::new(prefix.clone(), 1);
    let message = &scenario.messages[total * 5 / 8];
    read_model::wait_until_reached(&conn, &keys, message, Duration::from_secs(120), "progress into the second half")
        .await;
    doomed.sigkill();
    publishing.await.expect("published");

    eventually(Duration::from_secs(60), "the survivor to hold every partition", || async {
        let all = runner::instances(&conn, &prefix).await;
        (all.len() == 1 && all[0].1 == ALL_PARTITIONS).then_some(())
    })
    .await;
    read_model::wait_until_applied_everything(&conn, &keys, &scenario, Duration::from_secs(120)).await;
    survivor.stop().await;

    let reference = runner::build_from_scratch(&topics, total as u64).await;
    let expected = dump(&mut conn, &reference).await;
    assert!(expected.len() > 1000, "a large read model: {} keys", expected.len());
    assert_eq!(dump(&mut conn, &keys).await, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_switches_every_live_projector_of_the_group_once() {
    let (topics, scenario) = scenario::published(0x5eed_0062, 2, 10, 4).await;
    let total = scenario.messages.len() as u64;
    let (prefix, group) = (unique("rm"), unique("g"));
    let one = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    let two = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    runner::wait_until_consumed(&[&one, &two], total, Duration::from_secs(120)).await;
    let mut conn = redis().await;
    eventually(Duration::from_secs(60), "two registered projectors", || async {
        (runner::instances(&conn, &prefix).await.len() == 2).then_some(())
    })
    .await;

    let rebuild = ["rebuild", "--grace-secs", "1", "--handover-lag", "0"];
    let stdout = runner::succeed(&topics, &prefix, &group, &rebuild, Duration::from_secs(180)).await;
    assert_eq!(stdout.matches("switched to generation").count(), 1, "{stdout}");
    assert!(stdout.contains("switched to generation 2"), "{stdout}");
    let counter: u64 = conn.get(Keyspace::generation_counter(&prefix)).await.unwrap();
    assert_eq!(counter, 2, "one new generation for the whole group");
    eventually(Duration::from_secs(10), "both live projectors on generation 2", || async {
        let all = runner::instances(&conn, &prefix).await;
        (all.len() == 2 && all.iter().all(|(_, _, generation)| *generation == 2)).then_some(())
    })
    .await;
    one.stop().await;
    two.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_api_instances_answer_alike_and_follow_key_deletions_and_generation_switches_within_a_second() {
    let extra = key(ACME, "extra", "a-second-acme-key-0001");
    let world = World::start(&[fixture::dataset(), extra.messages.clone()].concat()).await;
    let other = spawn_serving_app(config(&world.prefix, &env("REDIS_URL"))).await;
    let apps = [&world.app, &other];
    let paths = [
        "/v1/studies",
        "/v1/studies?page=2&pageSize=1",
        "/v1/studies/s_b",
        "/v1/studies/s_b/interviews",
        "/v1/studies/s_prog/interviews",
        "/v1/interviews/i4",
        "/v1/interviews/i3",
    ];
    let answers = |key: &'static str| async move {
        let mut all = Vec::new();
        for app in apps {
            let mut answers = Vec::new();
            for path in paths {
                let (status, body) = app.json(path, key).await;
                answers.push((status, unsigned(body)));
            }
            all.push(answers);
        }
        all
    };
    let before = answers(ACME_KEY).await;
    assert_eq!(before[0], before[1]);
    assert_eq!(before[0][0].0, 200);
    assert_eq!(answers("a-second-acme-key-0001").await[0], before[0]);

    // A deleted key: refused by both, within a second of being projected.
    let deletion = extra.then("api_key.deleted", "2026-06-01T00:00:00Z", json!({})).messages[1..].to_vec();
    let consumed = world.projector.consumed();
    kafka::publish(&kafka::producer(), &world.topics, &deletion).await;
    world.projector.wait_until_consumed(consumed + 1, Duration::from_secs(60)).await;
    eventually(Duration::from_secs(1), "both instances to refuse the deleted key", || async {
        let mut refused = true;
        for app in apps {
            refused &= app.get("/v1/studies", Some("a-second-acme-key-0001")).await.status() == 401;
        }
        refused.then_some(())
    })
    .await;

    // A generation switch: generation 2 is built beside generation 1, made active, and generation 1
    // deleted at once; within a second both serve generation 2, with the same answers as before.
    world.switch_to_a_second_generation().await;
    eventually(Duration::from_secs(1), "both instances to serve generation 2", || async {
        (answers(ACME_KEY).await == before).then_some(())
    })
    .await;
}

/// How many times a projector is started beside the busy one.
const STARTS: usize = 10;

/// A rolling deploy or a scale-out starts a projector beside a busy one. The start's check compares the
/// broker's commits with the positions Redis holds, for every partition, including those the busy one is
/// applying at that moment: a commit must never lead the positions recorded, or the check counts a loss
/// that never happened and every organization is answered 503 until it is projected again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn projectors_started_and_stopped_beside_a_busy_one_count_no_loss_and_the_api_answers_no_503() {
    let scenario = Scenario::generate(0x5eed_0063, 6, 40, 8);
    let orgs = scenario.organizations();
    let topics = Topics::create().await;
    let (prefix, group) = (unique("rm"), unique("g"));
    let busy = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    let app = spawn_serving_app(config(&prefix, &env("REDIS_URL"))).await;

    // About 300 events a second, for as long as the starts take, in bursts twice a second (as producers
    // that batch send them): between two bursts the busy projector has applied and committed the last.
    let publishing = {
        let (topics, messages) = (topics.clone(), scenario.messages.clone());
        tokio::spawn(async move {
            let producer = kafka::producer();
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            // Again and again: the second time round every event is a duplicate, applied as one.
            for chunk in messages.chunks(150).cycle() {
                tick.tick().await;
                kafka::publish(&producer, &topics, chunk).await;
            }
        })
    };
    let asking = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let requests = {
        let (asking, orgs) = (asking.clone(), orgs.clone());
        tokio::spawn(async move {
            let (mut answered, mut unavailable) = (0u64, 0u64);
            while asking.load(std::sync::atomic::Ordering::Relaxed) {
                for org in &orgs {
                    let status = app.get("/v1/studies", Some(&format!("{org}-secret1"))).await.status();
                    answered += 1;
                    unavailable += u64::from(status == 503);
                }
            }
            (answered, unavailable)
        })
    };
    let conn = redis().await;
    let losses =
        |running: &runner::Running| metrics::sample(&running.metrics_text(), "projector_redis_losses_total", &[]);
    let mut counted = Vec::new();
    for start in 0..STARTS {
        let (applied, began) = (busy.consumed(), std::time::Instant::now());
        let second = runner::spawn(runner::config(&topics, &prefix, &group)).await;
        // Both hold their share (rarely none of the nine for one of them: see the test above).
        eventually(Duration::from_secs(60), "two projectors to share the partitions", || async {
            let all = runner::instances(&conn, &prefix).await;
            let held: usize = all.iter().map(|(_, partitions, _)| *partitions).sum();
            (all.len() == 2 && held == ALL_PARTITIONS).then_some(())
        })
        .await;
        // Left while both apply the stream.
        eventually(Duration::from_secs(60), "the stream applied meanwhile", || async {
            (busy.consumed() + second.consumed() > applied + 300).then_some(())
        })
        .await;
        let meanwhile = busy.consumed() + second.consumed() - applied;
        eprintln!("start {start}: shared, and {meanwhile} applied, in {:?}", began.elapsed());
        counted.push((start, losses(&second)));
        second.stop().await;
    }
    counted.push((STARTS, losses(&busy)));
    asking.store(false, std::sync::atomic::Ordering::Relaxed);
    let (answered, unavailable) = requests.await.unwrap();
    publishing.abort();
    busy.stop().await;
    assert!(answered > 100, "{answered} requests answered");
    let counted_none = counted.iter().all(|(_, losses)| *losses == 0.0);
    assert!(
        counted_none && unavailable == 0,
        "losses counted (start, losses; the last is the busy one): {counted:?}; {unavailable} of {answered} \
         requests answered 503"
    );
}
