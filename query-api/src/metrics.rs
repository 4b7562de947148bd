//! Prometheus metrics of the API: requests and latency by route and status, authentication failures and
//! video links that could not be signed. A registry per server (no global recorder).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub route: String,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    pub source: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

type Latency = Family<RouteLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Latency,
    pub auth_failures: Counter,
    pub presign_failures: Counter,
    pub video_links_refused: Counter,
    /// API keys found in memory (`crate::key_cache`), and looked up in Redis.
    pub key_lookups_memory: Counter,
    pub key_lookups_redis: Counter,
    /// Data reads answered from memory (`crate::read_cache`), and from Redis, while reads are kept.
    pub reads_memory: Counter,
    pub reads_redis: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("api");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "HTTP requests by route, method and status", requests.clone());
        let latency: Latency = Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 18)));
        registry.register("request_duration_seconds", "Time to answer, by route", latency.clone());
        let auth_failures = Counter::default();
        registry.register("auth_failures", "Requests refused for a missing or invalid API key", auth_failures.clone());
        let presign_failures = Counter::default();
        registry.register("presign_failures", "Video links that could not be signed", presign_failures.clone());
        let video_links_refused = Counter::default();
        registry.register(
            "video_links_refused",
            "Videos given no link because their event named an empty key or a bucket not valid or not allowed",
            video_links_refused.clone(),
        );
        let (key_lookups_memory, key_lookups_redis) = by_source(
            &mut registry,
            "key_lookups",
            "API keys looked up, by where: `memory` (kept, vouched for by the key index's epoch) or `redis`",
        );
        let (reads_memory, reads_redis) = by_source(
            &mut registry,
            "reads",
            "Data reads while reads are kept in memory (READ_CACHE_MB), by where: `memory` or `redis`",
        );
        Self {
            registry,
            requests,
            latency,
            auth_failures,
            presign_failures,
            video_links_refused,
            key_lookups_memory,
            key_lookups_redis,
            reads_memory,
            reads_redis,
        }
    }
}

/// A counter family labelled `source`, registered as `name`, and its `memory` and `redis` counters.
fn by_source(registry: &mut Registry, name: &str, help: &str) -> (Counter, Counter) {
    let family = Family::<SourceLabels, Counter>::default();
    registry.register(name, help, family.clone());
    let memory = family.get_or_create(&SourceLabels { source: "memory" }).clone();
    let redis = family.get_or_create(&SourceLabels { source: "redis" }).clone();
    (memory, redis)
}

impl Metrics {
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("metrics encode");
        out
    }
}

/// Counts and times every request by its route pattern (never the raw path, which holds ids).
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_string();
    let method = method_label(request.method()).to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.latency.get_or_create(&RouteLabels { route: route.clone() }).observe(started.elapsed().as_secs_f64());
    let status = response.status().as_u16();
    metrics.requests.get_or_create(&RequestLabels { route, method, status }).inc();
    if status == 401 {
        metrics.auth_failures.inc();
    }
    response
}

/// The `method` label: the API serves GET and HEAD; any other method token, which a client may make up at
/// will, is `other`, so that no request can add a label value.
fn method_label(method: &axum::http::Method) -> &'static str {
    match *method {
        axum::http::Method::GET => "GET",
        axum::http::Method::HEAD => "HEAD",
        _ => "other",
    }
}

pub async fn render(State(metrics): State<Arc<Metrics>>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], metrics.render()).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::method_label;

    #[test]
    fn only_get_and_head_are_labelled_by_name() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::HEAD), "HEAD");
        for method in [Method::POST, Method::DELETE, Method::from_bytes(&[b'X'; 2000]).unwrap()] {
            assert_eq!(method_label(&method), "other");
        }
    }
}
