//! A partition the dead-letter limit halted is projected up to its halt and no further. A loss of Redis's
//! data while it is halted heals it up to the halt: its heal must not hold every other organization at 503
//! until the halt is fixed.

use std::time::Duration;

use end_to_end::api;
use end_to_end::events::event;
use end_to_end::fixture;
use end_to_end::kafka::{self, Topics};
use end_to_end::metrics::sample;
use end_to_end::own_redis::{OwnRedis, Persistence};
use end_to_end::runner;
use end_to_end::{eventually, eventually_showing, unique};
use serde_json::json;
use shared::{Keyspace, Topic};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loss_while_a_partition_is_halted_heals_up_to_the_halt_and_the_other_organizations_are_served() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    let (bad, good) = (unique("refused"), unique("served"));
    let at = "2026-05-01T10:00:00Z";
    let mut messages: Vec<_> = (0..40)
        .flat_map(|i| {
            let id = format!("{bad}-s{i:02}");
            [
                event(Topic::Study, &bad, &id, 1, "study.created", at, json!({"internalTitle": "T"})),
                event(Topic::Study, &bad, &id, 2, "study.launched", at, json!({})),
                event(Topic::Study, &bad, &id, 3, "study.completed", at, json!({"completedAt": at})),
            ]
        })
        .collect();
    let secret = "served-organization-key-01";
    messages.extend(fixture::key(&good, "k", secret).messages);
    // One partition a topic: every study of `bad` stands at the head of the study topic's one partition.
    let topics = Topics::with_partitions(1).await;
    let prefix = unique("heal");
    let keys = Keyspace::new(prefix.clone(), 1);
    // A key every write of `bad` touches, of another type: Redis refuses each of them for good.
    let wrong_type = ["HSET", &keys.org_epoch(&bad), "not", "a string"];
    assert_eq!(redis.cli(&wrong_type), "1");
    kafka::publish(&kafka::producer(), &topics, &messages).await;
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    config.redis.url = redis.url().into();
    // One Redis of the test's own, whatever the leg's Redis is.
    config.redis.cluster = false;
    config.redis.timeout_ms = 1000;
    // The halt is read again only after the test: whatever heals meanwhile heals with it halted.
    config.dead_letter_limit_retry_secs = 600;
    let running = runner::spawn(config).await;
    let app = {
        let mut api = api::config(&prefix, &redis.url());
        api.redis.cluster = false;
        api::spawn_app(api).await
    };

    let halted = || sample(&running.metrics_text(), "projector_partitions_halted", &[]);
    eventually(Duration::from_secs(60), "the study partition halted", || async { (halted() == 1.0).then_some(()) })
        .await;
    eventually(Duration::from_secs(60), "the other organization served", || async {
        (app.get("/v1/studies", Some(secret)).await.status() == 200).then_some(())
    })
    .await;

    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    assert_eq!(redis.cli(&wrong_type), "1", "the halt's cause is still there after the loss");
    eventually(Duration::from_secs(10), "the loss to be counted", || async {
        (sample(&running.metrics_text(), "projector_redis_losses_total", &[]) > 0.0).then_some(())
    })
    .await;
    eventually_showing(Duration::from_secs(30), "the other organization served again", || async {
        match app.get("/v1/studies", Some(secret)).await.status().as_u16() {
            200 => Ok(()),
            status => Err(status.to_string()),
        }
    })
    .await;
    assert_eq!(halted(), 1.0, "still halted: healed up to the halt, not past it");
    assert_eq!(running.snapshot().dead_lettered, 0, "nothing set aside");
    running.stop().await;
}
