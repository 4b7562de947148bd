//! The API as a careful public HTTP service: error shapes for unknown routes and methods, request ids,
//! no caching of private data, compression, readiness, a clean 503 when Redis is away, and the OpenAPI
//! document.

use std::time::{Duration, Instant};

use end_to_end::api::{config, spawn_app, World};
use end_to_end::fixture::{self, ACME_KEY};
use end_to_end::metrics::sample;
use end_to_end::unique;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_are_404_and_other_methods_405_with_an_error_object() {
    let world = World::start(&fixture::dataset()).await;
    for path in ["/v1/nope", "/v2/studies", "/", "/v1/studies/s_a/other"] {
        let (status, body) = world.app.json(path, ACME_KEY).await;
        assert_eq!(status, 404, "{path}");
        assert!(body["error"].is_string(), "{path}: {body}");
    }
    let response = world.app.client.post(format!("{}/v1/studies", world.app.address)).bearer_auth(ACME_KEY).send();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 405);
    assert!(response.json::<Value>().await.unwrap()["error"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_carries_a_request_id_and_is_not_cached() {
    let world = World::start(&fixture::dataset()).await;
    let mut ids = Vec::new();
    for (path, key) in [("/v1/studies", Some(ACME_KEY)), ("/v1/studies", None), ("/v1/interviews/zzz", Some(ACME_KEY))]
    {
        let response = world.app.get(path, key).await;
        let headers = response.headers();
        assert_eq!(headers["cache-control"], "no-store", "{path}");
        assert_eq!(headers["x-content-type-options"], "nosniff");
        ids.push(headers["x-request-id"].to_str().unwrap().to_string());
    }
    ids.dedup();
    assert_eq!(ids.len(), 3, "a new id per request");
    let echoed = world.app.client.get(format!("{}/v1/studies", world.app.address)).header("x-request-id", "abc-123");
    let response = echoed.bearer_auth(ACME_KEY).send().await.unwrap();
    assert_eq!(response.headers()["x-request-id"], "abc-123", "a caller's id is kept for correlation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_are_compressed_when_the_client_accepts_it() {
    let world = World::start(&fixture::dataset()).await;
    let raw = reqwest::Client::builder().no_gzip().build().unwrap();
    let url = format!("{}/v1/studies/s_b/interviews", world.app.address);
    let compressed = raw.get(&url).bearer_auth(ACME_KEY).header("accept-encoding", "gzip").send().await.unwrap();
    assert_eq!(compressed.headers()["content-encoding"], "gzip");
    let plain = raw.get(&url).bearer_auth(ACME_KEY).send().await.unwrap();
    assert!(plain.headers().get("content-encoding").is_none());
    let body: Value = plain.json().await.unwrap();
    assert_eq!(body["pagination"]["total"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_redis_is_unreachable_requests_fail_fast_with_503_and_health_stays_up() {
    // Nothing listens on port 1 of the loopback.
    let app = spawn_app(config(&unique("down"), "redis://127.0.0.1:1")).await;
    let started = Instant::now();
    let response = app.get("/v1/studies", Some(ACME_KEY)).await;
    assert_eq!(response.status(), 503);
    assert!(response.headers().get("retry-after").is_some());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "service temporarily unavailable; retry later", "no internals leak");
    assert!(started.elapsed() < Duration::from_secs(5), "no hang: {:?}", started.elapsed());
    assert_eq!(app.get("/livez", None).await.status(), 200);
    assert_eq!(app.get("/readyz", None).await.status(), 503);
    assert_eq!(app.get("/v1/studies", None).await.status(), 401, "no credential needs no Redis");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_reports_the_generation_being_served_and_the_public_port_only_that_it_is_ready() {
    let world = World::start(&fixture::dataset()).await;
    let response = world.app.admin_get("/readyz").await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["generation"], 1);
    let public: Value = world.app.get("/readyz", None).await.json().await.unwrap();
    assert_eq!(public, json!({"status": "ready"}), "no detail on the public port");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_served_on_the_admin_listener_only() {
    let world = World::start(&fixture::dataset()).await;
    assert_eq!(world.app.get("/metrics", None).await.status(), 404, "not on the public port");
    assert_eq!(world.app.get("/healthz", None).await.status(), 404, "the public port serves /livez");
    assert_eq!(world.app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);
    let metrics = world.app.admin_get("/metrics").await;
    assert_eq!(metrics.status(), 200);
    assert!(metrics.text().await.unwrap().contains("api_requests_total"));
    assert_eq!(world.app.admin_get("/livez").await.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_is_served_as_committed() {
    let app = spawn_app(config(&unique("doc"), "redis://127.0.0.1:1")).await;
    let response = app.get("/v1/openapi.json", None).await;
    assert_eq!(response.status(), 200);
    let served = response.text().await.unwrap();
    let committed = include_str!("../../../query-api/openapi.json");
    assert_eq!(served, committed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_metrics_count_requests_by_route_and_status_and_auth_failures() {
    let world = World::start(&fixture::dataset()).await;
    for _ in 0..3 {
        assert_eq!(world.app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);
    }
    assert_eq!(world.app.get("/v1/studies/s_a", Some("wrong-key-000")).await.status(), 401);
    assert_eq!(world.app.get("/v1/interviews/nope", Some(ACME_KEY)).await.status(), 404);
    let metrics = world.app.admin_get("/metrics").await.text().await.unwrap();
    let requests = |route: &str, status: &str| {
        let (route, status) = (format!("route=\"{route}\""), format!("status=\"{status}\""));
        sample(&metrics, "api_requests_total", &[&route, "method=\"GET\"", &status])
    };
    assert_eq!(requests("/v1/studies", "200"), 3.0, "{metrics}");
    assert_eq!(requests("/v1/studies/{id}", "401"), 1.0);
    assert_eq!(requests("/v1/interviews/{id}", "404"), 1.0);
    assert_eq!(sample(&metrics, "api_auth_failures_total", &[]), 1.0);
    assert_eq!(sample(&metrics, "api_request_duration_seconds_count", &["route=\"/v1/studies\""]), 3.0);
    assert!(!metrics.contains("nope"), "routes are patterns, never raw paths");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_benchmarks_ceiling_route_is_served_only_when_configured_and_through_the_data_routes_layers() {
    let world = World::start(&fixture::dataset()).await;
    assert_eq!(world.app.get("/v1/ceiling", None).await.status(), 404, "no such route by default");
    let mut with_ceiling = config(&world.prefix, &end_to_end::env("REDIS_URL"));
    with_ceiling.bench_ceiling_bytes = 5_000;
    let app = spawn_app(with_ceiling).await;
    app.wait_serving(Duration::from_secs(30)).await;
    let response = app.get("/v1/ceiling", None).await;
    assert_eq!(response.status(), 200, "no key needed: it reads nothing");
    let headers = response.headers().clone();
    assert_eq!(headers["cache-control"], "no-store");
    assert!(headers.contains_key("x-request-id"));
    assert!(headers.contains_key("x-read-model-caught-up"), "the data routes' freshness headers: {headers:?}");
    let body = response.bytes().await.unwrap();
    assert_eq!(body.len(), 5_000);
    serde_json::from_slice::<Value>(&body).expect("a JSON body");
    let openapi: Value = app.get("/v1/openapi.json", None).await.json().await.unwrap();
    assert!(openapi["paths"].get("/ceiling").is_none(), "outside the API's definition");
}
