//! How live projectors and a rebuild coordinate through Redis, with no other channel between them.
//!
//! Every live projector reports itself in `P:projectors` (its generation, whether it is paused, a
//! heartbeat) and reads the active generation and the rebuild's phase a few times a second. When a
//! rebuild reaches its `handover` phase, each live projector commits what it applied and pauses; once
//! every live projector is paused, the rebuild catches up with their committed offsets and switches the
//! active generation; each live projector then follows it and resumes from its committed offsets. If the
//! rebuild dies during the handover (its lock expires), live projectors resume on their old generation.

use std::collections::HashMap;

use redis::aio::ConnectionLike;
use redis::RedisResult;
use serde::{Deserialize, Serialize};
use shared::Keyspace;

/// A live projector not heard from for this long is taken for gone.
pub const INSTANCE_TIMEOUT_SECS: f64 = 5.0;

/// The phases of a rebuild, as stored in `P:rebuild`.
pub const BUILDING: &str = "building";
pub const HANDOVER: &str = "handover";

/// What a live projector reports about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Instance {
    pub group: String,
    pub generation: u64,
    pub paused: bool,
    /// Unix time of this report.
    pub heartbeat: f64,
    /// Unix time of the last batch applied.
    pub last_progress: f64,
    /// How many partitions the consumer group has assigned to this instance.
    #[serde(default)]
    pub partitions: usize,
}

/// What a live projector reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signals {
    pub active: Option<u64>,
    /// The generation a live rebuild is handing over to.
    pub handover: Option<u64>,
}

/// The state of the running rebuild, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuild {
    pub generation: Option<u64>,
    pub group: Option<String>,
    pub phase: Option<String>,
    pub locked: bool,
}

/// The fields of `P:rebuild` as read.
type RebuildFields = (Option<u64>, Option<String>, Option<String>);

pub async fn rebuild<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<Rebuild> {
    // Two commands, not one pipeline: the keys sit in different slots of a cluster.
    let (generation, group, phase): RebuildFields = redis::cmd("HMGET")
        .arg(Keyspace::rebuild(prefix))
        .arg("generation")
        .arg("group")
        .arg("phase")
        .query_async(conn)
        .await?;
    let locked: bool = redis::cmd("EXISTS").arg(Keyspace::rebuild_lock(prefix)).query_async(conn).await?;
    Ok(Rebuild { generation, group, phase, locked })
}

pub async fn signals<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<Signals> {
    let active: Option<u64> = redis::cmd("GET").arg(Keyspace::active_generation(prefix)).query_async(conn).await?;
    let rebuild = rebuild(conn, prefix).await?;
    let handover = match (rebuild.phase.as_deref(), rebuild.locked) {
        (Some(HANDOVER), true) => rebuild.generation,
        _ => None,
    };
    Ok(Signals { active, handover })
}

/// Reports this instance and reads every live projector (this one included) in one round trip: both
/// commands touch the same key, so they stay one pipeline on a cluster too.
pub async fn report<C: ConnectionLike + Send>(
    conn: &mut C,
    prefix: &str,
    id: &str,
    instance: &Instance,
) -> RedisResult<HashMap<String, Instance>> {
    let json = serde_json::to_string(instance).expect("instance state serializes");
    let (all,): (HashMap<String, String>,) = redis::pipe()
        .cmd("HSET")
        .arg(Keyspace::projectors(prefix))
        .arg(id)
        .arg(json)
        .ignore()
        .cmd("HGETALL")
        .arg(Keyspace::projectors(prefix))
        .query_async(conn)
        .await?;
    live(conn, prefix, all).await
}

pub async fn leave<C: ConnectionLike + Send>(conn: &mut C, prefix: &str, id: &str) -> RedisResult<()> {
    redis::cmd("HDEL").arg(Keyspace::projectors(prefix)).arg(id).query_async(conn).await
}

/// Live projectors heard from recently, by instance id; older entries are removed.
pub async fn instances<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<HashMap<String, Instance>> {
    let all: HashMap<String, String> =
        redis::cmd("HGETALL").arg(Keyspace::projectors(prefix)).query_async(conn).await?;
    live(conn, prefix, all).await
}

/// The reports heard from recently; older or unreadable ones are removed.
async fn live<C: ConnectionLike + Send>(
    conn: &mut C,
    prefix: &str,
    all: HashMap<String, String>,
) -> RedisResult<HashMap<String, Instance>> {
    let now = crate::metrics::now();
    let mut live = HashMap::new();
    for (id, json) in all {
        match serde_json::from_str::<Instance>(&json) {
            Ok(instance) if now - instance.heartbeat < INSTANCE_TIMEOUT_SECS => {
                live.insert(id, instance);
            }
            _ => leave(conn, prefix, &id).await?,
        }
    }
    Ok(live)
}
