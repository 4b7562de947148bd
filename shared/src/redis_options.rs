//! The read model's Redis as both binaries are configured with it: one set of options (its URL, TLS,
//! cluster or not, key prefix, timeout), flattened into each binary's configuration, so that an option,
//! its variable and its default cannot differ between the projector and the query API.

use std::time::Duration;

use crate::redis_tls::TlsOptions;
use crate::redis_url::{redact, RedisUrl, Target};

#[derive(Debug, Clone, clap::Args)]
pub struct RedisOptions {
    /// Redis URL of the read model, e.g. redis://127.0.0.1:6379/0, or rediss://user:password@host:port for
    /// TLS and a Redis user; with --redis-cluster, the comma-separated URLs of some nodes of the cluster.
    /// Shown and logged without its password.
    #[arg(
        global = true,
        long = "redis-url",
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub url: RedisUrl,

    #[command(flatten)]
    pub tls: TlsOptions,

    /// The read model is a Redis Cluster, reached through the nodes in REDIS_URL.
    #[arg(global = true, long = "redis-cluster", env = "REDIS_CLUSTER", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub cluster: bool,

    /// Prefix of every read-model key (no braces); lets several read models share one Redis.
    #[arg(global = true, long = "key-prefix", env = "KEY_PREFIX", default_value = "rm")]
    pub key_prefix: String,

    /// Timeout of each Redis call (and of connecting), in milliseconds. The API answers 503 to a request
    /// whose read takes longer; the projector retries the call with backoff, and the timeout also bounds how
    /// long a call stuck on a primary that died delays the look that sees the failover.
    #[arg(global = true, long = "redis-timeout-ms", env = "REDIS_TIMEOUT_MS", default_value_t = 1000)]
    pub timeout_ms: u64,
}

impl RedisOptions {
    /// The Redis server or cluster of the read model.
    pub fn target(&self) -> Target {
        Target::new(self.url.expose(), self.cluster)
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Refuses a key prefix that would break the key layout (its hash tags), with one line saying why.
    /// Also refuses a `REDIS_URL` that is no Redis URL, or several URLs without `REDIS_CLUSTER`: both
    /// binaries say it in the same line, without its password, rather than trying to connect for ever.
    pub fn validate(&self) -> Result<(), String> {
        if self.key_prefix.contains(['{', '}']) {
            return Err(format!("KEY_PREFIX must not contain braces: {:?}", self.key_prefix));
        }
        let urls = self.url.expose();
        if !self.cluster && urls.split(',').skip(1).any(|piece| piece.contains("://")) {
            return Err(format!(
                "REDIS_URL holds several URLs ({}): give one, or set REDIS_CLUSTER=true for a Redis Cluster",
                redact(urls)
            ));
        }
        let target = self.target();
        if target.urls().is_empty() {
            return Err("REDIS_URL is empty".to_string());
        }
        for url in target.urls() {
            if url.split("://").next().is_some_and(|scheme| scheme.contains("sentinel")) {
                return Err(format!(
                    "REDIS_URL {} names Redis Sentinel, which this service does not speak: give an address that \
                     always names the primary (docs/deploying.md, Redis)",
                    redact(url)
                ));
            }
            if redis::IntoConnectionInfo::into_connection_info(url.as_str()).is_err() {
                return Err(format!(
                    "REDIS_URL {} is not a Redis URL: redis://[user:password@]host:port[/db], rediss:// for TLS",
                    redact(url)
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Options {
        #[command(flatten)]
        redis: RedisOptions,
    }

    fn validated(args: &[&str]) -> Result<(), String> {
        Options::parse_from(std::iter::once("test").chain(args.iter().copied())).redis.validate()
    }

    #[test]
    fn a_url_that_is_no_redis_url_or_several_without_a_cluster_is_refused_in_one_line_without_its_password() {
        assert_eq!(validated(&[]), Ok(()));
        assert_eq!(validated(&["--redis-url", "rediss://user:secret@host:6380/0"]), Ok(()));
        let cluster = "redis://:pw@a:7000,redis://:pw@b:7001";
        assert_eq!(validated(&["--redis-url", cluster, "--redis-cluster"]), Ok(()));
        let several = validated(&["--redis-url", cluster]).unwrap_err();
        assert!(several.contains("REDIS_CLUSTER=true") && !several.contains("pw"), "{several}");
        let sentinel = validated(&["--redis-url", "redis+sentinel://:secret@sentinel:26379/mymaster"]).unwrap_err();
        assert!(sentinel.contains("names Redis Sentinel") && !sentinel.contains("secret"), "{sentinel}");
        for url in ["127.0.0.1:6379", "localhost:6379", "http://user:secret@host:6379", ""] {
            let refused = validated(&["--redis-url", url]).unwrap_err();
            assert!(refused.starts_with("REDIS_URL") && !refused.contains("secret"), "{url}: {refused}");
            assert!(!refused.contains('\n'), "one line");
        }
    }
}
