//! Command-line and environment configuration of the query API.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use shared::redis_options::RedisOptions;

#[derive(Debug, Clone, Parser)]
#[command(name = "query-api", version = crate::VERSION, about = "Serves completed studies and interviews from the Redis read model.")]
pub struct Config {
    /// Address of the public API: `/v1/*`, `/livez` and `/readyz`.
    #[arg(long, env = "LISTEN_ADDR", default_value = "127.0.0.1:8080")]
    pub listen_addr: SocketAddr,

    /// Address of the admin listener (`/metrics`, `/readyz` with its detail, `/livez`), kept off the
    /// public port; `off` to run none. Loopback by default: expose it only to the monitoring network.
    #[arg(long, env = "ADMIN_ADDR", default_value = "127.0.0.1:9465")]
    pub admin_addr: OptionalAddr,

    #[command(flatten)]
    pub redis: RedisOptions,

    /// Most requests in flight at once; one more is answered 503 with Retry-After at once, not queued.
    #[arg(long, env = "MAX_CONCURRENT_REQUESTS", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_requests: u32,

    /// Requests per second each API key may make (a token bucket); 0, the default, is no limit. Past it the
    /// answer is 429 with Retry-After.
    #[arg(long, env = "RATE_LIMIT_PER_SECOND", default_value_t = 0)]
    pub rate_limit_per_second: u32,

    /// Requests an API key may make at once before the rate limit applies (the bucket's size).
    #[arg(long, env = "RATE_LIMIT_BURST", default_value_t = 50)]
    pub rate_limit_burst: u32,

    /// Lookups in Redis that find no key, per second, for each client (its address, an IPv6 one by its
    /// /64; a token bucket of as many). Past it, that client's keys not kept in memory are not looked up
    /// until a token is back: the answer is 429 with Retry-After. Other clients are not affected, and keys
    /// kept in memory are never throttled. 0 for no throttle.
    #[arg(long, env = "UNKNOWN_KEYS_PER_SECOND", default_value_t = 20)]
    pub unknown_keys_per_second: u32,

    /// Proxies in front of the API whose `X-Forwarded-For` is believed, as comma-separated addresses or
    /// CIDR blocks (e.g. `10.0.0.0/8,fd00::/8`). A request from one of them is the client's named last in
    /// that header that is not a trusted proxy itself; from anywhere else, the connection's peer. Empty (the
    /// default): the peer, whatever the header says.
    #[arg(long, env = "TRUSTED_PROXIES", value_delimiter = ',', value_parser = parse_net)]
    pub trusted_proxies: Vec<ipnet::IpNet>,

    /// Most API keys kept in memory, so that a request authenticates without a Redis round trip; 0 asks
    /// Redis on every request. Redis pushes a key's change the moment it happens (client tracking), which
    /// drops that key; when the connection that pushes changes breaks or stalls, kept keys stop answering
    /// within half a second.
    #[arg(long, env = "API_KEY_CACHE_SIZE", default_value_t = 100_000)]
    pub api_key_cache_size: usize,

    /// Most keys kept in memory as invalid (looked up, found in no organization), so that one asked for
    /// again is answered 401 without a lookup in Redis, and without a token of its client's throttle of
    /// unknown keys. Each is trusted only while the key index's epoch Redis pushes is the one read with it:
    /// any API-key event ends them all. Two tables of at most this many are held (about 60 bytes each); 0
    /// keeps none. Needs `API_KEY_CACHE_SIZE` above 0.
    #[arg(long, env = "INVALID_KEY_CACHE_SIZE", default_value_t = 50_000)]
    pub invalid_key_cache_size: usize,

    /// Memory for the API keys and organizations' epochs kept in memory, in MiB: what the process holds for
    /// them, every key, value and the table's free room counted (about 330 bytes each). Past it, nothing
    /// more is kept until some goes (a change Redis pushes, five minutes unasked); requests then look up
    /// Redis. The keys kept are also bounded by `API_KEY_CACHE_SIZE`, the epochs by `READ_CACHE_MB`.
    #[arg(long, env = "API_KEY_CACHE_MB", default_value_t = 48)]
    pub api_key_cache_mb: u64,

    /// Memory for reads kept in memory, in MiB, so that a page that has not changed is answered without a
    /// Redis round trip; 0 reads Redis on every request. Redis pushes an organization's change the moment
    /// it happens (client tracking of its epoch), which drops its reads; when the connection that pushes
    /// changes breaks or stalls, kept reads stop answering within half a second. It also bounds the
    /// organizations whose epochs are kept (one per 2 KiB).
    #[arg(long, env = "READ_CACHE_MB", default_value_t = 64)]
    pub read_cache_mb: u64,

    /// Most one request reads into memory, in MiB: stored documents and whole transcripts, summed in
    /// Redis before they are read. A transcript beyond it is sent in 1 MiB chunks as the client takes
    /// them, so that no request holds more than about twice this in memory, and none is refused for it.
    #[arg(long, env = "MAX_PAGE_MB", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_page_mb: u64,

    /// Most connections held open at once. Past it, a new connection closes the one that has waited
    /// longest without a request in progress (idle, or still sending its head), and is closed itself only
    /// when every connection is answering a request; both are counted in `api_connections_closed_total`.
    /// Each connection holds a descriptor and about 15 KiB: keep it under the descriptor limit, and its
    /// memory within the pod's.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 4_096, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Most all requests together read into memory, in MiB: each read of interviews takes what is free, up
    /// to its own `MAX_PAGE_MB`, and sends the transcripts beyond what it got a chunk at a time; with less
    /// than a chunk (1 MiB) free, a request waits (within `REQUEST_TIMEOUT_MS`). Size the memory limit from
    /// it: about twice this (a read and the body written from it), plus the caches and connections.
    #[arg(long, env = "MAX_PAGES_MB", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_pages_mb: u64,

    /// Longest a client may take to send a request's head (line and headers), in milliseconds; past it the
    /// connection is closed.
    #[arg(long, env = "HEADER_READ_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_ms: u64,

    /// Longest a kept-alive connection may wait for its next request, in milliseconds; past it the
    /// connection is closed. Set it above the idle timeout of the load balancer in front (an AWS ALB's
    /// is 60 s), so that the balancer, not the API, closes an idle connection: a request the balancer
    /// sends just as the API closes it would fail.
    #[arg(long, env = "KEEP_ALIVE_TIMEOUT_MS", default_value_t = 75_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keep_alive_timeout_ms: u64,

    /// Longest a request may take, in milliseconds; past it the answer is 503 with Retry-After.
    #[arg(long, env = "REQUEST_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_ms: u64,

    /// Longest the requests in flight are waited for once the server is asked to stop, in milliseconds;
    /// past it the server stops without them.
    #[arg(long, env = "SHUTDOWN_DRAIN_MS", default_value_t = 10_000)]
    pub shutdown_drain_ms: u64,

    /// How often the active generation of the read model, whether it is complete, and the projectors'
    /// reports (the freshness headers) are read, in milliseconds, besides at once when Redis pushes a change
    /// of the first two.
    #[arg(long, env = "GENERATION_REFRESH_MS", default_value_t = 250, value_parser = clap::value_parser!(u64).range(1..))]
    pub generation_refresh_ms: u64,

    /// S3-compatible endpoint for video links, e.g. http://127.0.0.1:9000; AWS's own when unset.
    #[arg(long, env = "S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,

    /// Region the video links are signed for.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    pub s3_region: String,

    /// Bucket of videos stored without a bucket of their own; without it such videos get no link.
    #[arg(long, env = "S3_BUCKET")]
    pub s3_bucket: Option<String>,

    /// Comma-separated buckets video links may name; empty allows any valid bucket name. A video in
    /// another bucket gets no link (counted in api_video_links_refused_total).
    #[arg(long, env = "S3_ALLOWED_BUCKETS")]
    pub s3_allowed_buckets: Option<String>,

    /// Path-style URLs (http://host/bucket/key), as most S3-compatible servers need.
    #[arg(long, env = "S3_FORCE_PATH_STYLE", default_value_t = false, action = clap::ArgAction::Set)]
    pub s3_force_path_style: bool,

    /// Turns video links off: every videoDownloadURL is null.
    #[arg(long, env = "S3_DISABLED", default_value_t = false, action = clap::ArgAction::Set)]
    pub s3_disabled: bool,

    /// For benchmarks only: when above 0, `/v1/ceiling` answers 200 with a constant JSON body of this many
    /// bytes, through every layer the data routes have (the edge, the limits, the rate-limit and freshness
    /// headers) but with no key and no Redis read, so that a benchmark can tell what the middleware costs
    /// from what the data path costs. 0, the default, serves no such route (404).
    #[arg(long, env = "BENCH_CEILING_BYTES", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=16 * 1024 * 1024))]
    pub bench_ceiling_bytes: u32,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

pub use shared::process::{LogFormat, OptionalAddr};

impl Config {
    /// Refuses settings that no request could work with, with one line that says what to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_page_mb > self.max_pages_mb {
            let (page, pages) = (self.max_page_mb, self.max_pages_mb);
            return Err(format!(
                "MAX_PAGE_MB ({page}) is more than MAX_PAGES_MB ({pages}), what all requests may hold"
            ));
        }
        self.redis.validate()
    }

    /// The connection's clocks: a request head's, and an idle kept-alive connection's.
    pub fn clocks(&self) -> crate::edge::accept::Clocks {
        crate::edge::accept::Clocks {
            header: Duration::from_millis(self.header_read_timeout_ms),
            keep_alive: Duration::from_millis(self.keep_alive_timeout_ms),
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn shutdown_drain(&self) -> Duration {
        Duration::from_millis(self.shutdown_drain_ms)
    }

    pub fn generation_refresh(&self) -> Duration {
        Duration::from_millis(self.generation_refresh_ms)
    }
}

/// A CIDR block, or one address (a block of one).
fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is neither an address nor a CIDR block"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Config;

    #[test]
    fn settings_no_request_could_work_with_are_refused_at_start() {
        assert!(Config::try_parse_from(["query-api", "--generation-refresh-ms", "0"]).is_err());
        let page = Config::parse_from(["query-api", "--max-page-mb", "65", "--max-pages-mb", "64"]);
        assert!(page.validate().unwrap_err().contains("MAX_PAGES_MB"));
        let braces = Config::parse_from(["query-api", "--key-prefix", "rm{x}"]);
        assert!(braces.validate().unwrap_err().contains("KEY_PREFIX"));
        assert!(Config::parse_from(["query-api"]).validate().is_ok());
        let admin = Config::parse_from(["query-api"]).admin_addr.0.expect("an admin listener by default");
        assert!(admin.ip().is_loopback(), "metrics stay off the network unless asked for");
        assert_eq!(Config::parse_from(["query-api", "--admin-addr", "off"]).admin_addr.0, None);
    }

    #[test]
    fn every_setting_has_its_row_and_default_in_the_configuration_document() {
        use clap::CommandFactory;
        let document = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md"));
        let problems = shared::settings_doc::undocumented(&Config::command(), document);
        assert!(problems.is_empty(), "docs/configuration.md: {problems:#?}");
    }

    #[test]
    fn the_redis_options_parse_and_the_password_never_prints() {
        let config = Config::parse_from([
            "query-api",
            "--redis-url",
            "rediss://query-api:hunter2@redis.example:6380",
            "--redis-ca-file",
            "/etc/redis/ca.pem",
            "--redis-client-cert-file",
            "/etc/redis/client.pem",
            "--redis-client-key-file",
            "/etc/redis/client.key",
        ]);
        assert_eq!(config.redis.url.expose(), "rediss://query-api:hunter2@redis.example:6380");
        assert_eq!(config.redis.tls.ca_file.as_deref(), Some(std::path::Path::new("/etc/redis/ca.pem")));
        assert!(config.redis.tls.client_cert_file.is_some() && config.redis.tls.client_key_file.is_some());
        let shown = format!("{config:?} {:?}", config.redis.target());
        assert!(!shown.contains("hunter2") && shown.contains("query-api:***@redis.example"), "{shown}");
        let plain = Config::parse_from(["query-api"]);
        assert!(plain.redis.tls.ca_file.is_none(), "the system's roots unless a CA is given");
    }
}
