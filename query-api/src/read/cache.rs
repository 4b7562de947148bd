//! Reads of the read model kept in memory (`READ_CACHE_MB`, 64 MiB unless set; 0 for none), so that a
//! request for a page that has not changed is answered without a Redis round trip, and a change is served
//! as soon as Redis says it happened.
//!
//! Every write the projector applies to an organization writes a new token to that organization's epoch
//! (`Keyspace::org_epoch`), in the same script. Every read of an organization returns the epoch with the
//! data, from the same script, and is kept tagged with it. A kept read answers only while its epoch is the
//! organization's epoch as Redis last pushed it ([`super::push`]): a change invalidates the epoch kept
//! there at once, and the next request reads Redis. Another generation drops everything.
//!
//! Memory is bounded by construction: every kept read is weighed by what it allocates, its key included
//! (the id a request asked for, at most [`super::MAX_ID_BYTES`]), and the cache's own table and entry
//! slots, which grow with the number of reads kept and are not weighed, are taken off the budget as they
//! grow. Past the budget, reads are evicted one at a time (`quick_cache`'s CLOCK-Pro: the least recently
//! asked for go first), never all at once. A read of an epoch that is no longer current is never served
//! again; it is replaced by the next read of the same page, or evicted.

use std::hash::{Hash, Hasher};
use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::{Equivalent, Weighter};

use super::model::{InterviewRead, Page};

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
            doc.heap_bytes() + transcript.heap_bytes()
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

/// The weight of a kept read is the bytes it allocates: what its key and value point to. Their own slot in
/// the cache is the cache's structures' ([`ReadCache::bytes`]).
#[derive(Clone)]
struct Weigh;

impl Weighter<Slot, Kept> for Weigh {
    fn weight(&self, slot: &Slot, kept: &Kept) -> u64 {
        entry_bytes(slot, kept) as u64
    }
}

fn entry_bytes(slot: &Slot, kept: &Kept) -> usize {
    slot.read.heap_bytes()
        + 2 * size_of::<usize>()
        + slot.org.len()
        + 2 * size_of::<usize>()
        + kept.epoch.len()
        + kept.stored.heap_bytes()
}

pub struct ReadCache {
    reads: quick_cache::sync::Cache<Slot, Kept, Weigh>,
    /// The generation of what is kept: a read of another one drops everything first.
    generation: AtomicU64,
    /// What the cache may hold, structures and reads.
    budget: u64,
}

impl ReadCache {
    /// A cache of at most `budget` bytes; `None` when it is 0 (every request reads Redis).
    pub fn new(budget: usize) -> Option<Self> {
        (budget > 0).then(|| {
            let reads = quick_cache::sync::Cache::with_weighter((budget / 4096).max(64), budget as u64, Weigh);
            Self { reads, generation: AtomicU64::new(0), budget: budget as u64 }
        })
    }

    /// The read kept for `key` of `org` in `generation`, if it was read at `current`, the organization's
    /// epoch as Redis last pushed it; with that epoch.
    pub fn get(&self, generation: u64, org: &str, key: &ReadKey, current: &str) -> Option<(Stored, Arc<str>)> {
        let kept = self.reads.get(&SlotRef { generation, org, read: key })?;
        (*kept.epoch == *current).then_some((kept.stored, kept.epoch))
    }

    /// Keeps a read of Redis that found the organization at `epoch` (`None`: the read model has no epoch
    /// for it, and nothing is kept).
    pub fn insert(&self, generation: u64, org: &str, key: ReadKey, value: Stored, epoch: Option<&Arc<str>>) {
        let Some(epoch) = epoch else { return };
        if self.generation.swap(generation, Ordering::AcqRel) != generation {
            self.reads.clear();
        }
        self.reads
            .insert(Slot { generation, org: Arc::from(org), read: key }, Kept { epoch: epoch.clone(), stored: value });
        self.fit();
    }

    /// Keeps the reads' share of the budget at what the cache's structures leave. They grow by doubling as
    /// more reads are kept and never shrink, so the share is lowered a few times in the cache's life, each
    /// time a 64th below what is left, so that the next growth rarely needs another.
    fn fit(&self) {
        let room = self.budget.saturating_sub(self.structures() as u64);
        if room < self.reads.capacity() {
            self.reads.set_capacity(room.saturating_sub(self.budget / 64));
        }
    }

    /// Drops everything (the read model is not known to be complete, or is gone).
    pub fn forget(&self) {
        self.reads.clear();
    }

    /// The bytes held: the cache's structures, and what every kept read's key and value point to.
    pub fn bytes(&self) -> usize {
        self.reads.weight() as usize + self.structures()
    }

    /// The bytes of the cache's table and entry slots. quick_cache counts the slots in use; the vector
    /// that holds them grows by doubling, so they are counted twice.
    fn structures(&self) -> usize {
        let used = self.reads.memory_used();
        used.map + 2 * used.entries
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;
