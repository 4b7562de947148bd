//! A Redis that does not give the API `CLIENT TRACKING` (a proxy that passes neither RESP3 nor tracking,
//! a user not allowed it): the API keeps nothing in memory and answers every request from Redis, so a
//! change and a revocation are served at once, as docs/deploying.md says of such a Redis.

use std::time::Duration;

use end_to_end::api::{config, spawn_serving_app, TestApp};
use end_to_end::fixture::{self, ACME, ACME_KEY};
use end_to_end::kafka;
use end_to_end::own_redis::OwnRedis;
use end_to_end::rediss::{prefix, USERS};
use end_to_end::{eventually, metrics, runner, unique};
use shared::Keyspace;

async fn sample(app: &TestApp, name: &str, labels: &[&str]) -> f64 {
    metrics::sample(&app.admin_get("/metrics").await.text().await.unwrap(), name, labels)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_client_tracking_every_request_reads_redis_and_a_deleted_key_is_refused_at_once() {
    let redis = OwnRedis::start();
    // The API's user of deploy/redis/users.acl, less `CLIENT TRACKING`.
    let rules = USERS.lines().find_map(|line| line.strip_prefix("user query-api ")).expect("the API's user");
    let mut setuser = vec!["ACL", "SETUSER", "no-tracking", "reset"];
    let rules: Vec<String> = rules.split_whitespace().map(|rule| rule.replace("CHANGE-ME", "no-tracking-pw")).collect();
    setuser.extend(rules.iter().map(String::as_str));
    setuser.push("-client|tracking");
    assert_eq!(redis.cli(&setuser), "OK");

    let messages = fixture::dataset();
    let topics = kafka::Topics::holding(&messages).await;
    let prefix = prefix();
    let mut projector = runner::config(&topics, &prefix, &unique("g"));
    (projector.redis.url, projector.redis.cluster) = (redis.url().into(), false);
    let projector = runner::spawn(projector).await;
    projector.wait_until_consumed(messages.len() as u64, Duration::from_secs(60)).await;
    let url = format!("redis://no-tracking:no-tracking-pw@127.0.0.1:{}", redis.port());
    let mut api = config(&prefix, &url);
    api.redis.cluster = false;
    let app = spawn_serving_app(api).await;

    for _ in 0..5 {
        assert_eq!(app.get("/v1/studies/s_a", Some(ACME_KEY)).await.status(), 200);
    }
    assert_eq!(sample(&app, "api_tracking_connections", &[]).await, 0.0);
    assert_eq!(sample(&app, "api_reads_total", &["source=\"memory\""]).await, 0.0, "nothing served from memory");
    assert_eq!(sample(&app, "api_key_lookups_total", &["source=\"memory\""]).await, 0.0, "no key kept");
    assert!(sample(&app, "api_key_lookups_total", &["source=\"redis\""]).await >= 5.0);

    // The key deleted: the first request after the projector applied it is refused.
    kafka::publish(&kafka::producer(), &topics, &[fixture::key_deleted(ACME, "k_live", 2)]).await;
    let entry = Keyspace::new(prefix, 1).api_key_sha(&end_to_end::events::key_sha256(ACME_KEY));
    eventually(Duration::from_secs(30), "the deletion applied", || async {
        (redis.cli(&["EXISTS", &entry]) == "0").then_some(())
    })
    .await;
    assert_eq!(app.get("/v1/studies/s_a", Some(ACME_KEY)).await.status(), 401);
    projector.stop().await;
}
