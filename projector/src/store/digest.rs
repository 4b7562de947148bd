//! A canonical digest of one generation of the read model: order-independent (an XOR of one SHA-256 per
//! key) over every document, index and state, so two generations built from the same events digest alike
//! whatever order they were written in. The projector's bookkeeping (the generation's meta, positions and
//! healing entries) is left out.

use redis::{Cmd, RedisResult};
use sha2::{Digest as _, Sha256};
use shared::connection::Connection;
use shared::Keyspace;

use super::generation::{generation_keys, one};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    pub keys: u64,
    pub sha256: String,
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({} keys)", self.sha256, self.keys)
    }
}

impl Digest {
    /// The digest of the generation `keys` names.
    pub async fn of(conn: &mut Connection, keys: &Keyspace) -> RedisResult<Digest> {
        let names = generation_keys(conn, keys).await?;
        compute(conn, keys, names).await
    }

    /// The digest of one organization's slot in the generation `keys` names: its studies, interviews and
    /// transcripts (its API keys live in the key index's slot). What a repair of it must leave equal to
    /// a build from scratch.
    pub async fn of_organization(conn: &mut Connection, keys: &Keyspace, org: &str) -> RedisResult<Digest> {
        let names = conn.scan(&keys.org_pattern(org)).await?;
        compute(conn, keys, names).await
    }
}

async fn compute(conn: &mut Connection, keys: &Keyspace, names: Vec<String>) -> RedisResult<Digest> {
    let mut names: Vec<String> = names.into_iter().filter(|k| !keys.is_bookkeeping(k)).collect();
    names.sort();
    let strip = keys.pattern().len() - 1;
    let mut acc = [0u8; 32];
    let mut count = 0;
    for chunk in names.chunks(500) {
        let types: Vec<Cmd> = chunk.iter().map(|name| one("TYPE", name)).collect();
        let kinds: Vec<String> = conn
            .query_all(&types)
            .await?
            .into_iter()
            .map(redis::from_redis_value)
            .collect::<Result<_, _>>()
            .map_err(to_redis)?;
        let values = read_values(conn, chunk, &kinds).await?;
        for ((name, kind), parts) in chunk.iter().zip(&kinds).zip(values) {
            if kind == "none" {
                continue;
            }
            let mut hasher = Sha256::new();
            field(&mut hasher, &name.as_bytes()[strip..]);
            field(&mut hasher, kind.as_bytes());
            for part in parts {
                field(&mut hasher, &part);
            }
            for (a, b) in acc.iter_mut().zip(hasher.finalize()) {
                *a ^= b;
            }
            count += 1;
        }
    }
    Ok(Digest { keys: count, sha256: hex::encode(acc) })
}

fn field(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

/// One HSCAN or ZSCAN reply: the next cursor, and field-value (or member-score) pairs.
type ScanPage = (String, Vec<(Vec<u8>, Vec<u8>)>);

/// How many fields or members one HSCAN or ZSCAN call asks for.
const SCAN_COUNT: usize = 1000;

/// The parts of each key's value, in an order that does not depend on how it was written: a hash's fields
/// and a sorted set's members (with scores) sorted, a string as it is. Hashes and sorted sets are read
/// with HSCAN and ZSCAN, a page at a time, so a large one never makes one multi-megabyte reply: the first
/// page of every key of the chunk in one round trip, further pages per key.
async fn read_values(conn: &mut Connection, names: &[String], kinds: &[String]) -> RedisResult<Vec<Vec<Vec<u8>>>> {
    let scan = |kind: &str, name: &str, cursor: &str| {
        let mut cmd = one(if kind == "hash" { "HSCAN" } else { "ZSCAN" }, name);
        cmd.arg(cursor).arg("COUNT").arg(SCAN_COUNT);
        cmd
    };
    let first: Vec<Cmd> = names
        .iter()
        .zip(kinds)
        .map(|(name, kind)| match kind.as_str() {
            "hash" | "zset" => scan(kind, name, "0"),
            _ => one("GET", name),
        })
        .collect();
    let replies = conn.query_all(&first).await?;
    let mut values = Vec::with_capacity(names.len());
    for ((name, kind), reply) in names.iter().zip(kinds).zip(replies) {
        if kind != "hash" && kind != "zset" {
            values.push(vec![redis::from_redis_value::<Option<Vec<u8>>>(reply).map_err(to_redis)?.unwrap_or_default()]);
            continue;
        }
        // Field → value (or member → score); a page may repeat an entry, which the map absorbs.
        let mut entries = std::collections::BTreeMap::new();
        let (mut cursor, mut page): ScanPage = redis::from_redis_value(reply).map_err(to_redis)?;
        loop {
            entries.extend(page);
            if cursor == "0" {
                break;
            }
            let reply = scan(kind, name, &cursor).query_async(conn).await?;
            (cursor, page) = redis::from_redis_value(reply).map_err(to_redis)?;
        }
        values.push(entries.into_iter().flat_map(|(k, v)| [k, v]).collect());
    }
    Ok(values)
}

fn to_redis(e: redis::ParsingError) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::other(e.to_string()))
}
