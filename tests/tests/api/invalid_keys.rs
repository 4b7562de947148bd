//! Invalid keys kept in the API's memory: asked again, refused without a lookup, until any API-key event;
//! never kept on the connections Redis pushes changes on; refused 401 even while their client is throttled;
//! and the client a throttle counts, when forwarded headers come from a peer not trusted.

use end_to_end::api::{config, spawn_app, TestApp, World, REVOCATION};
use end_to_end::fixture::{self, key_created, ACME, ACME_KEY};
use end_to_end::metrics::sample;
use end_to_end::{env, eventually, unique};
use std::time::Duration;

async fn lookups(app: &TestApp) -> (f64, f64) {
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    let source = |s: &str| sample(&metrics, "api_key_lookups_total", &[&format!("source=\"{s}\"")]);
    (source("memory"), source("redis"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_key_asked_again_is_refused_from_memory_and_served_once_it_is_created() {
    let mut world = World::start(&fixture::dataset()).await;
    let later = unique("key-created-later");
    assert_eq!(world.app.get("/v1/studies", Some(&later)).await.status(), 401);
    // Once the key index's epoch is kept beside it, the key is refused with no lookup in Redis.
    eventually(Duration::from_secs(10), "the invalid key refused from memory", || async {
        let before = lookups(&world.app).await;
        assert_eq!(world.app.get("/v1/studies", Some(&later)).await.status(), 401);
        let after = lookups(&world.app).await;
        (after.1 == before.1 && after.0 == before.0 + 1.0).then_some(())
    })
    .await;
    // Created: served within the time a revocation takes, the invalid entry ended by the key event.
    world.publish(&[key_created(ACME, "k-later", 1, &later)]).await;
    eventually(REVOCATION, "the created key served", || async {
        (world.app.get("/v1/studies", Some(&later)).await.status() == 200).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_keys_are_not_kept_on_the_connections_redis_pushes_changes_on() {
    let world = World::start_with(&fixture::dataset(), |api| api.unknown_keys_per_second = 0).await;
    // A valid key kept, for a reference.
    assert_eq!(world.app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);
    let kept = |metrics: &str| sample(metrics, "api_kept_bytes", &["cache=\"keys\""]);
    let before = kept(&world.app.admin_get("/metrics").await.text().await.unwrap());
    for _ in 0..300 {
        let random = unique("random");
        // A lookup Redis did not answer within the API's timeout is 503 (the truth unknown): asked again.
        eventually(Duration::from_secs(10), "a random key refused", || async {
            match world.app.get("/v1/studies", Some(&random)).await.status().as_u16() {
                401 => Some(()),
                503 => None,
                other => panic!("a random key answered {other}"),
            }
        })
        .await;
    }
    // Whatever the tracker reads lands in its table within its read's round trip.
    let settle = world.app.get("/v1/studies", Some(ACME_KEY)).await;
    assert_eq!(settle.status(), 200);
    let after = kept(&world.app.admin_get("/metrics").await.text().await.unwrap());
    // 300 keys kept would hold tens of KiB; the key index's epoch and the table's growth are a few hundred.
    assert!(after - before < 4_096.0, "kept bytes went from {before} to {after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_invalid_key_from_a_throttled_client_is_401_with_the_throttle_in_a_header() {
    let world = World::start(&fixture::dataset()).await;
    let mut api = config(&world.prefix, &env("REDIS_URL"));
    api.unknown_keys_per_second = 1;
    api.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let app = spawn_app(api).await;
    app.wait_serving(Duration::from_secs(30)).await;
    let abuser = "203.0.113.9";
    let get = |key: String| {
        let request = app.client.get(format!("{}/v1/studies", app.address)).bearer_auth(key);
        request.header("X-Forwarded-For", abuser).send()
    };
    // A mistyped key, refused and kept as invalid (its second ask answered from memory).
    let mistyped = unique("mistyped");
    eventually(Duration::from_secs(10), "the mistyped key kept as invalid", || async {
        assert_eq!(get(mistyped.clone()).await.unwrap().status(), 401);
        let before = lookups(&app).await;
        assert_eq!(get(mistyped.clone()).await.unwrap().status(), 401);
        (lookups(&app).await.1 == before.1).then_some(())
    })
    .await;
    // Random keys close the client's throttle: a key never looked up cannot be called invalid (429)...
    eventually(Duration::from_secs(20), "the client throttled", || async {
        (get(unique("random")).await.unwrap().status() == 429).then_some(())
    })
    .await;
    // ...but the one known invalid is 401, as api.md asks, and says the throttle.
    let response = get(mistyped.clone()).await.unwrap();
    assert_eq!(response.status(), 401);
    let throttle = response.headers().get("ratelimit").map(|v| v.to_str().unwrap().to_string());
    assert!(throttle.as_deref().is_some_and(|t| t.starts_with("\"unknown-keys\";r=0;t=")), "{throttle:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_headers_from_a_peer_not_trusted_are_counted_on_the_admin_readiness_detail() {
    let world = World::start(&fixture::dataset()).await;
    let forwarded = |app: &TestApp| {
        let request = app.client.get(format!("{}/v1/studies", app.address)).bearer_auth(ACME_KEY);
        request.header("X-Forwarded-For", "203.0.113.10").send()
    };
    let untrusted = |detail: serde_json::Value| detail["forwardedByUntrustedPeers"].as_u64();
    assert_eq!(untrusted(readiness(&world.app).await), Some(0));
    assert_eq!(forwarded(&world.app).await.unwrap().status(), 200);
    assert_eq!(untrusted(readiness(&world.app).await), Some(1), "the loopback proxy is not trusted by default");
    // Trusted: believed, and not counted.
    let mut api = config(&world.prefix, &env("REDIS_URL"));
    api.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let app = spawn_app(api).await;
    app.wait_serving(Duration::from_secs(30)).await;
    assert_eq!(forwarded(&app).await.unwrap().status(), 200);
    assert_eq!(untrusted(readiness(&app).await), Some(0));
}

async fn readiness(app: &TestApp) -> serde_json::Value {
    app.admin_get("/readyz").await.json().await.unwrap()
}
