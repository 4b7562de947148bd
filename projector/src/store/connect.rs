//! Connecting to the read model's Redis and checking that it may keep what it is given (no eviction).

use std::sync::atomic::{AtomicBool, Ordering};

use shared::connection::Connection;
use shared::redis_tls::refusal;
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::config::Config;

/// Connects to the read model's Redis, waiting for it with backoff. `None` when shut down meanwhile. A
/// TLS option that cannot work, or a connection Redis refuses for good (a certificate not trusted, a
/// password refused), is an error at once: no retry would cure it.
pub async fn connect(config: &Config, stopped: &mut watch::Receiver<bool>) -> Result<Option<Connection>, crate::Error> {
    let (target, settings, tls) = (config.redis.target(), config.redis_settings(), config.redis_tls()?);
    let mut backoff = Backoff::new();
    loop {
        match Connection::connect_with(&target, settings, &tls).await {
            Ok(conn) => return Ok(Some(conn)),
            Err(e) => {
                if let Some(refusal) = refusal(&e) {
                    return Err(crate::Error::RedisRefused { target: target.to_string(), refusal });
                }
                tracing::warn!(error = %e, "redis is not reachable yet");
                if !backoff.wait(stopped).await {
                    return Ok(None);
                }
            }
        }
    }
}

/// Refuses a Redis that may evict keys: a read model that loses keys silently answers 401 to valid keys
/// and short lists. Checked on the one server or every primary of a cluster, from `INFO memory` (the
/// section loss detection reads too; no `CONFIG`, which managed services often deny). A user that may not
/// run `INFO` is taken on trust, said once per process; any other failure to read it, with a warning.
pub async fn check_no_eviction(conn: &mut Connection) -> Result<(), crate::Error> {
    static REFUSED: AtomicBool = AtomicBool::new(false);
    let mut info = redis::cmd("INFO");
    info.arg("memory");
    let replies = match conn.on_every_primary(&info).await {
        Ok(replies) => replies,
        Err(e) if is_refused(&e) => {
            if !REFUSED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    error = %e,
                    "this Redis user may not run INFO: maxmemory-policy is not checked; make sure it is noeviction \
                     (grant +info to have it checked)"
                );
            }
            return Ok(());
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not read maxmemory-policy; make sure it is noeviction");
            return Ok(());
        }
    };
    for reply in replies {
        let info: String = redis::from_redis_value(reply).unwrap_or_default();
        match maxmemory_policy(&info) {
            Some("noeviction") | None => {}
            Some(policy) => {
                return Err(crate::Error::Config(format!(
                    "the read model's Redis may evict keys (maxmemory-policy {policy}): set maxmemory-policy \
                     noeviction on it (every primary of a cluster)"
                )))
            }
        }
    }
    Ok(())
}

/// `maxmemory_policy` of an `INFO memory` reply.
fn maxmemory_policy(info: &str) -> Option<&str> {
    info.lines().find_map(|line| line.trim_end().strip_prefix("maxmemory_policy:"))
}

/// Whether Redis refused a command to this user (an ACL without it).
pub fn is_refused(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM") || e.to_string().contains("NOPERM")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eviction_policy_is_read_from_info_memory() {
        let info = "# Memory\r\nused_memory:1024\r\nmaxmemory_policy:allkeys-lru\r\nmem_fragmentation_ratio:1.2\r\n";
        assert_eq!(maxmemory_policy(info), Some("allkeys-lru"));
        assert_eq!(maxmemory_policy("# Memory\r\nused_memory:1\r\n"), None);
    }
}
