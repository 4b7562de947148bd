//! What Redis pushes: keys read on tracking connections ([`node`]) are kept with the value read, and Redis
//! says when one changes. So an organization's epoch (`Keyspace::org_epoch`) or an API key's entry
//! (`Keyspace::api_key_sha`) kept here is the one Redis holds, give or take the time an `invalidate` takes
//! to arrive: no timer, and no command while nothing changes.
//!
//! The safety rule: a kept value is trusted only while the connection it was read on is alive, still
//! serves the key's slot (a cluster's slots move and fail over), and answered a probe sent less than
//! [`TRUSTED_FOR`] ago. A probe is answered only after every invalidation Redis sent before it was handled,
//! so when the push channel is cut, stalled or behind, what it vouched for stops being trusted within
//! [`TRUSTED_FOR`] and requests read Redis. A value that says a key does not exist (an unknown API key) is
//! trusted for [`ABSENT_FOR`] at most: a key created on a cluster node this instance did not read it on
//! (its slot moved meanwhile) would push nothing here.
//!
//! Cost: one probe per primary every [`PROBE_EVERY`] and, on a cluster, its slots every
//! [`TOPOLOGY_EVERY`], whatever is kept; a key costs one read when it is first kept, and one after each
//! change, the next time it is asked for.

mod node;
mod topology;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use redis::{Cmd, RedisResult, Value};
use shared::keys::position_tag;
use shared::log_every::LogEvery;
use shared::redis_tls::Tls;
use shared::redis_url::Target;

use crate::metrics::Metrics;
use node::{Node, Pushed};
use topology::Topology;

/// How long after it was sent an answered probe vouches for what its connection kept.
pub const TRUSTED_FOR: Duration = Duration::from_millis(500);

/// How often each tracking connection is probed.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);

/// How often a cluster's slots are read again (and lost connections made again).
pub const TOPOLOGY_EVERY: Duration = Duration::from_secs(1);

/// How long a value saying that a key does not exist is trusted.
pub const ABSENT_FOR: Duration = Duration::from_secs(1);

/// A kept value not asked for this long is forgotten (its memory is freed; Redis's notice, if the key
/// changes, then finds nothing to drop).
const IDLE: Duration = Duration::from_secs(300);

/// What the map holds for each entry besides the key's and the value's bytes.
const ENTRY_OVERHEAD: usize = 96;

/// Connection failures, tried again every [`TOPOLOGY_EVERY`]: logged once a minute at most.
static UNCONNECTED: LogEvery = LogEvery::millis(60_000);

/// What a kept value is for: each kind has its own capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An API key's entry in the key index.
    Key,
    /// An organization's epoch.
    Org,
    /// A key of the read model's condition (its active generation, its healing entries): a change wakes
    /// [`Tracker::changed`]. Not counted against any capacity, never forgotten for being idle.
    Watch,
}

/// How many values of each kind may be kept.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    pub keys: usize,
    pub orgs: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// A read is on its way; the number tells it from a later one. An invalidation meanwhile removes the
    /// entry, so the read's answer, maybe older than the change, is not kept.
    Pending(u64),
    Known(Option<Arc<str>>),
}

struct Entry {
    kind: Kind,
    state: State,
    /// The connection it was read on.
    node: u64,
    /// When its read was sent, and when it was last asked for (ms since the tracker started).
    read_ms: u64,
    used_ms: AtomicU64,
}

#[derive(Default)]
struct Entries {
    map: HashMap<Box<str>, Entry>,
    counts: HashMap<Kind, usize>,
    bytes: usize,
}

fn weight(key: &str, state: &State) -> usize {
    ENTRY_OVERHEAD + key.len() + if let State::Known(Some(value)) = state { value.len() } else { 0 }
}

impl Entries {
    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.map.remove(key) {
            *self.counts.entry(entry.kind).or_default() -= 1;
            self.bytes -= weight(key, &entry.state);
        }
    }

    fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
        let (counts, bytes) = (&mut self.counts, &mut self.bytes);
        self.map.retain(|key, entry| {
            let kept = keep(entry);
            if !kept {
                *counts.entry(entry.kind).or_default() -= 1;
                *bytes -= weight(key, &entry.state);
            }
            kept
        });
    }

    fn set(&mut self, key: &str, state: State) {
        if let Some(entry) = self.map.get_mut(key) {
            self.bytes = self.bytes + weight(key, &state) - weight(key, &entry.state);
            entry.state = state;
        }
    }
}

/// The values kept, and the connections that vouch for them.
#[derive(Clone)]
pub struct Tracker(Arc<Shared>);

struct Shared {
    target: Target,
    tls: Tls,
    timeout: Duration,
    /// The key prefix: a cluster node's probe reads a key under it.
    prefix: String,
    capacity: Capacity,
    started: Instant,
    next_id: AtomicU64,
    topology: RwLock<Topology>,
    entries: RwLock<Entries>,
    /// The topology should be read again now (a connection was lost, a read was redirected).
    stale: AtomicBool,
    refreshing: tokio::sync::Mutex<()>,
    /// Woken when a watched key changes, or what a connection vouched for is lost.
    changed: tokio::sync::Notify,
    metrics: Arc<Metrics>,
}

impl Tracker {
    pub fn new(
        target: Target,
        tls: Tls,
        timeout: Duration,
        prefix: &str,
        capacity: Capacity,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self(Arc::new(Shared {
            target,
            tls,
            timeout,
            prefix: prefix.to_string(),
            capacity,
            started: Instant::now(),
            next_id: AtomicU64::new(1),
            topology: RwLock::new(Topology::default()),
            entries: RwLock::new(Entries::default()),
            stale: AtomicBool::new(true),
            refreshing: tokio::sync::Mutex::new(()),
            changed: tokio::sync::Notify::new(),
            metrics,
        }))
    }

    /// Whether anything may be kept at all (with neither keys nor reads kept, no connection is made).
    pub fn keeps_anything(&self) -> bool {
        self.0.capacity.keys > 0 || self.0.capacity.orgs > 0
    }

    /// The value kept for `key`, if it may be trusted now: `Some(None)` says the key does not exist.
    pub fn known(&self, key: &str) -> Option<Option<Arc<str>>> {
        let now = self.0.ms(Instant::now());
        let (value, node, read_ms) = {
            let entries = self.0.entries.read().expect("kept values");
            let entry = entries.map.get(key)?;
            let State::Known(value) = &entry.state else { return None };
            entry.used_ms.store(now, Ordering::Relaxed);
            (value.clone(), entry.node, entry.read_ms)
        };
        self.0.trusted(key, value.is_some(), node, read_ms, now).then_some(value)
    }

    /// Starts keeping `key` (read with `cmd`, which reads that key alone) unless it is kept and trusted, or
    /// being read.
    pub fn follow(&self, key: &str, cmd: Cmd, kind: Kind) {
        let now = self.0.ms(Instant::now());
        let kept = {
            let entries = self.0.entries.read().expect("kept values");
            entries.map.get(key).map(|entry| (entry.state.clone(), entry.node, entry.read_ms))
        };
        match kept {
            Some((State::Pending(_), ..)) => return,
            Some((State::Known(value), node, read_ms)) if self.0.trusted(key, value.is_some(), node, read_ms, now) => {
                return;
            }
            // Full: nothing more of this kind is kept until an entry goes (no read, no task).
            None if self.0.full(kind) => return,
            _ => {}
        }
        let (tracker, key) = (self.clone(), key.to_string());
        tokio::spawn(async move {
            if let Err(e) = tracker.read(&key, &cmd, kind).await {
                tracing::debug!(error = %e, "could not start keeping a value pushed by redis");
            }
        });
    }

    /// Watches a key of the read model's condition, read with `cmd`: [`Self::changed`] wakes when it
    /// changes.
    pub fn watch(&self, key: &str, cmd: Cmd) {
        self.follow(key, cmd, Kind::Watch);
    }

    /// Completes when a watched key changed, or something kept may have been lost, since the last call.
    pub async fn changed(&self) {
        self.0.changed.notified().await
    }

    /// Forgets everything kept (another generation is served, or the read model is not known complete);
    /// the watched keys stay watched.
    pub fn forget(&self) {
        self.0.entries.write().expect("kept values").retain(|e| e.kind == Kind::Watch);
    }

    /// Forgets what is kept of the keys in `scope`'s slots (they are being projected again); the watched
    /// keys stay watched.
    pub fn forget_slots(&self, scope: &shared::scope::Scope) {
        let mut entries = self.0.entries.write().expect("kept values");
        let doomed: Vec<Box<str>> = entries
            .map
            .iter()
            .filter(|(key, entry)| entry.kind != Kind::Watch && scope.contains(shared::keys::slot(key)))
            .map(|(key, _)| key.clone())
            .collect();
        for key in doomed {
            entries.remove(&key);
        }
    }

    /// The bytes kept, as counted.
    pub fn bytes(&self) -> usize {
        self.0.entries.read().expect("kept values").bytes
    }

    /// Reads `key` on the connection that tracks its slot and keeps the answer, unless the key changed
    /// meanwhile or `kind` is full.
    async fn read(&self, key: &str, cmd: &Cmd, kind: Kind) -> RedisResult<()> {
        let token = self.0.next_id.fetch_add(1, Ordering::Relaxed);
        let sent = self.0.ms(Instant::now());
        if !self.0.begin(key, kind, token, sent) {
            return Ok(());
        }
        // A watched key's value is not kept: only that Redis tracks it now.
        let read = self.query(key, cmd).await.and_then(|(node, reply)| match kind {
            Kind::Watch => Ok((node, Some(String::new()))),
            _ => Ok((node, redis::from_redis_value(reply).map_err(|e| std::io::Error::other(e.to_string()))?)),
        });
        let mut entries = self.0.entries.write().expect("kept values");
        let ours = entries.map.get(key).is_some_and(|e| e.state == State::Pending(token));
        match read {
            Ok((node, value)) if ours => {
                entries.set(key, State::Known(value.map(Arc::from)));
                if let Some(entry) = entries.map.get_mut(key) {
                    entry.node = node;
                }
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(e) => {
                if ours {
                    entries.remove(key);
                }
                Err(e)
            }
        }
    }

    /// Runs a read of `key` on the connection serving its slot, following a redirection once.
    async fn query(&self, key: &str, cmd: &Cmd) -> RedisResult<(u64, Value)> {
        for attempt in 0..2 {
            let node = self.0.topology.read().expect("topology").serving(key).filter(|n| n.alive()).cloned();
            let Some(node) = node else {
                self.0.stale.store(true, Ordering::Release);
                return Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "no tracking connection").into());
            };
            match node.query(cmd).await {
                Ok(reply) => return Ok((node.id, reply)),
                Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Ask) => {
                    let address = e.redirect_node().map(|(address, _)| address.to_string()).unwrap_or_default();
                    let target = self.0.topology.read().expect("topology").at(&address).filter(|n| n.alive()).cloned();
                    let Some(target) = target else { return Err(e) };
                    return Ok((target.id, target.query_asking(cmd).await?));
                }
                Err(e) if e.is_cluster_error() && attempt == 0 => self.refresh().await,
                Err(e) => {
                    if e.is_connection_dropped() || e.is_io_error() && !e.is_timeout() {
                        self.0.lost(node.id);
                    }
                    return Err(e);
                }
            }
        }
        Err(std::io::Error::other("the key's slot kept moving").into())
    }

    /// Keeps the tracking connections up and vouched for, for ever.
    pub async fn maintain(self) {
        let mut tick = tokio::time::interval(PROBE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut read_at, mut swept_at) = (None::<Instant>, Instant::now());
        loop {
            tick.tick().await;
            if self.0.stale.load(Ordering::Acquire) || read_at.is_none_or(|at| at.elapsed() >= TOPOLOGY_EVERY) {
                self.refresh().await;
                read_at = Some(Instant::now());
            }
            self.probe();
            if swept_at.elapsed() >= ABSENT_FOR {
                self.0.sweep();
                swept_at = Instant::now();
            }
            let nodes = self.0.topology.read().expect("topology").nodes.iter().filter(|n| n.alive()).count();
            self.0.metrics.tracking_connections.set(nodes as i64);
            self.0.metrics.kept_keys_bytes.set(self.bytes() as i64);
        }
    }

    /// Probes every live connection that has no probe on its way.
    fn probe(&self) {
        let nodes = self.0.topology.read().expect("topology").nodes.clone();
        for node in nodes.into_iter().filter(|n| n.alive()) {
            if !node.start_probe() {
                continue;
            }
            let shared = self.0.clone();
            tokio::spawn(async move {
                let sent = shared.ms(Instant::now());
                match node.probe(sent).await {
                    Ok(()) => {}
                    Err(e) if e.is_cluster_error() || e.code() == Some("CLUSTERDOWN") => {
                        // It no longer serves the slots it did: nothing read on it is trusted.
                        shared.lost(node.id);
                    }
                    Err(e) if e.is_connection_dropped() || e.is_io_error() && !e.is_timeout() => shared.lost(node.id),
                    Err(e) => tracing::debug!(error = %e, node = node.address, "a tracking connection's probe failed"),
                }
                node.end_probe();
            });
        }
    }

    /// Reads which connection serves which slot again (once at a time), connecting what is missing.
    async fn refresh(&self) {
        let _one = self.0.refreshing.lock().await;
        self.0.stale.store(false, Ordering::Release);
        let refreshed = match &self.0.target {
            Target::Single(url) => self.single(url).await,
            Target::Cluster(seeds) => self.cluster(seeds).await,
        };
        if let Err(e) = refreshed {
            self.0.stale.store(true, Ordering::Release);
            if let Some(skipped) = UNCONNECTED.allow() {
                tracing::warn!(error = %e, skipped, "no connection for changes pushed by redis; requests read redis");
            }
        }
    }

    async fn single(&self, url: &str) -> RedisResult<()> {
        if self.0.topology.read().expect("topology").nodes.first().is_some_and(|n| n.alive()) {
            return Ok(());
        }
        let node = self.0.connect(url, None, None).await?;
        *self.0.topology.write().expect("topology") = Topology::single(node);
        // What is watched is watched again on the new connection, by the refresh this wakes.
        self.0.changed.notify_one();
        Ok(())
    }

    async fn cluster(&self, seeds: &[String]) -> RedisResult<()> {
        let slots = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
        let live: Vec<Arc<Node>> =
            self.0.topology.read().expect("topology").nodes.iter().filter(|n| n.alive()).cloned().collect();
        let mut reply = None;
        for node in &live {
            if let Ok(found) = node.query(&slots).await {
                reply = Some(found);
                break;
            }
        }
        let mut error = None;
        if reply.is_none() {
            for seed in seeds {
                match self.0.connect(seed, None, None).await {
                    Ok(node) => match node.query(&slots).await {
                        Ok(found) => {
                            reply = Some(found);
                            break;
                        }
                        Err(e) => error = Some(e),
                    },
                    Err(e) => error = Some(e),
                }
            }
        }
        let Some(reply) = reply else {
            return Err(error.unwrap_or_else(|| std::io::Error::other("no seed of the cluster answered").into()));
        };
        let mut nodes = Vec::new();
        let mut connected = false;
        for primary in shared::cluster_nodes::serving(&reply) {
            let (address, ranges) = (primary.address(), primary.slots);
            let existing = live.iter().find(|n| n.address == address && n.serves(&ranges)).cloned();
            let node = match existing {
                Some(node) => node,
                None => {
                    let probe = position_tag(&ranges).map(|tag| format!("{}:probe:{{{tag}}}", self.0.prefix));
                    match self.0.connect(&seeds[0], Some(&address), probe.map(|p| (p, ranges.clone()))).await {
                        Ok(node) => {
                            connected = true;
                            node
                        }
                        Err(e) => {
                            error = Some(e);
                            continue;
                        }
                    }
                }
            };
            nodes.push((node, ranges));
        }
        let kept: Vec<u64> = nodes.iter().map(|(n, _)| n.id).collect();
        for node in live.iter().filter(|n| !kept.contains(&n.id)) {
            self.0.lost(node.id);
        }
        *self.0.topology.write().expect("topology") = Topology::cluster(nodes);
        if connected {
            self.0.changed.notify_one();
        }
        match error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Shared {
    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_millis() as u64
    }

    /// Whether a value of `key` read at `read_ms` on connection `node` may answer at `now`: the connection
    /// is alive, still serves the key's slot and answered a probe lately; a value that says the key does
    /// not exist (`exists` false) is young enough.
    fn trusted(&self, key: &str, exists: bool, node: u64, read_ms: u64, now: u64) -> bool {
        if !exists && now.saturating_sub(read_ms) >= ABSENT_FOR.as_millis() as u64 {
            return false;
        }
        let topology = self.topology.read().expect("topology");
        let Some(serving) = topology.serving(key) else { return false };
        let vouched = serving.vouched_ms();
        let recent = vouched > 0 && now.saturating_sub(vouched) < TRUSTED_FOR.as_millis() as u64;
        serving.id == node && serving.alive() && recent
    }

    /// The most values of `kind` that may be kept.
    fn limit(&self, kind: Kind) -> usize {
        match kind {
            Kind::Key => self.capacity.keys,
            Kind::Org => self.capacity.orgs,
            Kind::Watch => usize::MAX,
        }
    }

    /// Whether `kind` has as many values kept as it may.
    fn full(&self, kind: Kind) -> bool {
        self.entries.read().expect("kept values").counts.get(&kind).copied().unwrap_or(0) >= self.limit(kind)
    }

    /// Marks `key` as being read by read `token`; false when it may not be kept (its kind is full).
    fn begin(&self, key: &str, kind: Kind, token: u64, sent: u64) -> bool {
        let mut entries = self.entries.write().expect("kept values");
        if entries.map.contains_key(key) {
            entries.set(key, State::Pending(token));
            if let Some(entry) = entries.map.get_mut(key) {
                entry.read_ms = sent;
            }
            return true;
        }
        if entries.counts.get(&kind).copied().unwrap_or(0) >= self.limit(kind) {
            return false;
        }
        let state = State::Pending(token);
        entries.bytes += weight(key, &state);
        *entries.counts.entry(kind).or_default() += 1;
        let entry = Entry { kind, state, node: 0, read_ms: sent, used_ms: AtomicU64::new(sent) };
        entries.map.insert(key.into(), entry);
        true
    }

    /// Connects a tracking connection (to `address`, or to the seed's own) whose pushes come here.
    async fn connect(
        self: &Arc<Self>,
        seed: &str,
        address: Option<&str>,
        probe: Option<(String, Vec<(u16, u16)>)>,
    ) -> RedisResult<Arc<Node>> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let shared: Weak<Shared> = Arc::downgrade(self);
        let pushed = move |push: Pushed| {
            if let Some(shared) = shared.upgrade() {
                shared.pushed(id, push);
            }
        };
        let node = Node::connect(id, seed, address, &self.tls, self.timeout, probe, pushed).await?;
        Ok(Arc::new(node))
    }

    /// What a connection's push means for what is kept. Runs in the connection's reader, before any later
    /// reply of the connection is delivered.
    fn pushed(&self, node: u64, push: Pushed) {
        match push {
            Pushed::Keys(keys) => {
                let mut entries = self.entries.write().expect("kept values");
                let mut watched = false;
                for key in &keys {
                    watched |= entries.map.get(key.as_str()).is_some_and(|e| e.kind == Kind::Watch);
                    entries.remove(key);
                }
                drop(entries);
                self.metrics.invalidations.inc_by(keys.len() as u64);
                if watched {
                    self.changed.notify_one();
                }
            }
            Pushed::All => {
                self.entries.write().expect("kept values").retain(|e| e.node != node);
                self.changed.notify_one();
            }
            Pushed::Lost => self.lost(node),
        }
    }

    /// A connection is lost (or no longer serves its slots): nothing read on it is trusted, and the
    /// topology is read again.
    fn lost(&self, node: u64) {
        let found = self.topology.read().expect("topology").nodes.iter().find(|n| n.id == node).cloned();
        if let Some(found) = found {
            if found.alive() {
                tracing::info!(node = found.address, "a connection for changes pushed by redis was lost; reconnecting");
                self.metrics.tracking_lost.inc();
            }
            found.lost();
        }
        self.entries.write().expect("kept values").retain(|e| e.node != node);
        self.stale.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    /// Forgets values not asked for lately, and those saying a key does not exist once they are no longer
    /// trusted.
    fn sweep(&self) {
        let now = self.ms(Instant::now());
        let idle = IDLE.as_millis() as u64;
        let absent = ABSENT_FOR.as_millis() as u64;
        self.entries.write().expect("kept values").retain(|e| {
            let stale_absence = e.state == State::Known(None) && now.saturating_sub(e.read_ms) >= absent;
            let idle = now.saturating_sub(e.used_ms.load(Ordering::Relaxed)) >= idle;
            e.kind == Kind::Watch || !idle && !stale_absence
        });
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
