//! A canonical dump of one generation of the read model: every key, relative to its prefix and
//! generation, with a type-specific rendering of its value (a document as its JSON, a transcript as its WebVTT, in
//! either stored form).
//! Two generations hold the same read model exactly when their dumps are equal.

use std::collections::BTreeMap;

use redis::Cmd;
use sha2::Digest;
use shared::codec::StoredDocument;
use shared::connection::Connection;
use shared::Keyspace;

pub async fn dump(conn: &mut Connection, keys: &Keyspace) -> BTreeMap<String, String> {
    let pattern = keys.pattern();
    let strip = pattern.len() - 1;
    // The projector's bookkeeping (positions, healing entries, meta) is not the read model.
    let names: Vec<String> =
        conn.scan(&pattern).await.expect("scan").into_iter().filter(|name| !keys.is_bookkeeping(name)).collect();
    let mut out = BTreeMap::new();
    for chunk in names.chunks(1000) {
        let types: Vec<Cmd> = chunk.iter().map(|name| command(&["TYPE", name])).collect();
        let kinds: Vec<String> = conn
            .query_all(&types)
            .await
            .expect("types")
            .into_iter()
            .map(|kind| redis::from_redis_value(kind).expect("type name"))
            .collect();
        let reads: Vec<Cmd> = chunk
            .iter()
            .zip(&kinds)
            .map(|(name, kind)| {
                let cmd = match kind.as_str() {
                    "string" => command(&["GET", name]),
                    "hash" => command(&["HGETALL", name]),
                    "zset" => command(&["ZRANGE", name, "0", "-1", "WITHSCORES"]),
                    _ => command(&["TYPE", name]),
                };
                cmd
            })
            .collect();
        let values = conn.query_all(&reads).await.expect("reads");
        for ((name, kind), value) in chunk.iter().zip(&kinds).zip(values) {
            let rendered = match kind.as_str() {
                // Transcripts as their WebVTT, however they are stored (compressed from layout 6).
                "string" => shared::codec::transcript_owned(redis::from_redis_value::<Vec<u8>>(value).expect("string"))
                    .expect("a string of the read model reads"),
                // Documents as their JSON, however they are stored (compressed from layout 5).
                "hash" if keys.is_documents(name) => {
                    let documents =
                        redis::from_redis_value::<BTreeMap<String, StoredDocument>>(value).expect("documents");
                    format!("{:?}", documents.into_iter().map(|(id, doc)| (id, doc.0)).collect::<BTreeMap<_, _>>())
                }
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

fn command(parts: &[&str]) -> Cmd {
    let mut cmd = redis::cmd(parts[0]);
    for part in &parts[1..] {
        cmd.arg(*part);
    }
    cmd
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
