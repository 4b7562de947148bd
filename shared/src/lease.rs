//! A lease in Redis: one key holding the token of whoever holds it, with a TTL its holder keeps renewing,
//! so that a holder that died lets go by itself. The rebuild lock, a repair's hold on an organization's
//! writes and its lease on the organization are all this one type.
//!
//! What a renewal does when it finds the key gone (Redis lost it, or the holder stalled past the TTL) is
//! the one choice a lease makes ([`OnLapse`]): a rebuild takes its lock again (it reads again what Redis
//! lost), but a repair must not: live writes may have been made in the gap, and a hold taken again would
//! let the repair's swap overwrite them. A lapsed lease stays lost, and its holder asks
//! [`Lease::is_lost`] or [`Lease::check`] before it acts on what the lease protected.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisResult, Script};

use crate::connection::Connection;
use crate::task::AbortOnDrop;

/// What a renewal does when it finds the lease gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLapse {
    /// Take it again, unless another holder took it meanwhile.
    TakeAgain,
    /// The lease is lost for good: its holder must stop.
    Lost,
}

/// Extends the lease held (1); takes it again when it is gone and `ARGV[3]` allows (2); else it is lost (0).
const RENEW: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not holder and ARGV[3] == '1' then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 2 end
return 0
";

/// Extends the lease held (1); takes it over from the earlier holder `ARGV[3]` (1); else another holds it
/// (0).
const TAKE_OVER: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if holder == ARGV[3] then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0
";

/// Deletes the lease if it is still this token's.
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

struct Held {
    key: String,
    token: String,
    ttl: Duration,
    on_lapse: OnLapse,
    lost: AtomicBool,
}

/// A lease this process holds, renewed in the background every quarter of its TTL until dropped or
/// released. Dropping it stops the renewal (the key then expires); [`Lease::release`] deletes it.
pub struct Lease {
    held: Arc<Held>,
    renewal: AbortOnDrop,
}

impl Lease {
    /// Takes `key` for `token` unless someone else holds it (`None` then), and starts renewing it. A
    /// lease `token` already holds (a run that failed and is tried again with its token) is taken as is.
    pub async fn try_take(
        conn: &mut Connection,
        key: &str,
        token: &str,
        ttl: Duration,
        on_lapse: OnLapse,
    ) -> RedisResult<Option<Lease>> {
        Self::take_over(conn, key, token, None, ttl, on_lapse).await
    }

    /// [`Lease::try_take`], also taking the lease from `earlier` when that token holds it: a run tried
    /// again under a token of its own takes what its failed run left, and a late call of that run, which
    /// carries the earlier token, finds the lease no longer its own.
    pub async fn take_over(
        conn: &mut Connection,
        key: &str,
        token: &str,
        earlier: Option<&str>,
        ttl: Duration,
        on_lapse: OnLapse,
    ) -> RedisResult<Option<Lease>> {
        let taken: bool = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(conn)
            .await?;
        if !taken {
            let ttl_ms = ttl.as_millis() as u64;
            // Ours already (taken as is), or the earlier run's (taken over).
            let (script, from) = match earlier {
                Some(earlier) => (Script::new(TAKE_OVER), earlier),
                None => (Script::new(RENEW), "0"),
            };
            let ours: i64 = script.key(key).arg(token).arg(ttl_ms).arg(from).invoke_async(conn).await?;
            if ours != 1 {
                return Ok(None);
            }
        }
        let held = Arc::new(Held {
            key: key.to_string(),
            token: token.to_string(),
            ttl,
            on_lapse,
            lost: AtomicBool::new(false),
        });
        let renewal = AbortOnDrop::spawn(renew(conn.clone(), held.clone()));
        Ok(Some(Lease { held, renewal }))
    }

    pub fn key(&self) -> &str {
        &self.held.key
    }

    pub fn token(&self) -> &str {
        &self.held.token
    }

    /// Whether a renewal found the lease gone (and not taken again) or held by another.
    pub fn is_lost(&self) -> bool {
        self.held.lost.load(Ordering::Acquire)
    }

    /// Asks Redis whether the lease is still this holder's; a lease found lost stays lost.
    pub async fn check(&self, conn: &mut Connection) -> RedisResult<bool> {
        let holder: Option<String> = redis::cmd("GET").arg(&self.held.key).query_async(conn).await?;
        if holder.as_deref() != Some(self.held.token.as_str()) {
            self.held.lost.store(true, Ordering::Release);
        }
        Ok(!self.is_lost())
    }

    /// Stops renewing and deletes the lease if it is still this holder's.
    pub async fn release(self, conn: &mut Connection) -> RedisResult<()> {
        let Lease { held, renewal } = self;
        drop(renewal);
        let _: i64 = Script::new(RELEASE).key(&held.key).arg(&held.token).invoke_async(conn).await?;
        Ok(())
    }
}

async fn renew(mut conn: Connection, held: Arc<Held>) {
    let script = Script::new(RENEW);
    let again = if held.on_lapse == OnLapse::TakeAgain { "1" } else { "0" };
    loop {
        tokio::time::sleep(held.ttl / 4).await;
        let renewed: RedisResult<i64> = script
            .key(&held.key)
            .arg(&held.token)
            .arg(held.ttl.as_millis() as u64)
            .arg(again)
            .invoke_async(&mut conn)
            .await;
        match renewed {
            Ok(0) => {
                tracing::error!(lease = %held.key, "the lease lapsed or is held by another; stopping");
                held.lost.store(true, Ordering::Release);
                return;
            }
            Ok(2) => tracing::warn!(lease = %held.key, "Redis lost the lease; taken again"),
            Ok(_) => {}
            Err(e) => tracing::warn!(lease = %held.key, error = %e, "could not renew the lease"),
        }
    }
}
