//! A canonical digest of one generation of the read model: order-independent (an XOR of one SHA-256 per
//! key) over every document, index and state, so two generations built from the same events digest alike
//! whatever order they were written in. The generation's own `meta` key is left out.

use redis::{Cmd, RedisResult, Value};
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
        compute(conn, keys).await
    }
}

async fn compute(conn: &mut Connection, keys: &Keyspace) -> RedisResult<Digest> {
    let meta = keys.meta();
    let names: Vec<String> = generation_keys(conn, keys).await?.into_iter().filter(|k| *k != meta).collect();
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
        let reads: Vec<Cmd> = chunk
            .iter()
            .zip(&kinds)
            .map(|(name, kind)| {
                let cmd = match kind.as_str() {
                    "hash" => one("HGETALL", name),
                    "zset" => {
                        let mut cmd = one("ZRANGE", name);
                        cmd.arg(0).arg(-1).arg("WITHSCORES");
                        cmd
                    }
                    _ => one("GET", name),
                };
                cmd
            })
            .collect();
        let values = conn.query_all(&reads).await?;
        for ((name, kind), value) in chunk.iter().zip(&kinds).zip(values) {
            if kind == "none" {
                continue;
            }
            let mut hasher = Sha256::new();
            field(&mut hasher, &name.as_bytes()[strip..]);
            field(&mut hasher, kind.as_bytes());
            for part in canonical(kind, value)? {
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

/// The parts of a value in an order that does not depend on how it was written.
fn canonical(kind: &str, value: Value) -> RedisResult<Vec<Vec<u8>>> {
    Ok(match kind {
        "hash" => {
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::from_redis_value(value).map_err(to_redis)?;
            pairs.sort();
            pairs.into_iter().flat_map(|(k, v)| [k, v]).collect()
        }
        "zset" => {
            let mut members: Vec<(Vec<u8>, String)> = redis::from_redis_value(value).map_err(to_redis)?;
            members.sort();
            members.into_iter().flat_map(|(m, s)| [m, s.into_bytes()]).collect()
        }
        _ => vec![redis::from_redis_value::<Option<Vec<u8>>>(value).map_err(to_redis)?.unwrap_or_default()],
    })
}

fn to_redis(e: redis::ParsingError) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::other(e.to_string()))
}
