//! One connection per Redis primary on which Redis tracks what this instance read (`CLIENT TRACKING`, over
//! RESP3): from the moment a key is read on it, Redis pushes an `invalidate` message on the same connection
//! when the key changes (or is deleted, or migrates to another primary), in the same step as the change,
//! before it answers any later command. Also `invalidate` with no key when the database is flushed, and
//! the client's own notice when the connection is lost.
//!
//! A probe on the connection (every [`super::PROBE_EVERY`]) proves that every invalidation Redis sent
//! before it answered has been handled: the push handler runs inside the connection's reader, before the
//! reply that follows it is delivered.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, ConnectionAddr, ProtocolVersion, PushInfo, RedisResult, Value};
use shared::redis_tls::Tls;

/// What a push means for what is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    /// These keys changed.
    Keys(Vec<String>),
    /// Every key of the node changed (a flush).
    All,
    /// The connection is gone: nothing it tracked is known any more.
    Lost,
}

impl Pushed {
    /// What a push message says, `None` for pushes that say nothing about keys.
    pub fn of(info: &PushInfo) -> Option<Self> {
        match info.kind {
            redis::PushKind::Disconnection => Some(Pushed::Lost),
            redis::PushKind::Invalidate => match info.data.first() {
                Some(Value::Array(keys)) => Some(Pushed::Keys(
                    keys.iter()
                        .filter_map(|key| match key {
                            Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                            Value::SimpleString(text) => Some(text.clone()),
                            _ => None,
                        })
                        .collect(),
                )),
                // `invalidate` with a null: FLUSHALL or FLUSHDB.
                _ => Some(Pushed::All),
            },
            _ => None,
        }
    }
}

/// A tracking connection to one primary.
pub struct Node {
    /// Unique among every connection this instance made: what each kept key remembers it was read on.
    pub id: u64,
    /// `host:port`.
    pub address: String,
    conn: MultiplexedConnection,
    alive: AtomicBool,
    /// When the latest probe answered was sent, in milliseconds since the tracker started (0: never).
    vouched_ms: AtomicU64,
    /// On a cluster, a key in one of this primary's slots, and that slot: the probe reads the key, so that
    /// a primary that lost its slots (failed over, demoted) answers with a redirection, not a success.
    probe_key: Option<(String, u16)>,
    /// A probe is on its way.
    probing: AtomicBool,
    timeout: Duration,
}

impl Node {
    /// Connects to `address` as `seed` says (scheme, user, password, TLS), with RESP3 and tracking on;
    /// `pushed` is called with every push of the connection, in order, before any later reply is delivered.
    pub async fn connect(
        id: u64,
        seed: &str,
        address: Option<&str>,
        tls: &Tls,
        timeout: Duration,
        probe_key: Option<(String, Vec<(u16, u16)>)>,
        pushed: impl Fn(Pushed) + Send + Sync + 'static,
    ) -> RedisResult<Self> {
        let info = shared::cluster_pipeline::node_info(seed, address)?;
        let settings = info.redis_settings().clone().set_protocol(ProtocolVersion::RESP3);
        let info = info.set_redis_settings(settings);
        let address = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
            other => other.to_string(),
        };
        let client = shared::cluster_pipeline::client(info, tls)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_push_sender(move |info: PushInfo| {
                if let Some(push) = Pushed::of(&info) {
                    pushed(push);
                }
                Ok::<(), std::convert::Infallible>(())
            });
        let mut conn = client.get_multiplexed_async_connection_with_config(&config).await?;
        redis::cmd("CLIENT").arg("TRACKING").arg("ON").exec_async(&mut conn).await?;
        let probe_key = probe_key.map(|(key, _)| {
            let slot = shared::keys::slot(&key);
            (key, slot)
        });
        Ok(Self {
            id,
            address,
            conn,
            alive: AtomicBool::new(true),
            vouched_ms: AtomicU64::new(0),
            probe_key,
            probing: AtomicBool::new(false),
            timeout,
        })
    }

    /// Whether its probe still reads a key of a slot in `ranges` (the slots it serves now).
    pub fn serves(&self, ranges: &[(u16, u16)]) -> bool {
        self.probe_key.as_ref().is_none_or(|(_, slot)| ranges.iter().any(|(low, high)| (*low..=*high).contains(slot)))
    }

    /// Claims the right to send the next probe: false while one is on its way.
    pub fn start_probe(&self) -> bool {
        !self.probing.swap(true, Ordering::AcqRel)
    }

    pub fn end_probe(&self) {
        self.probing.store(false, Ordering::Release);
    }

    pub fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Marks the connection lost: nothing read on it is trusted any more.
    pub fn lost(&self) {
        self.alive.store(false, Ordering::Release);
    }

    /// When the latest answered probe was sent (ms since the tracker started; 0 when none answered yet).
    pub fn vouched_ms(&self) -> u64 {
        self.vouched_ms.load(Ordering::Acquire)
    }

    /// Runs `cmd` on this node, bounded by the timeout; Redis tracks the keys it reads.
    pub async fn query(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, cmd.query_async(&mut conn)).await {
            Ok(reply) => reply,
            Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
        }
    }

    /// `ASKING` then `cmd`, in one pipeline: a key of a slot that is being imported by this node.
    pub async fn query_asking(&self, cmd: &Cmd) -> RedisResult<Value> {
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").ignore().add_command(cmd.clone());
        let mut conn = self.conn.clone();
        let reply: RedisResult<Vec<Value>> = match tokio::time::timeout(self.timeout, pipe.query_async(&mut conn)).await
        {
            Ok(reply) => reply,
            Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
        };
        Ok(reply?.pop().unwrap_or(Value::Nil))
    }

    /// One probe, sent at `sent_ms`: once answered, every invalidation sent before it has been handled.
    pub async fn probe(&self, sent_ms: u64) -> RedisResult<()> {
        let cmd = match &self.probe_key {
            Some((key, _)) => {
                let mut get = redis::cmd("GET");
                get.arg(key);
                get
            }
            None => redis::cmd("PING"),
        };
        self.query(&cmd).await?;
        self.vouched_ms.fetch_max(sent_ms, Ordering::AcqRel);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidations_name_their_keys_a_flush_names_none_and_a_lost_connection_is_said() {
        let keys = PushInfo {
            kind: redis::PushKind::Invalidate,
            data: vec![Value::Array(vec![Value::BulkString(b"rm:g1:{a}:epoch".to_vec())])],
        };
        assert_eq!(Pushed::of(&keys), Some(Pushed::Keys(vec!["rm:g1:{a}:epoch".into()])));
        let flush = PushInfo { kind: redis::PushKind::Invalidate, data: vec![Value::Nil] };
        assert_eq!(Pushed::of(&flush), Some(Pushed::All));
        let lost = PushInfo { kind: redis::PushKind::Disconnection, data: vec![] };
        assert_eq!(Pushed::of(&lost), Some(Pushed::Lost));
        let other = PushInfo { kind: redis::PushKind::Message, data: vec![] };
        assert_eq!(Pushed::of(&other), None);
    }
}
