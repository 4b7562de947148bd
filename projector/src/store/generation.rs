//! Generations of the read model as a whole: connecting to the Redis that holds them, which one is
//! active, every key of one, and deleting one.

use redis::aio::ConnectionLike;
use shared::connection::Connection;
use shared::redis_tls::refusal;
use shared::Keyspace;
use tokio::sync::watch;

use crate::backoff::Backoff;
use crate::config::Config;

/// Connects to the read model's Redis, waiting for it with backoff. `None` when shut down meanwhile. A
/// TLS option that cannot work, or a connection Redis refuses for good (a certificate not trusted, a
/// password refused), is an error at once: no retry would cure it.
pub async fn connect(config: &Config, stopped: &mut watch::Receiver<bool>) -> Result<Option<Connection>, crate::Error> {
    let (target, settings, tls) = (config.redis_target(), config.redis_settings(), config.redis_tls()?);
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
/// and short lists. Checked on the one server or every primary of a cluster; a server that refuses
/// `CONFIG GET` (a managed Redis may) is taken on trust, with a warning.
pub async fn check_no_eviction(conn: &mut Connection) -> Result<(), crate::Error> {
    let mut get = redis::cmd("CONFIG");
    get.arg("GET").arg("maxmemory-policy");
    let replies = match conn.on_every_primary(&get).await {
        Ok(replies) => replies,
        Err(e) => {
            tracing::warn!(error = %e, "could not read maxmemory-policy; make sure it is noeviction");
            return Ok(());
        }
    };
    for reply in replies {
        let pair: Vec<String> = redis::from_redis_value(reply).unwrap_or_default();
        match pair.get(1).map(String::as_str) {
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

/// The generation the projector writes to: the active one, which is set to 1 if there is none yet.
pub async fn active_generation<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> redis::RedisResult<u64> {
    let key = Keyspace::active_generation(prefix);
    let (generation,): (u64,) =
        redis::pipe().cmd("SET").arg(&key).arg(1).arg("NX").ignore().cmd("GET").arg(&key).query_async(conn).await?;
    Ok(generation)
}

/// Every key of the generation, by SCAN (over every primary of a cluster).
pub async fn generation_keys(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<Vec<String>> {
    conn.scan(&keys.pattern()).await
}

/// Deletes every key of a generation with UNLINK, a batch at a time, so Redis never blocks on it; returns
/// how many keys there were.
pub async fn delete_generation(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<usize> {
    let names = generation_keys(conn, keys).await?;
    for chunk in names.chunks(500) {
        // One UNLINK per key: keys of different organizations may sit in different slots.
        let unlinks: Vec<redis::Cmd> = chunk.iter().map(|name| one("UNLINK", name)).collect();
        conn.query_all(&unlinks).await?;
    }
    Ok(names.len())
}

/// A command of one key.
pub(super) fn one(name: &str, key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(key);
    cmd
}
