//! A canonical dump of one generation of the read model: every key, relative to its prefix and
//! generation, with a type-specific rendering of its value. Two generations hold the same read model
//! exactly when their dumps are equal.

use std::collections::BTreeMap;

use redis::AsyncCommands;
use sha2::Digest;
use shared::Keyspace;

pub async fn dump(conn: &mut redis::aio::MultiplexedConnection, keys: &Keyspace) -> BTreeMap<String, String> {
    let pattern = keys.pattern();
    let strip = pattern.len() - 1;
    let mut names: Vec<String> = Vec::new();
    let mut iter: redis::AsyncIter<String> = conn.scan_match(&pattern).await.expect("scan");
    while let Some(name) = iter.next_item().await {
        names.push(name.expect("key name"));
    }
    drop(iter);
    let mut out = BTreeMap::new();
    for chunk in names.chunks(1000) {
        let mut types = redis::pipe();
        for name in chunk {
            types.cmd("TYPE").arg(name);
        }
        let kinds: Vec<String> = types.query_async(conn).await.expect("types");
        let mut reads = redis::pipe();
        for (name, kind) in chunk.iter().zip(&kinds) {
            match kind.as_str() {
                "string" => reads.cmd("GET").arg(name),
                "hash" => reads.cmd("HGETALL").arg(name),
                "zset" => reads.cmd("ZRANGE").arg(name).arg(0).arg(-1).arg("WITHSCORES"),
                other => reads.cmd("TYPE").arg(name).arg(other),
            };
        }
        let values: Vec<redis::Value> = reads.query_async(conn).await.expect("reads");
        for ((name, kind), value) in chunk.iter().zip(&kinds).zip(values) {
            let rendered = match kind.as_str() {
                "string" => redis::from_redis_value::<String>(value).expect("string"),
                "hash" => format!("{:?}", redis::from_redis_value::<BTreeMap<String, String>>(value).expect("hash")),
                "zset" => format!("{:?}", redis::from_redis_value::<Vec<(String, f64)>>(value).expect("zset")),
                "none" => continue,
                other => panic!("unexpected {other} at {name}"),
            };
            out.insert(name[strip..].to_string(), rendered);
        }
    }
    out
}

/// A SHA-256 over the canonical dump.
pub fn digest(dump: &BTreeMap<String, String>) -> String {
    let mut hasher = sha2::Sha256::new();
    for (k, v) in dump {
        hasher.update((k.len() as u64).to_be_bytes());
        hasher.update(k.as_bytes());
        hasher.update((v.len() as u64).to_be_bytes());
        hasher.update(v.as_bytes());
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
