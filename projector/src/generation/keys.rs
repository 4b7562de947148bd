//! Which generations Redis holds, every key of one, and deleting one: the positions first, so that a
//! deletion stopped halfway is a loss the live projectors see, and the meta last.

use shared::connection::{Connection, Node};
use shared::Keyspace;

use super::pointer;
use crate::store::{one, position};

/// The generations from 1 to `last` whose meta or positions on some primary exist, asked in one round of
/// `EXISTS`.
pub async fn holding_keys(conn: &mut Connection, prefix: &str, last: u64) -> redis::RedisResult<Vec<u64>> {
    let nodes: Vec<Node> = conn.nodes().await?;
    let mut probes = Vec::new();
    for generation in 1..=last {
        let keys = Keyspace::new(prefix.to_string(), generation);
        let names = std::iter::once(keys.meta()).chain(nodes.iter().map(|node| position::key_on(&keys, node)));
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

/// Every generation under `prefix` whose meta or positions on some primary exist, found without
/// the pointers that name one: Redis can lose the active pointer and the counter with their primaries,
/// and a primary restarted from an older snapshot sets the counter back below generations that hold keys
/// (counted up to it, a walk would begin a generation beside the real one). So always by `SCAN` over every
/// primary, for the metas and positions alone (the server walks the whole keyspace; the projector holds a
/// few keys per generation). Only a start that found no active pointer asks: at a read model's very first
/// start, and after such a loss. Empty: Redis holds no generation.
pub async fn all_holding_keys(
    conn: &mut Connection,
    prefix: &str,
) -> redis::RedisResult<std::collections::BTreeSet<u64>> {
    let mut found = std::collections::BTreeSet::new();
    let base = format!("{prefix}:g");
    for pattern in [format!("{base}*:meta"), format!("{base}*:position")] {
        for key in conn.scan(&pattern).await? {
            let generation = key.strip_prefix(&base).and_then(|rest| rest.split(':').next());
            if let Some(generation) = generation.and_then(|g| g.parse::<u64>().ok()) {
                found.insert(generation);
            }
        }
    }
    Ok(found)
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
/// `retire`). The positions go first, so that a deletion stopped halfway is a loss the live
/// projectors see, not a hole they would write around; the meta goes last. `Ok(Err(pointer))`: the pointer it stopped at.
pub async fn delete_generation_while(
    conn: &mut Connection,
    retired: &Keyspace,
    deletes: impl Fn(Option<u64>) -> bool,
) -> redis::RedisResult<Result<usize, Option<u64>>> {
    let names = in_deletion_order(generation_keys(conn, retired).await?, retired);
    for chunk in names.chunks(500) {
        let active = pointer::active(conn, retired.prefix()).await?;
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
