//! A batch of independent commands sent to a Redis Cluster as one pipeline per primary, every primary at
//! once, rather than one request per command: a batch of the write path then costs a cluster about what it
//! costs one Redis (each command is still atomic on its own, in its own slot).
//!
//! A command a primary redirects is sent again where it belongs, until every command has its answer:
//! after `MOVED` (its slot moved), to the primary that serves the slot now, the slot map read again; after
//! `ASK` (its slot is being moved and its keys are already on the importing primary), to that primary,
//! preceded by `ASKING` in the same pipeline, the one command `ASKING` lets in; after `TRYAGAIN` (a move
//! split its keys), a little later. The client's own cluster pipelines retry a redirection without waiting
//! and send `ASKING` as a request of its own, which a busy connection can separate from its command.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult, ServerErrorKind, Value,
};

use crate::cluster_nodes;
use crate::redis_tls::Tls;

/// How many times a command may be redirected or told to try again before the batch fails (the caller
/// tries the whole batch again later: every write of the projector is idempotent).
const ROUNDS: usize = 20;

/// How to reach the node at `address` (`host:port`; the seed's own when `None`) with the scheme,
/// credentials and TLS settings of `seed` (one of the cluster's URLs).
pub fn node_info(seed: &str, address: Option<&str>) -> RedisResult<ConnectionInfo> {
    let info = seed.into_connection_info()?;
    let Some(address) = address else { return Ok(info) };
    let (host, port) = match address.rsplit_once(':') {
        Some((host, port)) => {
            (host.trim_start_matches('[').trim_end_matches(']').to_string(), port.parse().unwrap_or(6379))
        }
        None => (address.to_string(), 6379),
    };
    let addr = match info.addr() {
        ConnectionAddr::TcpTls { insecure, .. } => {
            ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: None }
        }
        _ => ConnectionAddr::Tcp(host, port),
    };
    Ok(info.set_addr(addr))
}

/// A client of `info`, trusting and presenting what `tls` holds on `rediss://`.
pub fn client(info: ConnectionInfo, tls: &Tls) -> RedisResult<redis::Client> {
    match tls.certificates() {
        Some(certificates) => redis::Client::build_with_tls(info, certificates.clone()),
        None => redis::Client::open(info),
    }
}

/// Which primary serves each slot, as `CLUSTER SLOTS` last said.
#[derive(Default)]
struct SlotMap {
    addresses: Vec<String>,
    /// For each primary of `addresses`, the slot ranges it serves.
    ranges: Vec<Vec<(u16, u16)>>,
    /// For each slot, an index into `addresses` (`u16::MAX`: none).
    owners: Vec<u16>,
}

impl SlotMap {
    fn of(reply: &Value) -> Self {
        let mut map = Self { addresses: Vec::new(), ranges: Vec::new(), owners: vec![u16::MAX; 16384] };
        for primary in cluster_nodes::serving(reply) {
            let index = map.addresses.len() as u16;
            map.addresses.push(primary.address());
            map.ranges.push(primary.slots.clone());
            for (low, high) in primary.slots {
                for slot in low..=high.min(16383) {
                    map.owners[slot as usize] = index;
                }
            }
        }
        map
    }

    fn serving(&self, slot: u16) -> Option<&str> {
        self.addresses.get(*self.owners.get(slot as usize)? as usize).map(String::as_str)
    }

    fn ranges_serving(&self, slot: u16) -> Option<&[(u16, u16)]> {
        self.ranges.get(*self.owners.get(slot as usize)? as usize).map(Vec::as_slice)
    }
}

/// Where a command goes next.
#[derive(Clone)]
enum Route {
    /// To the primary the slot map says serves its slot.
    Slot,
    /// To this primary, with `ASKING` first.
    Ask(String),
}

/// The per-primary connections of a cluster and its slot map.
pub struct Pipelines {
    seed: String,
    tls: Tls,
    timeout: Duration,
    map: RwLock<Option<Arc<SlotMap>>>,
    conns: tokio::sync::Mutex<HashMap<String, MultiplexedConnection>>,
}

impl Pipelines {
    pub fn new(seed: &str, tls: &Tls, timeout: Duration) -> Self {
        Self {
            seed: seed.to_string(),
            tls: tls.clone(),
            timeout,
            map: RwLock::new(None),
            conns: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Runs `commands` (each in one slot) and returns their replies in order; `slots` reads `CLUSTER SLOTS`
    /// from any node. A reply that is an error of its own (not a redirection) fails the batch, as a
    /// pipeline on one Redis does.
    pub async fn query_all<F, Fut>(&self, commands: &[Cmd], slots: F) -> RedisResult<Vec<Value>>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = RedisResult<Value>>,
    {
        let slot_of: Vec<Option<u16>> = commands.iter().map(slot_of).collect();
        let mut done: Vec<Option<Value>> = vec![None; commands.len()];
        let mut routes = vec![Route::Slot; commands.len()];
        let mut wait = Duration::from_millis(5);
        let mut last = None;
        for _ in 0..ROUNDS {
            let cached = self.map.read().expect("slot map").clone();
            let map = match cached {
                Some(map) => map,
                None => self.refresh(&slots).await?,
            };
            let mut groups: HashMap<String, Vec<(usize, bool)>> = HashMap::new();
            for (i, _) in done.iter().enumerate().filter(|(_, d)| d.is_none()) {
                let (address, asking) = match &routes[i] {
                    Route::Ask(address) => (address.clone(), true),
                    Route::Slot => {
                        let slot = slot_of[i].unwrap_or(0);
                        let Some(address) = map.serving(slot).or(map.addresses.first().map(String::as_str)) else {
                            self.forget_map();
                            return Err(std::io::Error::other("no primary serves the slots of the batch").into());
                        };
                        (address.to_string(), false)
                    }
                };
                groups.entry(address).or_default().push((i, asking));
            }
            let sent = groups.iter().map(|(address, items)| self.send(address, items, commands));
            let answers = futures::future::join_all(sent).await;
            let (mut moved, mut later) = (false, false);
            for ((_, items), answer) in groups.iter().zip(answers) {
                for (&(i, _), reply) in items.iter().zip(answer?) {
                    match &reply {
                        Value::ServerError(e) if e.kind() == Some(ServerErrorKind::Moved) => {
                            routes[i] = Route::Slot;
                            moved = true;
                            last = Some(reply.clone());
                        }
                        Value::ServerError(e) if e.kind() == Some(ServerErrorKind::Ask) => {
                            let target = e.details().and_then(|d| d.split_whitespace().last()).unwrap_or_default();
                            routes[i] = Route::Ask(target.to_string());
                            last = Some(reply.clone());
                        }
                        Value::ServerError(e) if e.kind() == Some(ServerErrorKind::TryAgain) => {
                            routes[i] = Route::Slot;
                            later = true;
                            last = Some(reply.clone());
                        }
                        _ => done[i] = Some(reply),
                    }
                }
            }
            if done.iter().all(Option::is_some) {
                return finish(done);
            }
            if moved {
                self.refresh(&slots).await?;
            }
            if later {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(100));
            }
        }
        match last {
            Some(Value::ServerError(e)) => Err(e.into()),
            _ => Err(std::io::Error::other("commands kept being redirected").into()),
        }
    }

    /// Every slot range of the primary serving `slot`, as the slot map last read says (read now if there
    /// is none); empty when no primary serves it.
    pub async fn ranges_serving<F, Fut>(&self, slot: u16, slots: F) -> RedisResult<Vec<(u16, u16)>>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = RedisResult<Value>>,
    {
        let cached = self.map.read().expect("slot map").clone();
        let map = match cached {
            Some(map) => map,
            None => self.refresh(&slots).await?,
        };
        Ok(map.ranges_serving(slot).map(<[_]>::to_vec).unwrap_or_default())
    }

    /// One pipeline to `address`: the commands of `items`, each after `ASKING` where it says so. A
    /// connection that cannot be made, fails or hangs is made anew next time, to wherever the slot map read
    /// again says the slots are then.
    async fn send(&self, address: &str, items: &[(usize, bool)], commands: &[Cmd]) -> RedisResult<Vec<Value>> {
        let sent = self.pipeline(address, items, commands).await;
        if let Err(e) = &sent {
            tracing::debug!(address, error = %e, "a pipeline to a cluster primary failed");
            self.conns.lock().await.remove(address);
            self.forget_map();
        }
        sent
    }

    async fn pipeline(&self, address: &str, items: &[(usize, bool)], commands: &[Cmd]) -> RedisResult<Vec<Value>> {
        let mut conn = self.conn(address).await?;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &(i, asking) in items {
            if asking {
                pipe.cmd("ASKING").ignore();
            }
            pipe.add_command(commands[i].clone());
        }
        match tokio::time::timeout(self.timeout, pipe.query_async::<Vec<Value>>(&mut conn)).await {
            Ok(sent) => sent,
            Err(_) => Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()),
        }
    }

    async fn conn(&self, address: &str) -> RedisResult<MultiplexedConnection> {
        let mut conns = self.conns.lock().await;
        if let Some(conn) = conns.get(address) {
            return Ok(conn.clone());
        }
        let client = client(node_info(&self.seed, Some(address))?, &self.tls)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let conn = client.get_multiplexed_async_connection_with_config(&config).await?;
        conns.insert(address.to_string(), conn.clone());
        Ok(conn)
    }

    async fn refresh<F, Fut>(&self, slots: &F) -> RedisResult<Arc<SlotMap>>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = RedisResult<Value>>,
    {
        let map = Arc::new(SlotMap::of(&slots().await?));
        tracing::debug!(primaries = ?map.addresses, "read the cluster's slots");
        *self.map.write().expect("slot map") = Some(map.clone());
        Ok(map)
    }

    fn forget_map(&self) {
        *self.map.write().expect("slot map") = None;
    }
}

/// Every reply, or the first that is an error of its own.
fn finish(done: Vec<Option<Value>>) -> RedisResult<Vec<Value>> {
    let replies: Vec<Value> = done.into_iter().map(|d| d.expect("every command answered")).collect();
    if let Some(Value::ServerError(e)) = replies.iter().find(|r| matches!(r, Value::ServerError(_))) {
        return Err(e.clone().into());
    }
    Ok(replies)
}

/// The slot of a command's first key: `EVALSHA`'s and `EVAL`'s after their key count, any other command's
/// first argument. `None` for a command without keys (it may go to any primary).
fn slot_of(cmd: &Cmd) -> Option<u16> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .map(|arg| match arg {
            redis::Arg::Simple(bytes) => bytes,
            _ => b"0".as_slice(),
        })
        .collect();
    let name = args.first()?.to_ascii_uppercase();
    let key = match name.as_slice() {
        b"EVALSHA" | b"EVAL" | b"EVALSHA_RO" | b"EVAL_RO" | b"FCALL" => {
            let count: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            (count > 0).then(|| args.get(3)).flatten()?
        }
        _ => args.get(1)?,
    };
    Some(crate::keys::slot(&String::from_utf8_lossy(key)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_goes_to_the_slot_of_its_first_key_a_script_to_that_of_its_first_declared_key() {
        let key = "rm:g1:{org_a}:studies";
        let slot = crate::keys::slot(key);
        assert_eq!(slot_of(redis::cmd("HMGET").arg(key).arg("seq")), Some(slot));
        assert_eq!(slot_of(redis::cmd("EVALSHA").arg("abc").arg(2).arg(key).arg("rm:g1:{org_a}:epoch")), Some(slot));
        assert_eq!(slot_of(redis::cmd("EVALSHA").arg("abc").arg(0).arg("x")), None);
        assert_eq!(slot_of(&redis::cmd("PING")), None);
    }
}
