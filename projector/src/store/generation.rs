//! Generations of the read model as a whole: connecting to the Redis that holds them, their layout,
//! which ones hold keys, every key of one, and deleting one (which one is active is [`super::pointer`]'s).

use std::sync::atomic::{AtomicBool, Ordering};

use shared::connection::{Connection, Node};
use shared::redis_tls::refusal;
use shared::Keyspace;
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

/// The layout of a generation (`shared::layout`): its meta's field or, when Redis lost that (the meta is on
/// one primary of a cluster), the one every primary records beside its positions
/// ([`super::position::layout`]); none for a generation written before either existed, which is layout 1.
/// Read as layout 1, a generation of a later one would get its owners as keys beside its owners' fields.
pub async fn layout(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<Option<String>> {
    let field: Option<String> =
        redis::cmd("HGET").arg(keys.meta()).arg(shared::layout::FIELD).query_async(conn).await?;
    match field {
        Some(field) => Ok(Some(field)),
        None => super::position::layout(conn, keys).await,
    }
}

/// The layout of `keys`'s generation, when this build reads it; else the one line that says why not.
pub async fn check_layout(conn: &mut Connection, keys: &Keyspace) -> Result<u32, crate::Error> {
    let field = layout(conn, keys).await?;
    Ok(shared::layout::check(keys.generation(), field.as_deref(), "projector")?)
}

/// Writes `layout` back into the generation's meta when Redis lost it there (so that the API, which reads
/// the meta alone, reads it too). Returns whether it was missing.
pub async fn restore_layout(conn: &mut Connection, keys: &Keyspace, layout: u32) -> redis::RedisResult<bool> {
    let mut restore = redis::cmd("HSETNX");
    restore.arg(keys.meta()).arg(shared::layout::FIELD).arg(layout);
    let written: i64 = redis::from_redis_value(conn.query_all(&[restore]).await?.remove(0))?;
    Ok(written == 1)
}

/// The generations from 1 to `last` whose meta or positions on some primary exist, asked in one round of
/// `EXISTS`.
pub async fn holding_keys(conn: &mut Connection, prefix: &str, last: u64) -> redis::RedisResult<Vec<u64>> {
    let nodes: Vec<Node> = conn.nodes().await?;
    let mut probes = Vec::new();
    for generation in 1..=last {
        let keys = Keyspace::new(prefix.to_string(), generation);
        let names = std::iter::once(keys.meta()).chain(nodes.iter().map(|node| super::position::key_on(&keys, node)));
        probes.extend(names.map(|name| redis::cmd("EXISTS").arg(name).clone()));
    }
    let mut found = Vec::new();
    for (generation, replies) in (1..=last).zip(conn.query_all(&probes).await?.chunks(1 + nodes.len())) {
        let mut holds = false;
        for reply in replies {
            holds |= redis::from_redis_value::<i64>(reply.clone())? > 0;
        }
        if holds {
            found.push(generation);
        }
    }
    Ok(found)
}

/// The highest generation under `prefix` that holds keys, found without the pointers that name one (the
/// active generation and the counter, which Redis can lose with their primaries): up to the counter when
/// it is there, else by `SCAN` for the keys of every generation (a walk of the keyspace, made only when
/// both pointers are gone: at a read model's very first start, and after such a loss). `None`: Redis holds
/// no generation.
pub async fn highest_holding_keys(conn: &mut Connection, prefix: &str) -> redis::RedisResult<Option<u64>> {
    let counter = super::pointer::counter(conn, prefix).await?;
    if let Some(last) = counter {
        return Ok(holding_keys(conn, prefix, last).await?.into_iter().max());
    }
    // One walk, every key of any generation under the prefix: the meta and positions name it, as would any
    // other key of it.
    let mut highest = None;
    let base = format!("{prefix}:g");
    for key in conn.scan(&format!("{base}*")).await? {
        let generation = key.strip_prefix(&base).and_then(|rest| rest.split(':').next());
        if let Some(generation) = generation.and_then(|g| g.parse::<u64>().ok()) {
            highest = highest.max(Some(generation));
        }
    }
    Ok(highest)
}

/// Every key of the generation, by SCAN (over every primary of a cluster).
pub async fn generation_keys(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<Vec<String>> {
    conn.scan(&keys.pattern()).await
}

/// Deletes every key of a generation with UNLINK, a batch at a time, so Redis never blocks on it; returns
/// how many keys there were.
pub async fn delete_generation(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<usize> {
    let names = in_deletion_order(generation_keys(conn, keys).await?, keys);
    for chunk in names.chunks(500) {
        // One UNLINK per key: keys of different organizations may sit in different slots.
        let unlinks: Vec<redis::Cmd> = chunk.iter().map(|name| one("UNLINK", name)).collect();
        conn.query_all(&unlinks).await?;
    }
    Ok(names.len())
}

/// Deletes every key of the generation `retired` as [`delete_generation`] does, but only while the active
/// pointer, read again before each batch, is one `deletes` allows (Redis can undo a rebuild's switch, see
/// `run::retire`). The positions go first, so that a deletion stopped halfway is a loss the live
/// projectors see, not a hole they would write around; the meta goes last. `Ok(Err(pointer))`: the pointer it stopped at.
pub async fn delete_generation_while(
    conn: &mut Connection,
    retired: &Keyspace,
    deletes: impl Fn(Option<u64>) -> bool,
) -> redis::RedisResult<Result<usize, Option<u64>>> {
    let names = in_deletion_order(generation_keys(conn, retired).await?, retired);
    for chunk in names.chunks(500) {
        let active = super::pointer::active(conn, retired.prefix()).await?;
        if !deletes(active) {
            return Ok(Err(active));
        }
        let unlinks: Vec<redis::Cmd> = chunk.iter().map(|name| one("UNLINK", name)).collect();
        conn.query_all(&unlinks).await?;
    }
    Ok(Ok(names.len()))
}

/// The positions first (a deletion stopped halfway is then a loss the live projectors see), the meta last
/// (`projector generations` still finds the generation).
fn in_deletion_order(mut names: Vec<String>, keys: &Keyspace) -> Vec<String> {
    let meta = keys.meta();
    names.sort_by_key(|name| {
        if keys.is_position(name) {
            0
        } else if *name == meta {
            2
        } else {
            1
        }
    });
    names
}

/// A command of one key.
pub(super) fn one(name: &str, key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(key);
    cmd
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
