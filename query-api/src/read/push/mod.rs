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
//! # Layout
//! - This file: the tracker's API ([`Tracker`]: keep a key, ask what is known of it, forget) and what a
//!   push means for what is kept.
//! - [`kept`]: the bookkeeping of kept entries and the rule that decides whether one is still vouched for.
//! - [`upkeep`]: the tracking connections made, made again and probed; [`node`] is one of them, and
//!   [`topology`] says which one serves a key.
//!
//! Cost: one probe per primary every [`PROBE_EVERY`] and, on a cluster, its slots every
//! [`TOPOLOGY_EVERY`], whatever is kept; a key costs one read when it is first kept, and one after each
//! change, the next time it is asked for.

mod kept;
mod node;
mod topology;
mod upkeep;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, Weak};
use std::time::{Duration, Instant};

use redis::{Cmd, RedisResult, Value};
use shared::log_every::LogEvery;
use shared::redis_tls::Tls;
use shared::redis_url::Target;

use crate::metrics::Metrics;
pub use kept::{Capacity, Kind, Known};
use kept::{Entries, Entry, Serving, State};
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

/// Connection failures, tried again every [`TOPOLOGY_EVERY`]: logged once a minute at most.
static UNCONNECTED: LogEvery = LogEvery::millis(60_000);

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

    /// What is kept of `key`, if it may be trusted now.
    pub fn known(&self, key: &str) -> Option<Known> {
        let now = self.0.ms(Instant::now());
        let (value, node, read_ms, kind) = {
            let entries = self.0.entries.read().expect("kept values");
            let entry = entries.map.get(key)?;
            let State::Known(value) = &entry.state else { return None };
            entry.used_ms.store(now, Ordering::Relaxed);
            (value.clone(), entry.node, entry.read_ms, entry.kind)
        };
        if self.0.trusted(key, &value, node, read_ms, now) {
            return Some(value);
        }
        if kept::aged(&value, read_ms, now) {
            return None;
        }
        // Not vouched for: its connection is late, stalled, lost or no longer serves the key's slot.
        match kind {
            Kind::Key => self.0.metrics.unvouched_keys.inc(),
            Kind::KeyIndex => self.0.metrics.unvouched_key_index.inc(),
            Kind::Org => self.0.metrics.unvouched_reads.inc(),
            Kind::Watch => 0,
        };
        None
    }

    /// Starts keeping `key` (read with `cmd`, which reads that key alone) unless it is kept and trusted, or
    /// being read.
    pub fn keep(&self, key: &str, cmd: Cmd, kind: Kind) {
        let now = self.0.ms(Instant::now());
        let kept = {
            let entries = self.0.entries.read().expect("kept values");
            entries.map.get(key).map(|entry| (entry.state.clone(), entry.node, entry.read_ms))
        };
        match kept {
            Some((State::Pending(_), ..)) => return,
            Some((State::Known(value), node, read_ms)) if self.0.trusted(key, &value, node, read_ms, now) => {
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
        self.keep(key, cmd, Kind::Watch);
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

    /// The bytes held for what is kept: entries and table ([`kept::Entries::held`]).
    pub fn bytes(&self) -> usize {
        self.0.entries.read().expect("kept values").held()
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
                let known = value.map_or(Known::Absent, |value| Known::Value(Arc::from(value)));
                entries.set(key, State::Known(known));
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
}

impl Shared {
    fn ms(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.started).as_millis() as u64
    }

    /// Whether what was `known` of `key`, read at `read_ms` on connection `node`, may answer at `now`
    /// ([`kept::vouched`], asked of the connection serving the key's slot now).
    fn trusted(&self, key: &str, known: &Known, node: u64, read_ms: u64, now: u64) -> bool {
        let topology = self.topology.read().expect("topology");
        let serving =
            topology.serving(key).map(|n| Serving { node: n.id, alive: n.alive(), vouched_ms: n.vouched_ms() });
        kept::vouched(known, node, read_ms, serving, now)
    }

    /// The most values of `kind` that may be kept.
    fn limit(&self, kind: Kind) -> usize {
        match kind {
            Kind::Key | Kind::KeyIndex => self.capacity.keys,
            Kind::Org => self.capacity.orgs,
            Kind::Watch => usize::MAX,
        }
    }

    /// Whether `kind` has as many values kept as it may.
    fn full(&self, kind: Kind) -> bool {
        let entries = self.entries.read().expect("kept values");
        entries.counts.get(&kind).copied().unwrap_or(0) >= self.limit(kind)
            || kind != Kind::Watch && entries.held() >= self.capacity.bytes
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
        if entries.counts.get(&kind).copied().unwrap_or(0) >= self.limit(kind)
            || kind != Kind::Watch && !entries.room_for(key, self.capacity.bytes)
        {
            return false;
        }
        let state = State::Pending(token);
        entries.insert(key, Entry { kind, state, node: 0, read_ms: sent, used_ms: AtomicU64::new(sent) });
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
            let stale_absence = e.state == State::Known(Known::Absent) && now.saturating_sub(e.read_ms) >= absent;
            let idle = now.saturating_sub(e.used_ms.load(Ordering::Relaxed)) >= idle;
            e.kind == Kind::Watch || !idle && !stale_absence
        });
    }
}
