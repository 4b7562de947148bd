//! A canonical digest of one generation of the read model: order-independent (an XOR of one SHA-256 per
//! key) over every document, index and state, so two generations built from the same events digest alike
//! whatever order they were written in. The projector's bookkeeping (the generation's meta, positions and
//! healing entries) is left out. A state is digested whole, however it is stored: a served interview's
//! state stored without what its document holds (layout 2) is read back from its document first, so a
//! generation written partly in each form (a projector of the release before, or a generation whose meta
//! Redis lost, writes whole states) digests like one written in either. Owners are digested a record each,
//! as the key each was up to layout 2, whichever form holds them ([`shared::owners`]), and once when
//! both do. A document is digested as its JSON, however it is stored (whole, or compressed from layout 5), and
//! a transcript as its WebVTT (whole, or compressed from layout 6).

use redis::{Cmd, RedisResult};
use sha2::{Digest as _, Sha256};
use shared::codec::StoredDocument;
use shared::connection::Connection;
use shared::owners::Record;
use shared::{Keyspace, Topic};

use super::one;
use crate::fold::stored;
use crate::generation::generation_keys;

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
        let mut values = read_values(conn, chunk, &kinds).await?;
        whole_records(keys, chunk, &kinds, &mut values);
        whole_states(conn, keys, chunk, &mut values).await?;
        let twins = owners_also_in_fields(conn, keys, chunk).await?;
        for (((name, kind), parts), twin) in chunk.iter().zip(&kinds).zip(values).zip(twins) {
            if kind == "none" || twin {
                continue;
            }
            if let Some(topic) = keys.owners_of(name).filter(|_| kind == "hash") {
                // Each field as the owner's own key would be: its name, `string`, the organization.
                for pair in parts.chunks(2) {
                    let record = keys.owner(topic, &String::from_utf8_lossy(&pair[0]));
                    add(&mut acc, &record.as_bytes()[strip..], b"string", &pair[1..]);
                    count += 1;
                }
                continue;
            }
            add(&mut acc, &name.as_bytes()[strip..], kind.as_bytes(), &parts);
            count += 1;
        }
    }
    Ok(Digest { keys: count, sha256: hex::encode(acc) })
}

/// For each of `names`, whether it is an owner's key (up to layout 2) whose owner a field of layout 3
/// also records. Both are there when a projector started on a generation whose meta Redis had lost: it
/// read it as layout 1 and recorded as keys the owners it claimed again. Such a key is left out, so
/// that the owner is digested once (one round trip for the chunk).
async fn owners_also_in_fields(conn: &mut Connection, keys: &Keyspace, names: &[String]) -> RedisResult<Vec<bool>> {
    let found: Vec<(usize, Cmd)> = names
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            let (topic, id) = keys.owner_of(name)?;
            Some((i, super::owners::read(&Record::of(keys, topic, id, shared::owners::BUCKETED_FROM_LAYOUT))))
        })
        .collect();
    let mut twins = vec![false; names.len()];
    if found.is_empty() {
        return Ok(twins);
    }
    let reads: Vec<Cmd> = found.iter().map(|(_, cmd)| cmd.clone()).collect();
    for ((i, _), field) in found.iter().zip(conn.query_all(&reads).await?) {
        twins[*i] = redis::from_redis_value::<Option<String>>(field).map_err(to_redis)?.is_some();
    }
    Ok(twins)
}

/// XORs one key's SHA-256 (its name, type and value's parts) into the digest.
fn add(acc: &mut [u8; 32], name: &[u8], kind: &[u8], parts: &[Vec<u8>]) {
    let mut hasher = Sha256::new();
    field(&mut hasher, name);
    field(&mut hasher, kind);
    for part in parts {
        field(&mut hasher, part);
    }
    for (a, b) in acc.iter_mut().zip(hasher.finalize()) {
        *a ^= b;
    }
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

/// Replaces every record stored compressed by what it holds: a document (layout 5 on) by its JSON, a
/// served interview's transcript (layout 6 on) by its WebVTT, so that records digest alike in either form.
/// One that does not read is digested as it is stored: unlike any record.
fn whole_records(keys: &Keyspace, names: &[String], kinds: &[String], values: &mut [Vec<Vec<u8>>]) {
    for ((name, kind), parts) in names.iter().zip(kinds).zip(values) {
        match kind.as_str() {
            "hash" if keys.is_documents(name) => {
                for value in parts.iter_mut().skip(1).step_by(2) {
                    if shared::codec::is_compressed(value) {
                        if let Ok(json) = shared::codec::document(value) {
                            *value = json.into_owned().into_bytes();
                        }
                    }
                }
            }
            // The only strings stored compressed are transcripts.
            "string" => {
                if let Some(value) = parts.first_mut().filter(|v| shared::codec::is_compressed(v)) {
                    if let Ok(webvtt) = shared::codec::transcript(value) {
                        *value = webvtt.into_owned().into_bytes();
                    }
                }
            }
            _ => {}
        }
    }
}

/// Replaces every interview state stored without what its document holds by the whole state, read back
/// from its document (one round trip for the chunk).
async fn whole_states(
    conn: &mut Connection,
    keys: &Keyspace,
    names: &[String],
    values: &mut [Vec<Vec<u8>>],
) -> RedisResult<()> {
    // The sorted field-value pairs of a state's hash: `seq`, its value, `state`, its value.
    let served = |parts: &[Vec<u8>]| parts.len() == 4 && parts[2] == b"state" && stored::is_served(&parts[3]);
    let found: Vec<(usize, String, &str)> = names
        .iter()
        .enumerate()
        .filter(|(i, _)| served(&values[*i]))
        .filter_map(|(i, name)| keys.documents_of_interview_state(name).map(|(documents, id)| (i, documents, id)))
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    let reads: Vec<Cmd> = found.iter().map(|(_, documents, id)| one("HGET", documents).arg(*id).clone()).collect();
    let documents = conn.query_all(&reads).await?;
    for ((i, _, _), document) in found.iter().zip(documents) {
        let document: Option<String> =
            redis::from_redis_value::<Option<StoredDocument>>(document).map_err(to_redis)?.map(|d| d.0);
        let state = String::from_utf8_lossy(&values[*i][3]).into_owned();
        // One that does not read is digested as it is stored: unlike any whole state.
        if let Ok(whole) = stored::decode(Topic::Interview, &state, document.as_deref()) {
            values[*i][3] = serde_json::to_vec(&whole).expect("state always serializes");
        }
    }
    Ok(())
}

fn to_redis(e: redis::ParsingError) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::other(e.to_string()))
}
