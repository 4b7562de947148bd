//! Reads of the read model kept in memory (`READ_CACHE_MB`, 64 MiB unless set; 0 for none), so that a
//! request for a page that has not changed is answered without a Redis round trip, and a change is still
//! served within a second.
//!
//! Every write the projector applies to an organization writes a new token to that organization's epoch
//! (`Keyspace::org_epoch`), in the same script. Every read of an organization returns the epoch with the
//! data, from the same script, and is kept tagged with it. The background refresh reads the epochs of the
//! organizations kept, a few times a second: a kept read answers only while its organization's epoch is
//! the one it was read with, vouched for lately ([`super::trust`]). Another generation drops everything.
//!
//! Memory is bounded by construction: every kept read is weighed, its key included (the id a request
//! asked for, at most [`super::MAX_ID_BYTES`]), and the organizations' epochs are counted too. Past the
//! budget, reads are evicted one at a time (`quick_cache`'s CLOCK-Pro: the least recently asked for go
//! first), never all at once. Reads of an organization whose epoch changed are dropped at the next refresh.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use quick_cache::{Equivalent, Weighter};

use super::model::{InterviewRead, Page};
use super::trust::{Seen, Vouched};

/// An organization none of whose reads was kept or asked for this long is no longer followed: its epoch
/// is no longer read, and its reads are dropped.
const IDLE: Duration = Duration::from_secs(60);

/// The share of the budget for the organizations followed (their ids and epochs).
const ORGS_SHARE: usize = 16;

/// What quick_cache and its table hold for each entry besides the key and value: a hash, a slot in its
/// index and its clock state, rounded up.
const ENTRY_OVERHEAD: usize = 64;

/// Which read: the route's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReadKey {
    Studies { start: u64, stop: u64 },
    Study(Box<str>),
    Interviews { study: Box<str>, start: u64, stop: u64 },
    Interview(Box<str>),
}

impl ReadKey {
    /// The bytes it holds besides itself.
    fn heap_bytes(&self) -> usize {
        match self {
            ReadKey::Studies { .. } => 0,
            ReadKey::Study(id) | ReadKey::Interview(id) | ReadKey::Interviews { study: id, .. } => id.len(),
        }
    }
}

/// A read as Redis answered it.
#[derive(Debug, Clone)]
pub enum Stored {
    Studies(Arc<Page<String>>),
    Study(Arc<Option<String>>),
    Interviews(Arc<Option<Page<InterviewRead>>>),
    Interview(Arc<Option<InterviewRead>>),
}

impl Stored {
    /// The bytes it holds besides itself: the shared allocation and every string in it.
    fn heap_bytes(&self) -> usize {
        fn arc<T>() -> usize {
            2 * size_of::<usize>() + size_of::<T>()
        }
        fn interview((doc, transcript): &InterviewRead) -> usize {
            doc.capacity() + transcript.heap_bytes()
        }
        fn page<T>(page: &Page<T>, each: impl Fn(&T) -> usize) -> usize {
            page.items.capacity() * size_of::<T>() + page.items.iter().map(each).sum::<usize>()
        }
        match self {
            Stored::Studies(p) => arc::<Page<String>>() + page(p, String::capacity),
            Stored::Study(doc) => arc::<Option<String>>() + doc.as_ref().as_ref().map_or(0, String::capacity),
            Stored::Interviews(p) => {
                arc::<Option<Page<InterviewRead>>>() + p.as_ref().as_ref().map_or(0, |p| page(p, interview))
            }
            Stored::Interview(one) => arc::<Option<InterviewRead>>() + one.as_ref().as_ref().map_or(0, interview),
        }
    }
}

/// The key of a kept read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    generation: u64,
    org: Arc<str>,
    read: ReadKey,
}

/// A [`Slot`] to look up, borrowed.
struct SlotRef<'a> {
    generation: u64,
    org: &'a str,
    read: &'a ReadKey,
}

impl Hash for Slot {
    fn hash<H: Hasher>(&self, state: &mut H) {
        SlotRef { generation: self.generation, org: &self.org, read: &self.read }.hash(state);
    }
}

impl Hash for SlotRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.generation.hash(state);
        self.org.hash(state);
        self.read.hash(state);
    }
}

impl Equivalent<Slot> for SlotRef<'_> {
    fn equivalent(&self, slot: &Slot) -> bool {
        self.generation == slot.generation && self.org == &*slot.org && self.read == &slot.read
    }
}

/// A kept read and the epoch it was read with.
#[derive(Debug, Clone)]
struct Kept {
    epoch: Arc<str>,
    stored: Stored,
}

/// The weight of a kept read is the bytes it holds: key, value, what they point to, the cache's entry.
/// The organization's id is shared with [`Orgs`], which counts it; the epoch is counted with each read.
#[derive(Clone)]
struct Weigh;

impl Weighter<Slot, Kept> for Weigh {
    fn weight(&self, slot: &Slot, kept: &Kept) -> u64 {
        entry_bytes(slot, kept) as u64
    }
}

fn entry_bytes(slot: &Slot, kept: &Kept) -> usize {
    size_of::<(Slot, Kept)>()
        + ENTRY_OVERHEAD
        + slot.read.heap_bytes()
        + 2 * size_of::<usize>()
        + kept.epoch.len()
        + kept.stored.heap_bytes()
}

/// The organizations followed: their epochs, as last read.
#[derive(Default)]
struct Orgs {
    generation: u64,
    followed: HashMap<Arc<str>, Org>,
    /// What `followed` holds, as [`org_bytes`] counts it.
    bytes: usize,
    /// Some kept reads are of an epoch no longer current: the next refresh drops them.
    stale: bool,
}

struct Org {
    vouched: Vouched<Arc<str>>,
    /// When a read of it was last kept or answered, in milliseconds since the cache was made.
    used: AtomicU64,
}

/// What following an organization holds: the map's entry, its id and its epoch (two shared strings).
fn org_bytes(org: usize, epoch: usize) -> usize {
    size_of::<(Arc<str>, Org)>() + ENTRY_OVERHEAD + 4 * size_of::<usize>() + org + epoch
}

pub struct ReadCache {
    reads: quick_cache::sync::Cache<Slot, Kept, Weigh>,
    orgs: RwLock<Orgs>,
    orgs_budget: usize,
    started: Instant,
}

impl ReadCache {
    /// A cache of at most `budget` bytes; `None` when it is 0 (every request reads Redis).
    pub fn new(budget: usize) -> Option<Self> {
        (budget > 0).then(|| {
            let orgs_budget = budget / ORGS_SHARE;
            let weight = (budget - orgs_budget) as u64;
            let reads = quick_cache::sync::Cache::with_weighter((budget / 4096).max(64), weight, Weigh);
            Self { reads, orgs: RwLock::default(), orgs_budget, started: Instant::now() }
        })
    }

    fn millis(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.started).as_millis() as u64
    }

    /// A kept read of `org` in `generation`, if its organization's epoch was vouched for lately.
    pub fn get(&self, generation: u64, org: &str, key: &ReadKey, now: Instant) -> Option<Stored> {
        let kept = self.reads.get(&SlotRef { generation, org, read: key })?;
        let orgs = self.orgs.read().expect("read cache");
        let followed = orgs.followed.get(org).filter(|_| orgs.generation == generation)?;
        if !followed.vouched.vouches_for(&kept.epoch, now) {
            return None;
        }
        followed.used.store(self.millis(now), Ordering::Relaxed);
        Some(kept.stored)
    }

    /// Keeps a read of Redis that started at `started` and found the organization at `epoch` (`None`: the
    /// read model has no epoch for it, and nothing is kept). A read that found another epoch than the one
    /// followed replaces it only if it is the newer of the two.
    pub fn insert(
        &self,
        generation: u64,
        org: &str,
        key: ReadKey,
        value: Stored,
        epoch: Option<String>,
        started: Instant,
    ) {
        let Some(epoch) = epoch else { return };
        let (org, epoch) = {
            let mut orgs = self.orgs.write().expect("read cache");
            if orgs.generation != generation {
                *orgs = Orgs { generation, ..Orgs::default() };
                self.reads.clear();
            }
            let used = AtomicU64::new(self.millis(Instant::now()));
            match orgs.followed.get_key_value(org) {
                Some((name, _)) => {
                    let name = name.clone();
                    let followed = orgs.followed.get_mut(&name).expect("just found");
                    let before = followed.vouched.epoch().len();
                    match followed.vouched.saw(Arc::from(epoch.as_str()), started) {
                        Seen::Older => return,
                        Seen::Same => {}
                        Seen::Changed => {
                            orgs.stale = true;
                            orgs.bytes = orgs.bytes + epoch.len() - before;
                        }
                    }
                    let followed = orgs.followed.get_mut(&name).expect("just found");
                    followed.used = used;
                    let epoch = followed.vouched.epoch().clone();
                    (name, epoch)
                }
                None => {
                    let bytes = org_bytes(org.len(), epoch.len());
                    if orgs.bytes + bytes > self.orgs_budget {
                        return;
                    }
                    let (name, epoch): (Arc<str>, Arc<str>) = (Arc::from(org), Arc::from(epoch.as_str()));
                    orgs.followed.insert(name.clone(), Org { vouched: Vouched::new(epoch.clone(), started), used });
                    orgs.bytes += bytes;
                    (name, epoch)
                }
            }
        };
        self.reads.insert(Slot { generation, org, read: key }, Kept { epoch, stored: value });
    }

    /// The organizations followed in `generation`, whose epochs the refresh reads.
    pub fn organizations(&self, generation: u64) -> Vec<Arc<str>> {
        let orgs = self.orgs.read().expect("read cache");
        if orgs.generation != generation {
            return Vec::new();
        }
        orgs.followed.keys().cloned().collect()
    }

    /// Records the epochs a refresh that started at `started` read: an organization whose epoch changed
    /// (or is gone) has its reads dropped, the others are vouched for as of `started`. Organizations idle
    /// for a minute are no longer followed.
    pub fn refreshed(&self, generation: u64, epochs: Vec<(Arc<str>, Option<String>)>, started: Instant) {
        let mut orgs = self.orgs.write().expect("read cache");
        if orgs.generation != generation {
            return;
        }
        let idle_since = self.millis(started).saturating_sub(IDLE.as_millis() as u64);
        for (org, epoch) in epochs {
            let Some(followed) = orgs.followed.get_mut(&org) else { continue };
            let before = followed.vouched.epoch().len();
            let idle = followed.used.load(Ordering::Relaxed) < idle_since;
            let gone = match epoch {
                Some(epoch) if !idle => match followed.vouched.saw(Arc::from(epoch.as_str()), started) {
                    Seen::Same | Seen::Older => continue,
                    Seen::Changed => {
                        orgs.bytes = orgs.bytes + epoch.len() - before;
                        false
                    }
                },
                _ => true,
            };
            if gone {
                orgs.followed.remove(&org);
                orgs.bytes -= org_bytes(org.len(), before);
            }
            orgs.stale = true;
        }
        if std::mem::take(&mut orgs.stale) {
            // One pass over what is kept, for every organization that changed since the last refresh.
            let current = |slot: &Slot, kept: &Kept| {
                orgs.followed.get(&slot.org).is_some_and(|org| org.vouched.epoch() == &kept.epoch)
            };
            self.reads.retain(current);
        }
    }

    /// Drops everything (the read model is not known to be complete, or is gone).
    pub fn forget(&self) {
        let mut orgs = self.orgs.write().expect("read cache");
        orgs.followed.clear();
        orgs.bytes = 0;
        self.reads.clear();
    }

    /// The bytes kept: every kept read's key and value, and the organizations followed.
    pub fn bytes(&self) -> usize {
        self.reads.weight() as usize + self.orgs.read().expect("read cache").bytes
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
