//! A rebuild's switch that Redis undoes (the pointer's primary flushed or restored from before it): the
//! generation the live projectors maintain is served again, and nothing deletes it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use end_to_end::api::{self, spawn_app};
use end_to_end::fixture;
use end_to_end::kafka::Topics;
use end_to_end::scenario::Scenario;
use end_to_end::{env, eventually, metrics, redis, runner, unique};
use redis::AsyncCommands;
use serde_json::Value;
use shared::Keyspace;

/// A restore of Redis from a snapshot taken just before a rebuild's switch, landing before any live
/// projector followed the switch: the projectors go on with the older generation, and nothing will ever
/// put the newer one back. An API that served the newer one waits until the live projectors report the
/// older one after the restore, then serves it (503 for ever before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_undone_by_a_restore_before_any_projector_followed_it_is_served_again_once_they_report_the_older_generation(
) {
    let messages = fixture::dataset();
    let topics = Topics::holding(&messages).await;
    let prefix = end_to_end::unique("undone");
    let config = runner::config(&topics, &prefix, &end_to_end::unique("g"));
    let projector = runner::spawn(config.clone()).await;
    projector.wait_until_consumed(messages.len() as u64, Duration::from_secs(60)).await;
    let app = spawn_app(api::config(&prefix, &env("REDIS_URL"))).await;
    app.wait_serving(Duration::from_secs(30)).await;
    assert_eq!(app.get("/v1/studies", Some(fixture::ACME_KEY)).await.status(), 200);
    projector.stop().await;

    // A rebuild switched to generation 2, and the API served it; then Redis went back to before the
    // switch, while no projector ran.
    let mut conn = redis().await;
    let _: () = conn.set(Keyspace::active_generation(&prefix), 2).await.unwrap();
    let generation = || async { app.admin_get("/readyz").await.json::<Value>().await.unwrap()["generation"].as_u64() };
    eventually(Duration::from_secs(10), "the API to serve generation 2", || async {
        (generation().await == Some(2)).then_some(())
    })
    .await;
    let _: () = conn.set(Keyspace::active_generation(&prefix), 1).await.unwrap();
    eventually(Duration::from_secs(10), "the API to refuse the older generation", || async {
        (app.get("/v1/studies", Some(fixture::ACME_KEY)).await.status() == 503).then_some(())
    })
    .await;

    // The projector starts on generation 1, the active one: once it reports it, generation 1 is served.
    let _projector = runner::spawn(config).await;
    eventually(Duration::from_secs(20), "the API to serve generation 1 again", || async {
        (app.get("/v1/studies", Some(fixture::ACME_KEY)).await.status() == 200).then_some(())
    })
    .await;
    assert_eq!(generation().await, Some(1));
}

/// A switch undone during the grace period: the pointer's primary flushed right after the switch, and a
/// live projector that had not followed yet puts the pointer back to its own generation when it marks the
/// loss. The API serves that generation again. The rebuild waits for the switch to be put forward again,
/// and when it is not: it keeps the served generation whole, deletes its own, and fails saying so. Every
/// answer meanwhile is the whole list or 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_undone_during_the_grace_keeps_the_served_generation_whole_and_the_rebuild_says_so() {
    let runner::Built { prefix, config, .. } = runner::dataset_built("undone-grace").await;
    let app = spawn_app(api::config(&prefix, &env("REDIS_URL"))).await;
    app.wait_serving(Duration::from_secs(30)).await;
    let studies = || app.studies_total(fixture::ACME_KEY);
    let (status, full) = studies().await;
    assert_eq!(status, 200);
    let (generation_1, generation_2) = (Keyspace::new(prefix.clone(), 1), Keyspace::new(prefix.clone(), 2));
    let before = runner::digest(&generation_1).await;

    let rebuild = tokio::spawn(runner::rebuild_noting(config.clone()));
    let pointer = Keyspace::active_generation(&prefix);
    let mut conn = redis().await;
    eventually(Duration::from_secs(60), "the switch to generation 2", || async {
        let active: Option<u64> = conn.clone().get(&pointer).await.unwrap();
        (active == Some(2)).then_some(())
    })
    .await;
    // Undone at once, well within the rebuild's grace of a second, and a live projector on generation 1.
    let _: () = conn.set(&pointer, 1).await.unwrap();
    let live = runner::spawn(config).await;
    // Asked until the rebuild ended, and 25 times more (about a second): what it did last is seen too.
    let (mut wrong, mut answers, mut after) = (Vec::new(), 0, 0);
    while after < 25 {
        match studies().await {
            (200, total) if total == full => {}
            (503, _) => {}
            other => wrong.push(other),
        }
        answers += 1;
        after += usize::from(rebuild.is_finished());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (result, notices) = rebuild.await.expect("the rebuild task");
    assert_eq!(runner::digest(&generation_1).await, before, "the served generation is whole");
    let losses = metrics::sample(&live.metrics_text(), "projector_redis_losses_total", &[]);
    assert_eq!(losses, 0.0, "nothing was taken from under the live projector");
    let error = result.expect_err("a rebuild whose switch was undone fails");
    assert!(
        matches!(&error, projector::Error::SwitchUndone(u) if u.active == Some(1) && u.deleted),
        "{error}; notices: {notices:?}"
    );
    assert!(error.to_string().contains("generation 1 was kept"), "{error}");
    assert!(wrong.is_empty(), "answers other than the whole list or 503, of {answers}: {wrong:?}");
    assert!(runner::generation_keys(&mut redis().await, &generation_2).await.is_empty(), "the rebuild's own is gone");
    eventually(Duration::from_secs(20), "the API to serve generation 1 whole", || async {
        (studies().await == (200, full)).then_some(())
    })
    .await;
    live.stop().await;
}

/// A deletion of an old generation stopped halfway (the switch undone between two batches) takes its
/// positions first: what is left is a loss the projectors see, never a hole they would write around.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_generation_deleted_halfway_has_lost_its_positions_first() {
    let scenario = Scenario::generate(0x5eed_0012, 8, 30, 4);
    let topics = Topics::holding(&scenario.messages).await;
    let prefix = unique("halfway");
    let config = runner::config(&topics, &prefix, &unique("g"));
    runner::build(config, scenario.messages.len() as u64, Duration::from_secs(60)).await;
    let generation_1 = Keyspace::new(prefix.clone(), 1);
    let mut conn = redis().await;
    let all = runner::generation_keys(&mut conn, &generation_1).await;
    let positions = all.iter().filter(|key| generation_1.is_position(key)).count();
    assert!(all.len() > 1000 && positions > 0, "{} keys, {positions} positions", all.len());

    let batches = AtomicUsize::new(0);
    let stopped =
        runner::delete_generation_while(&mut conn, &generation_1, |_| batches.fetch_add(1, Ordering::Relaxed) == 0)
            .await;
    assert_eq!(stopped, Err(Some(1)), "stopped before its second batch, the pointer on generation 1");
    let left = runner::generation_keys(&mut conn, &generation_1).await;
    assert_eq!(left.len(), all.len() - 500, "one batch deleted");
    let kept: Vec<&String> = left.iter().filter(|key| generation_1.is_position(key)).collect();
    assert!(kept.is_empty(), "positions left: {kept:?}");
}
