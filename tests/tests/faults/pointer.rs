//! The active generation's pointer lost while Redis holds the generation it named (on a cluster the pointer
//! lives on one primary, which can be flushed, restarted empty or failed over alone): a projector that starts
//! then puts the generation back and projects it again. It never takes the missing pointer for "no read
//! model" and begins a generation 1 from scratch beside the real one.

use std::time::Duration;

use end_to_end::api;
use end_to_end::{eventually, fixture, redis, runner};
use redis::AsyncCommands;
use shared::Keyspace;

const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_started_without_the_active_pointer_puts_back_the_generation_redis_holds_and_begins_none() {
    let runner::Built { prefix, config, .. } = runner::dataset_built("pointer").await;
    assert_eq!(runner::rebuild(config.clone()).await.expect("rebuild"), Some(2));
    let (first, second) = (Keyspace::new(prefix.clone(), 1), Keyspace::new(prefix.clone(), 2));
    let mut conn = redis().await;
    eventually(DEADLINE, "generation 1 deleted after the switch", || async {
        runner::generation_keys(&mut conn.clone(), &first).await.is_empty().then_some(())
    })
    .await;
    let digest = runner::digest(&second).await;
    let app = api::spawn_app(api::config(&prefix, &end_to_end::env("REDIS_URL"))).await;
    app.wait_serving(DEADLINE).await;

    // The pointer alone lost; then the pointer and the counter both; then the pointer lost and the counter
    // set back to 1 (its primary restarted from an older snapshot): the counter names no generation that
    // holds keys, and only a walk of the keyspace finds generation 2.
    for (lost, counter_back) in [
        (vec![Keyspace::active_generation(&prefix)], None),
        (vec![Keyspace::active_generation(&prefix), Keyspace::generation_counter(&prefix)], None),
        (vec![Keyspace::active_generation(&prefix)], Some(1)),
    ] {
        for key in &lost {
            let _: () = conn.del(key).await.unwrap();
        }
        if let Some(counter) = counter_back {
            let _: () = conn.set(Keyspace::generation_counter(&prefix), counter).await.unwrap();
        }
        eventually(DEADLINE, "the API to stop serving", || async {
            (app.admin_get("/readyz").await.status() == 503).then_some(())
        })
        .await;
        let projector = runner::spawn(config.clone()).await;
        let pointer = eventually(DEADLINE, "the projector to write a pointer", || async {
            conn.clone().get::<_, Option<u64>>(Keyspace::active_generation(&prefix)).await.ok().flatten()
        })
        .await;
        assert_eq!(
            pointer, 2,
            "the generation Redis held is put back ({lost:?} lost, counter set back to {counter_back:?})"
        );
        // Marked as a loss: what went with the pointer's primary is not known.
        eventually(DEADLINE, "the projector to count the loss", || async {
            let losses = end_to_end::metrics::sample(&projector.metrics_text(), "projector_redis_losses_total", &[]);
            (losses >= 1.0).then_some(())
        })
        .await;
        app.wait_serving(DEADLINE).await;
        projector.stop().await;
        assert_eq!(runner::digest(&second).await, digest, "generation 2 as it was");
        assert_eq!(runner::generation_keys(&mut conn, &first).await, Vec::<String>::new(), "no generation 1 begun");
        let counter: Option<u64> = conn.get(Keyspace::generation_counter(&prefix)).await.unwrap();
        assert_eq!(counter, Some(2), "the counter put back too");
    }
}

/// The pointer lost while a live projector writes generation 1 and a rebuild's generation 2, not switched
/// to, holds keys: a start puts back the generation the live projectors report writing, never the
/// rebuild's own (put back, it would be served before it caught up, or stop every start on a newer
/// layout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_without_the_pointer_puts_back_the_generation_live_projectors_write_not_a_rebuilds() {
    let runner::Built { topics, prefix, config, total, .. } = runner::dataset_built("put-back").await;
    let mut conn = redis().await;
    let live = runner::spawn(config.clone()).await;
    eventually(DEADLINE, "the live projector to report generation 1", || async {
        let all = runner::instances(&conn, &prefix).await;
        all.iter().any(|(_, _, generation)| *generation == 1).then_some(())
    })
    .await;
    // A rebuild's generation 2, built and not switched to, its state naming it.
    let _: () = conn.set(Keyspace::generation_counter(&prefix), 2).await.unwrap();
    let mut second = runner::config(&topics, &prefix, &end_to_end::unique("g"));
    second.generation = Some(2);
    runner::build(second, total, DEADLINE).await;
    let rebuild = Keyspace::rebuild(&prefix);
    let _: () = conn.hset_multiple(&rebuild, &[("generation", "2"), ("phase", "building")]).await.unwrap();

    let _: () = conn.del(Keyspace::active_generation(&prefix)).await.unwrap();
    let started = runner::spawn(config.clone()).await;
    let pointer = eventually(DEADLINE, "the start to write a pointer", || async {
        conn.clone().get::<_, Option<u64>>(Keyspace::active_generation(&prefix)).await.ok().flatten()
    })
    .await;
    assert_eq!(pointer, 1, "the generation the live projector writes is put back, not the rebuild's");
    started.stop().await;
    live.stop().await;
}

/// A command that works on the active generation, started while the pointer is missing, refuses and
/// writes nothing: taking the absence for generation 1 would point the API at a generation that holds
/// nothing (here generation 2 is the real one), and it would serve it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_or_a_digest_started_without_the_active_pointer_refuses_and_writes_no_pointer() {
    let runner::Built { topics, prefix, group, config, .. } = runner::dataset_built("pointer").await;
    assert_eq!(runner::rebuild(config.clone()).await.expect("rebuild"), Some(2));
    let mut conn = redis().await;
    let _: () = conn.del(Keyspace::active_generation(&prefix)).await.unwrap();

    let target = projector::RepairTarget::Organization(fixture::ACME.to_string());
    let repaired = projector::repair(&config, target, 1, &|_, _| {}).await;
    assert!(matches!(repaired, Err(projector::Error::NoActiveGeneration { .. })), "{repaired:?}");
    let digest = runner::output_within(runner::command(&topics, &prefix, &group, &["digest"]), DEADLINE);
    let said = String::from_utf8_lossy(&digest.stderr);
    assert!(!digest.status.success() && said.contains("pointer"), "{said}");
    let pointer: Option<u64> = conn.get(Keyspace::active_generation(&prefix)).await.unwrap();
    assert_eq!(pointer, None, "no pointer was written");
}
