//! Readiness as a load balancer uses it: an instance that knows the read model's generation stays in the
//! Service through a Redis outage and answers its own 503 with `Retry-After` (rather than leaving every
//! client with the ingress's bare 502), and probing it costs Redis nothing.

use std::time::{Duration, Instant};

use end_to_end::api::{config, spawn_app};
use end_to_end::faults::Healing;
use end_to_end::fixture::{self, ACME_KEY};
use end_to_end::kafka::Topics;
use end_to_end::own_redis::OwnRedis;
use end_to_end::{eventually, runner, unique};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_stopped_for_fifteen_seconds_readiness_stays_and_data_routes_answer_503_with_retry_after() {
    let mut redis = OwnRedis::start();
    let messages = fixture::dataset();
    let topics = Topics::holding(&messages).await;
    let world = Healing::start(&topics, &redis.url(), false).await;
    world.wait_ready(messages.len() as u64, WAIT).await;
    assert_eq!(world.app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);

    redis.stop();
    let stopped = Instant::now();
    let (mut refused, mut last) = (0, 0);
    while stopped.elapsed() < Duration::from_secs(15) {
        let ready = world.app.get("/readyz", None).await;
        assert_eq!(ready.status(), 200, "left the Service {:?} into the outage", stopped.elapsed());
        let response = world.app.get("/v1/studies", Some(ACME_KEY)).await;
        last = response.status().as_u16();
        match last {
            200 => {}
            503 => {
                refused += 1;
                assert!(response.headers().get("retry-after").is_some(), "503 without Retry-After");
                assert!(response.headers().get("x-request-id").is_some(), "503 without a request id");
                let body: serde_json::Value = response.json().await.unwrap();
                assert!(body["error"].is_string(), "the API's own error body: {body}");
            }
            other => panic!("{other} {:?} into the outage", stopped.elapsed()),
        }
    }
    assert!(refused > 0, "no request was refused while Redis was stopped");
    assert_eq!(last, 503, "data is still served from memory 15 s into the outage");

    redis.restart();
    eventually(WAIT, "data served again once Redis is back", || async {
        (world.app.get("/v1/studies", Some(ACME_KEY)).await.status() == 200).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_readiness_probes_send_no_command_to_redis() {
    let redis = OwnRedis::start();
    let messages = fixture::dataset();
    let topics = Topics::holding(&messages).await;
    let prefix = unique("probe");
    let mut projector = runner::config(&topics, &prefix, &unique("g"));
    projector.redis.url = redis.url().into();
    projector.redis.cluster = false;
    runner::build(projector, messages.len() as u64, WAIT).await;

    // An API that refreshes once at its start and then not for an hour: what remains is the probes.
    let mut api = config(&prefix, &redis.url());
    api.redis.cluster = false;
    api.generation_refresh_ms = 3_600_000;
    // Nothing kept in memory: no connection on which Redis pushes changes, probed ten times a second
    // (what an idle instance costs with them is `pushed.rs`'s).
    api.api_key_cache_size = 0;
    api.read_cache_mb = 0;
    let app = spawn_app(api).await;
    eventually(WAIT, "the API to know the generation", || async {
        (app.get("/readyz", None).await.status() == 200).then_some(())
    })
    .await;

    assert_eq!(redis.cli(&["CONFIG", "RESETSTAT"]), "OK");
    for _ in 0..500 {
        assert_eq!(app.get("/readyz", None).await.status(), 200);
        app.admin_get("/readyz").await;
    }
    let stats = redis.cli(&["INFO", "commandstats"]);
    let sent: Vec<&str> = stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:") && !l.starts_with("cmdstat_config"))
        .collect();
    assert!(sent.is_empty(), "1,000 probes sent commands to Redis: {sent:?}");
}
