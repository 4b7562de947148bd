//! Helpers for the end-to-end tests: connections to the local stack, isolated topics and key prefixes,
//! event builders, a canonical dump of a read-model generation, and polling with a deadline.
//!
//! The servers come from `scripts/stack up`; its `.stack/env` sets `KAFKA_BROKERS`, `REDIS_URL` and the
//! S3 variables. With `REDIS_CLUSTER=true` and `REDIS_URL` listing cluster nodes, the same tests run
//! against a Redis Cluster. Each test creates its own topics and key prefix, so tests run in parallel.

pub mod api;
pub mod broker_control;
pub mod cluster;
pub mod cut;
pub mod dump;
pub mod events;
pub mod faults;
pub mod fixed_address;
pub mod fixture;
pub mod kafka;
pub mod late_reply;
pub mod markers;
pub mod metrics;
pub mod mock_kafka;
pub mod otlp;
pub mod own_redis;
pub mod read_model;
pub mod rediss;
mod rng;
pub mod runner;
pub mod s3;
pub mod scenario;
pub mod soak;
pub mod stall;

use std::future::Future;
use std::time::Duration;

use shared::connection::{Connection, Settings};
use shared::redis_url::Target;
use tokio::time::Instant;

/// Sends the logs of the projectors and APIs a test runs in its own process to the test's output, filtered
/// by `TEST_LOG` (e.g. `projector=warn,query_api=warn`): printed only when the test fails.
pub fn test_log() {
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    }
}

/// An environment variable the stack sets, with a message that says how to get it.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: start the local stack with `scripts/stack up` and `source .stack/env`")
    })
}

/// The `redis-server` a test's own Redis runs: `REDIS_SERVER` when set (the stack's Redis 8 leg sets
/// it), else the one on `PATH`. A test's own Redis serving TLS runs the one on `PATH` always.
pub fn redis_server() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// A name no other test uses.
pub fn unique(label: &str) -> String {
    format!("{label}-{}", uuid::Uuid::new_v4().simple())
}

/// Polls `check` every 50 ms until it returns `Some`, or panics with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_showing(timeout, what, || {
        let checked = check();
        async move { checked.await.ok_or_else(String::new) }
    })
    .await
}

/// [`eventually`] for a check that says what it saw when it is not satisfied: a timeout panics with the
/// last thing it saw (unless empty), so a failure shows how far from `what` the service was.
pub async fn eventually_showing<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let seen = match check().await {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            let seen = if seen.is_empty() { seen } else { format!("; last seen: {seen}") };
            panic!("timed out after {timeout:?} waiting for {what}{seen}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether the tests run against a Redis Cluster (`REDIS_CLUSTER=true`, with `REDIS_URL` listing nodes).
pub fn redis_cluster() -> bool {
    std::env::var("REDIS_CLUSTER").is_ok_and(|v| v == "true")
}

/// A connection to the read model's Redis: the stack's single server, or its cluster.
pub async fn redis() -> Connection {
    let target = Target::new(&env("REDIS_URL"), redis_cluster());
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
    Connection::connect(&target, settings).await.expect("redis is reachable")
}
