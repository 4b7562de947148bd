//! How live projectors and a rebuild coordinate through Redis, with no other channel between them.
//!
//! Every live projector reports itself ([`crate::run::members`]) and reads the active generation and the
//! rebuild's phase a few times a second. When a rebuild reaches its `handover` phase, each live projector
//! commits what it applied, records it as its generation's positions and pauses; once every live projector
//! is paused, the rebuild catches up with what they applied and switches the active generation; each live
//! projector then follows it and resumes where it was. If the rebuild dies during the handover (its lock
//! expires), live projectors resume on their old generation.

use redis::aio::ConnectionLike;
use redis::RedisResult;
use shared::Keyspace;

/// The phases of a rebuild, as stored in `P:rebuild`.
pub const BUILDING: &str = "building";
pub const HANDOVER: &str = "handover";

/// What a live projector reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Signals {
    pub active: Option<u64>,
    /// The generation a live rebuild is handing over to.
    pub handover: Option<u64>,
}

/// The state of the running rebuild, if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebuildState {
    pub generation: Option<u64>,
    pub group: Option<String>,
    pub phase: Option<String>,
    pub locked: bool,
}

/// The fields of `P:rebuild` as read.
type RebuildFields = (Option<u64>, Option<String>, Option<String>);

pub async fn rebuild_state<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<RebuildState> {
    // Two commands, not one pipeline: the keys sit in different slots of a cluster.
    let (generation, group, phase): RebuildFields = redis::cmd("HMGET")
        .arg(Keyspace::rebuild(prefix))
        .arg("generation")
        .arg("group")
        .arg("phase")
        .query_async(conn)
        .await?;
    let locked: bool = redis::cmd("EXISTS").arg(Keyspace::rebuild_lock(prefix)).query_async(conn).await?;
    Ok(RebuildState { generation, group, phase, locked })
}

/// The rebuild's phase first, then the active pointer: a rebuild switches before its state and lock go,
/// so a handover read as over is followed by a read of the pointer that shows its switch, if it made one.
/// Read the other way round, a switch landing between the reads looks like a handover that ended without
/// one (the old pointer, no handover), and the paused projector would resume on the old generation.
pub async fn signals<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<Signals> {
    let rebuild = rebuild_state(conn, prefix).await?;
    let active = super::pointer::active(conn, prefix).await?;
    let handover = match (rebuild.phase.as_deref(), rebuild.locked) {
        (Some(HANDOVER), true) => rebuild.generation,
        _ => None,
    };
    Ok(Signals { active, handover })
}
