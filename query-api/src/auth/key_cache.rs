//! API keys kept in memory, so that a request in steady state authenticates without a Redis round trip,
//! and a revoked key is still refused by every instance within a second.
//!
//! Every API-key event the projector applies writes a new token to the key index's epoch
//! (`Keyspace::api_key_epoch`). Each entry here is tagged with the epoch that Redis held when the entry
//! was read (the organization and the epoch come from one atomic read), and the background refresh reads
//! the epoch a few times a second. An entry answers only while its epoch and generation are the ones the
//! last refresh read, and that refresh started less than `TRUSTED_FOR` ago (`crate::read::trust`).
//!
//! So a key deleted at time t is refused from the first refresh that starts after t (a quarter of a
//! second later by default), and never later than t + `TRUSTED_FOR`, even when the refreshes fail: past
//! that, every request asks Redis again. A different epoch (a key event, a rollback, a flush, a new
//! generation) drops every entry. Keys that authenticated are kept, at most `capacity` of them; past the
//! capacity new keys are simply not kept. Keys that Redis does not know are kept too, apart, at most an
//! eighth of `capacity` of them, under the same epoch: a key deleted while clients go on using it is then
//! refused from memory, not looked up again and again, and a key created meanwhile changes the epoch, which
//! drops them. An attacker's made-up keys fill at most that eighth, never the room of the valid keys.

use std::collections::{HashMap, HashSet};
use std::mem::size_of;
use std::sync::RwLock;
use std::time::Instant;

use crate::read::trust::{Seen, Vouched};

/// The epoch of one generation's key index, as one read found it. `token` is `None` when the index has
/// no epoch (a read model written before epochs existed): then nothing is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIndexEpoch {
    pub generation: u64,
    pub token: Option<String>,
}

/// What the map holds for each key besides the organization's id: its table slot and control byte.
const ENTRY_OVERHEAD: usize = size_of::<([u8; 32], Box<str>)>() + 8;
/// What the set of unknown keys holds for each.
const UNKNOWN_ENTRY: usize = size_of::<[u8; 32]>() + 8;

/// What is kept of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// It authenticates, for this organization.
    Organization(String),
    /// Redis does not know it.
    Unknown,
}

pub struct KeyCache {
    capacity: usize,
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    /// The epoch the last refresh read, and when that refresh started.
    current: Option<Vouched<KeyIndexEpoch>>,
    /// Key SHA-256 → organization, all of `current`'s epoch.
    entries: HashMap<[u8; 32], Box<str>>,
    /// Key SHA-256s Redis did not know under `current`'s epoch.
    unknown: HashSet<[u8; 32]>,
    /// What `entries` and `unknown` hold: each entry and its organization's id.
    bytes: usize,
}

impl KeyCache {
    /// A cache of at most `capacity` keys; `None` when `capacity` is 0 (every request asks Redis).
    pub fn new(capacity: usize) -> Option<Self> {
        (capacity > 0).then(|| Self { capacity, inner: RwLock::default() })
    }

    /// The organization of a key in `generation`, if it is kept and still vouched for at `now`.
    pub fn get(&self, sha256: &[u8; 32], generation: u64, now: Instant) -> Option<Kept> {
        let inner = self.inner.read().expect("key cache");
        let current = inner.current.as_ref()?;
        if current.epoch().generation != generation || !current.is_recent(now) {
            return None;
        }
        match inner.entries.get(sha256) {
            Some(org) => Some(Kept::Organization(org.to_string())),
            None => inner.unknown.contains(sha256).then_some(Kept::Unknown),
        }
    }

    /// Keeps a key that a read of Redis did not find, with the epoch read with it (only when that epoch is
    /// the current one).
    pub fn insert_unknown(&self, sha256: [u8; 32], epoch: &KeyIndexEpoch) {
        if epoch.token.is_none() {
            return;
        }
        let mut inner = self.inner.write().expect("key cache");
        let current = inner.current.as_ref().map(Vouched::epoch);
        if current != Some(epoch) || inner.unknown.len() >= (self.capacity / 8).max(1) {
            return;
        }
        if inner.unknown.insert(sha256) {
            inner.bytes += UNKNOWN_ENTRY;
        }
    }

    /// Keeps what a request read from Redis: the key's organization and the epoch read with it. Kept only
    /// when that epoch is the current one: an entry of another epoch could be older than a revocation.
    pub fn insert(&self, sha256: [u8; 32], org: &str, epoch: &KeyIndexEpoch) {
        if epoch.token.is_none() {
            return;
        }
        let mut inner = self.inner.write().expect("key cache");
        let current = inner.current.as_ref().map(Vouched::epoch);
        if current != Some(epoch) || inner.entries.len() >= self.capacity {
            return;
        }
        let replaced = inner.entries.insert(sha256, org.into()).map_or(0, |old| ENTRY_OVERHEAD + old.len());
        inner.bytes = inner.bytes + ENTRY_OVERHEAD + org.len() - replaced;
    }

    /// Records what a refresh that started at `started` read. A different epoch drops every entry.
    pub fn refreshed(&self, epoch: KeyIndexEpoch, started: Instant) {
        let mut inner = self.inner.write().expect("key cache");
        let changed = match inner.current.as_mut() {
            Some(current) => current.saw(epoch, started) != Seen::Same,
            None => {
                inner.current = Some(Vouched::new(epoch, started));
                true
            }
        };
        if changed {
            inner.entries.clear();
            inner.unknown.clear();
            inner.bytes = 0;
        }
    }

    /// Drops everything, until the next refresh (the read model is not known to be complete).
    pub fn forget(&self) {
        let mut inner = self.inner.write().expect("key cache");
        inner.entries.clear();
        inner.unknown.clear();
        inner.bytes = 0;
        inner.current = None;
    }

    /// The bytes the kept keys hold, their organizations' ids included.
    pub fn bytes(&self) -> usize {
        self.inner.read().expect("key cache").bytes
    }

    /// How many keys are kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.read().expect("key cache").entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::read::trust::TRUSTED_FOR;

    type Epoch = KeyIndexEpoch;

    fn org(kept: Kept) -> Option<String> {
        match kept {
            Kept::Organization(org) => Some(org),
            Kept::Unknown => None,
        }
    }

    #[test]
    fn an_unknown_key_is_kept_apart_under_the_epoch_and_dropped_with_it() {
        let cache = KeyCache::new(16).unwrap();
        let t0 = Instant::now();
        cache.refreshed(epoch(1, "a"), t0);
        cache.insert_unknown(KEY, &epoch(1, "a"));
        assert_eq!(cache.get(&KEY, 1, t0), Some(Kept::Unknown));
        assert_eq!(cache.get(&KEY, 1, t0 + TRUSTED_FOR), None, "no longer vouched for");
        cache.insert_unknown([1; 32], &epoch(1, "b"));
        assert_eq!(cache.get(&[1; 32], 1, t0), None, "read under another epoch");
        for i in 2..40u8 {
            cache.insert_unknown([i; 32], &epoch(1, "a"));
        }
        assert_eq!(cache.bytes(), 2 * UNKNOWN_ENTRY, "at most an eighth of the capacity");
        cache.insert(KEY, "org", &epoch(1, "a"));
        assert_eq!(cache.get(&KEY, 1, t0).and_then(org).as_deref(), Some("org"));
        cache.refreshed(epoch(1, "c"), t0);
        assert_eq!(cache.get(&[2; 32], 1, t0), None, "a key event drops them");
        assert_eq!(cache.bytes(), 0);
    }

    fn epoch(generation: u64, token: &str) -> Epoch {
        Epoch { generation, token: Some(token.into()) }
    }

    const KEY: [u8; 32] = [7; 32];

    #[test]
    fn a_key_is_served_from_memory_only_while_its_epoch_is_current_and_recently_read() {
        let cache = KeyCache::new(10).unwrap();
        let t0 = Instant::now();
        cache.refreshed(epoch(1, "a"), t0);
        cache.insert(KEY, "org", &epoch(1, "a"));
        assert_eq!(cache.get(&KEY, 1, t0 + Duration::from_millis(10)).and_then(org), Some("org".into()));
        // No refresh vouched for it lately: Redis is asked again.
        assert_eq!(cache.get(&KEY, 1, t0 + TRUSTED_FOR), None);
        // The same epoch read again keeps the entry.
        cache.refreshed(epoch(1, "a"), t0 + TRUSTED_FOR);
        assert_eq!(cache.get(&KEY, 1, t0 + TRUSTED_FOR).and_then(org), Some("org".into()));
        // A request of another generation never reads this one's keys.
        assert_eq!(cache.get(&KEY, 2, t0 + TRUSTED_FOR), None);
    }

    #[test]
    fn another_epoch_or_generation_drops_every_key() {
        let cache = KeyCache::new(10).unwrap();
        let t0 = Instant::now();
        for next in [epoch(1, "b"), epoch(2, "a"), Epoch { generation: 1, token: None }] {
            cache.refreshed(epoch(1, "a"), t0);
            cache.insert(KEY, "org", &epoch(1, "a"));
            assert!(!cache.is_empty());
            cache.refreshed(next.clone(), t0);
            assert_eq!(cache.get(&KEY, 1, t0), None, "{next:?}");
        }
    }

    #[test]
    fn what_was_read_under_another_epoch_is_not_kept() {
        let cache = KeyCache::new(10).unwrap();
        let t0 = Instant::now();
        // Before any refresh, and for a read that saw an epoch the refresh has not (or no longer) seen.
        cache.insert(KEY, "org", &epoch(1, "a"));
        cache.refreshed(epoch(1, "b"), t0);
        cache.insert(KEY, "org", &epoch(1, "a"));
        cache.insert(KEY, "org", &Epoch { generation: 1, token: None });
        assert!(cache.is_empty());
        cache.refreshed(Epoch { generation: 1, token: None }, t0);
        cache.insert(KEY, "org", &Epoch { generation: 1, token: None });
        assert!(cache.is_empty(), "a read model without an epoch is never kept in memory");
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity_and_forgets_on_demand() {
        let cache = KeyCache::new(2).unwrap();
        let t0 = Instant::now();
        cache.refreshed(epoch(1, "a"), t0);
        for i in 0..5u8 {
            cache.insert([i; 32], "org", &epoch(1, "a"));
        }
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.bytes(), 2 * (ENTRY_OVERHEAD + "org".len()));
        cache.forget();
        assert!(cache.is_empty() && cache.get(&[0; 32], 1, t0).is_none());
        assert!(KeyCache::new(0).is_none());
    }
}
