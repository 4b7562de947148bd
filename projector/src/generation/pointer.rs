//! The two keys that say which generation is which: the active generation's pointer
//! (`P:active-generation`, the one the API serves and the live projectors write) and the counter of
//! generations ever handed out (`P:generation-counter`). Every read and write of either is here, under
//! two rules:
//!
//! - they only go forward ([`raise`], [`next`]): a late writer (a rebuild whose lock lapsed, a projector
//!   that had not followed a switch) never moves them back;
//! - their absence is never evidence: Redis may have lost either with its primary. A command that needs
//!   the active generation and finds none refuses ([`required`]); only a projector's start, which first
//!   looks for the generations Redis holds, begins a read model ([`first`]).

use redis::aio::ConnectionLike;
use redis::RedisResult;
use shared::Keyspace;

use crate::Error;

/// Sets a generation key to ARGV[1] unless it holds as much already: generations only go forward, and
/// one found behind (a restore of Redis) is put back. 1: set; 0: it held ARGV[1]; -1: it held more.
const RAISE: &str = r"
local now = tonumber(redis.call('GET', KEYS[1]))
local generation = tonumber(ARGV[1])
if not now or now < generation then redis.call('SET', KEYS[1], ARGV[1]) return 1 end
if now == generation then return 0 end
return -1
";

/// Hands out the generation after the counter and ARGV[1], whichever is higher, and records it.
const NEXT: &str =
    "local n = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(ARGV[1])) + 1 redis.call('SET', KEYS[1], n) return n";

/// Both pointers as read, each `None` when missing (none yet, or Redis lost it: never evidence of either).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pointers {
    /// The generation the API serves.
    pub active: Option<u64>,
    /// The last generation handed out.
    pub counter: Option<u64>,
}

impl Pointers {
    /// Reads both, one command each (they may sit on different primaries of a cluster).
    pub async fn read<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<Self> {
        Ok(Self { active: active(conn, prefix).await?, counter: counter(conn, prefix).await? })
    }
}

/// The active generation, as the pointer says (`None`: no read model yet, or Redis lost the pointer).
pub async fn active<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<Option<u64>> {
    redis::cmd("GET").arg(Keyspace::active_generation(prefix)).query_async(conn).await
}

/// The active generation, for a command that works on it: refused when the pointer is missing, rather
/// than taken for generation 1 (which would make the API serve a generation that may hold nothing).
pub async fn required<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> Result<u64, Error> {
    active(conn, prefix).await?.ok_or_else(|| Error::NoActiveGeneration { key: Keyspace::active_generation(prefix) })
}

/// The generation a new read model begins with: the active one, set to 1 if there is none yet. Only a
/// projector's start calls it, once it found no generation in Redis.
pub async fn first<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<u64> {
    let key = Keyspace::active_generation(prefix);
    let (generation,): (u64,) =
        redis::pipe().cmd("SET").arg(&key).arg(1).arg("NX").ignore().cmd("GET").arg(&key).query_async(conn).await?;
    Ok(generation)
}

/// The last generation handed out, as the counter says (`None`: none yet, or Redis lost it).
pub async fn counter<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> RedisResult<Option<u64>> {
    redis::cmd("GET").arg(Keyspace::generation_counter(prefix)).query_async(conn).await
}

/// What [`raise`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raised {
    /// The pointer named an older generation, or none; it names `generation` now.
    Now,
    /// The pointer named `generation` already: a raise made before, whose reply was lost (a timeout).
    Already,
    /// The pointer names a later generation.
    Past,
}

/// Puts the active pointer forward to `generation`, never back.
pub async fn raise<C: ConnectionLike + Send>(conn: &mut C, prefix: &str, generation: u64) -> RedisResult<Raised> {
    raise_key(conn, &Keyspace::active_generation(prefix), generation).await
}

/// Puts both the active pointer and the counter forward to `generation` (a projector that marks a loss
/// of its generation: the loss may have taken them, or set them back).
pub async fn raise_both<C: ConnectionLike + Send>(conn: &mut C, prefix: &str, generation: u64) -> RedisResult<()> {
    for key in [Keyspace::active_generation(prefix), Keyspace::generation_counter(prefix)] {
        raise_key(conn, &key, generation).await?;
    }
    Ok(())
}

async fn raise_key<C: ConnectionLike + Send>(conn: &mut C, key: &str, generation: u64) -> RedisResult<Raised> {
    let raised: i64 = redis::Script::new(RAISE).key(key).arg(generation).invoke_async(conn).await?;
    Ok(match raised {
        1 => Raised::Now,
        0 => Raised::Already,
        _ => Raised::Past,
    })
}

/// Hands out a new generation: above the counter and above `above` (the active generation, an abandoned
/// rebuild's), so that a counter Redis lost or set back never hands out one that holds keys.
pub async fn next<C: ConnectionLike + Send>(conn: &mut C, prefix: &str, above: u64) -> RedisResult<u64> {
    redis::Script::new(NEXT).key(Keyspace::generation_counter(prefix)).arg(above).invoke_async(conn).await
}
