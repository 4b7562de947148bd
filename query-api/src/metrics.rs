//! Prometheus metrics of the API: requests and latency by route and status, authentication failures,
//! video links that could not be signed, and what is kept in memory. A registry per server (no global
//! recorder); the middleware that counts requests is `crate::edge::metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
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
pub struct CacheLabels {
    pub cache: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
}

type Latency = Family<RouteLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Latency,
    pub auth_failures: Counter,
    /// 503s by cause (`crate::error::Refused`): `healing`, `lost`, `behind`, `unsure`, `layout`,
    /// `unknown` (the read model's condition), `redis` (a read failed), `overloaded`.
    pub refused: Family<CauseLabels, Counter>,
    pub presign_failures: Counter,
    pub video_links_refused: Counter,
    /// API keys found in memory (kept, Redis pushing their changes: `crate::read::push`), and looked up in
    /// Redis.
    pub key_lookups_memory: Counter,
    pub key_lookups_redis: Counter,
    /// Data reads answered from memory (`crate::read::cache`), and from Redis, while reads are kept.
    pub reads_memory: Counter,
    pub reads_redis: Counter,
    /// The bytes the caches hold, as they count them: `reads` and `keys`.
    pub kept_reads_bytes: Gauge,
    pub kept_keys_bytes: Gauge,
    /// Keys whose change Redis pushed (each drops what was kept of it).
    pub invalidations: Counter,
    /// Kept values asked for while no recent probe vouched for them (so Redis was read): `keys`,
    /// `key-index` (the key index's epoch, asked when a key is not kept) and `reads` (organizations'
    /// epochs).
    pub unvouched_keys: Counter,
    pub unvouched_key_index: Counter,
    pub unvouched_reads: Counter,
    /// Connections Redis pushes changes on that are up, and those lost (each drops what it vouched for).
    pub tracking_connections: Gauge,
    pub tracking_lost: Counter,
    /// Client connections open, and those closed at the cap (`crate::edge::connections`).
    pub connections: crate::edge::connections::Counts,
}

impl Default for Metrics {
    fn default() -> Self {
        // Unprefixed: the process's metrics keep their conventional names; this binary's are under its prefix.
        let mut root = Registry::default();
        shared::process_metrics::register(&mut root, "api", env!("CARGO_PKG_VERSION"), env!("GIT_COMMIT"));
        let registry = root.sub_registry_with_prefix("api");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "HTTP requests by route, method and status", requests.clone());
        let latency: Latency = Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 18)));
        registry.register("request_duration_seconds", "Time to answer, by route", latency.clone());
        let auth_failures = Counter::default();
        registry.register("auth_failures", "Requests refused for a missing or invalid API key", auth_failures.clone());
        let refused = Family::<CauseLabels, Counter>::default();
        registry.register(
            "refused",
            "Requests answered 503, by cause: `healing` (the read model, or the organization's part of it, \
             being projected again), `lost`, `behind`, `unsure`, `layout`, `unknown`, `redis`, `overloaded`",
            refused.clone(),
        );
        let presign_failures = Counter::default();
        registry.register("presign_failures", "Video links that could not be signed", presign_failures.clone());
        let video_links_refused = Counter::default();
        registry.register(
            "video_links_refused",
            "Videos given no link because their event named an empty key or a bucket not valid or not allowed",
            video_links_refused.clone(),
        );
        let (key_lookups_memory, key_lookups_redis) = by_source(
            registry,
            "key_lookups",
            "API keys looked up, by where: `memory` (kept, Redis pushing their changes) or `redis`",
        );
        let (reads_memory, reads_redis) = by_source(
            registry,
            "reads",
            "Data reads while reads are kept in memory (READ_CACHE_MB), by where: `memory` or `redis`",
        );
        let kept = Family::<CacheLabels, Gauge>::default();
        registry.register(
            "kept_bytes",
            "Bytes held by what is kept in memory, by cache: `reads` or `keys`",
            kept.clone(),
        );
        let kept_reads_bytes = kept.get_or_create(&CacheLabels { cache: "reads" }).clone();
        let kept_keys_bytes = kept.get_or_create(&CacheLabels { cache: "keys" }).clone();
        let invalidations = Counter::default();
        registry.register(
            "invalidations",
            "Keys kept in memory (API keys' entries, organizations' epochs) whose change Redis pushed",
            invalidations.clone(),
        );
        let unvouched = Family::<CacheLabels, Counter>::default();
        registry.register(
            "kept_unvouched",
            "Values kept in memory asked for while no recent probe vouched for them (the push channel late, \
             stalled or cut), so Redis was read: by cache, `keys`, `key-index` or `reads`",
            unvouched.clone(),
        );
        let unvouched_keys = unvouched.get_or_create(&CacheLabels { cache: "keys" }).clone();
        let unvouched_key_index = unvouched.get_or_create(&CacheLabels { cache: "key-index" }).clone();
        let unvouched_reads = unvouched.get_or_create(&CacheLabels { cache: "reads" }).clone();
        let tracking_connections = Gauge::default();
        registry.register(
            "tracking_connections",
            "Connections up on which Redis pushes the changes of what is kept (one per primary)",
            tracking_connections.clone(),
        );
        let tracking_lost = Counter::default();
        registry.register(
            "tracking_connections_lost",
            "Connections Redis pushed changes on that were lost or stopped serving their slots",
            tracking_lost.clone(),
        );
        let mut connections = crate::edge::connections::Counts::default();
        registry.register(
            "connections_open",
            "Client connections open (at most MAX_CONNECTIONS)",
            connections.open.clone(),
        );
        let closed = Family::<CauseLabels, Counter>::default();
        registry.register(
            "connections_closed",
            "Client connections closed at MAX_CONNECTIONS, by cause: `shed` (the longest waiting without a \
             request, closed to make room for a new one) or `refused` (the new one, every other answering)",
            closed.clone(),
        );
        connections.shed = closed.get_or_create(&CauseLabels { cause: "shed" }).clone();
        connections.refused = closed.get_or_create(&CauseLabels { cause: "refused" }).clone();
        Self {
            registry: root,
            requests,
            latency,
            auth_failures,
            refused,
            presign_failures,
            video_links_refused,
            key_lookups_memory,
            key_lookups_redis,
            reads_memory,
            reads_redis,
            kept_reads_bytes,
            kept_keys_bytes,
            invalidations,
            unvouched_keys,
            unvouched_key_index,
            unvouched_reads,
            tracking_connections,
            tracking_lost,
            connections,
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
