//! The bookkeeping of what the tracker keeps (each entry's kind, state, connection and age; counts by
//! kind, and the bytes the process holds for them all, its table's included) and the one rule that
//! decides whether a kept value may still answer ([`vouched`]), with time passed in as a value so that
//! the rule is tested without a clock or a connection.

use std::collections::HashMap;
use std::mem::size_of;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::{ABSENT_FOR, TRUSTED_FOR};

/// What the table holds for each of its buckets, used or not: the key's box and the entry, and a control
/// byte (std's `HashMap`, hashbrown's layout).
const BUCKET: usize = size_of::<(Box<str>, Entry)>() + 1;

/// What a kept value is for: each kind has its own capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An API key's entry in the key index.
    Key,
    /// The key index's epoch, which vouches for the keys kept as invalid (one per generation; counted
    /// against the keys' capacity).
    KeyIndex,
    /// An organization's epoch.
    Org,
    /// A key of the read model's condition (its active generation, its healing entries): a change wakes
    /// [`super::Tracker::changed`]. Not counted against any capacity, never forgotten for being idle.
    Watch,
}

/// How many values of each kind may be kept, and the bytes all of them may take.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    pub keys: usize,
    pub orgs: usize,
    /// What keys and epochs together may hold: their own allocations and the table's
    /// ([`Entries::held`]).
    pub bytes: usize,
}

/// What a kept key held when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// The key's value.
    Value(Arc<str>),
    /// The key did not exist (an unknown API key, an organization with no epoch yet).
    Absent,
}

impl Known {
    fn len(&self) -> usize {
        match self {
            Known::Value(value) => value.len(),
            Known::Absent => 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum State {
    /// A read is on its way; the number tells it from a later one. An invalidation meanwhile removes the
    /// entry, so the read's answer, maybe older than the change, is not kept.
    Pending(u64),
    Known(Known),
}

pub(super) struct Entry {
    pub kind: Kind,
    pub state: State,
    /// The connection it was read on.
    pub node: u64,
    /// When its read was sent, and when it was last asked for (ms since the tracker started).
    pub read_ms: u64,
    pub used_ms: AtomicU64,
}

#[derive(Default)]
pub(super) struct Entries {
    pub map: HashMap<Box<str>, Entry>,
    pub counts: HashMap<Kind, usize>,
    /// The entries' own allocations ([`weight`]); the table's are [`Entries::held`]'s to add.
    pub bytes: usize,
}

/// The bytes an entry allocates besides its bucket: its key, and its value (an `Arc<str>`: two counts and
/// the text).
pub(super) fn weight(key: &str, state: &State) -> usize {
    let value = match state {
        State::Known(known @ Known::Value(_)) => 2 * size_of::<usize>() + known.len(),
        _ => 0,
    };
    key.len() + value
}

/// The buckets of a table that holds `capacity` entries before it grows (hashbrown keeps 1 in 8 free).
fn buckets(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        1..8 => (capacity + 1).next_power_of_two(),
        _ => capacity / 7 * 8,
    }
}

/// The bytes of a table of `buckets` buckets (and its trailing group of control bytes).
fn table_bytes(buckets: usize) -> usize {
    if buckets == 0 {
        0
    } else {
        buckets * BUCKET + 16
    }
}

impl Entries {
    /// The bytes held for what is kept: every entry's allocations, and the table, free buckets included.
    pub fn held(&self) -> usize {
        self.bytes + table_bytes(buckets(self.map.capacity()))
    }

    /// Whether keeping `key` (its value not yet read) keeps [`Self::held`] within `budget`, counting the
    /// table it grows into when it is full.
    pub fn room_for(&self, key: &str, budget: usize) -> bool {
        let now = buckets(self.map.capacity());
        let table = if self.map.len() < self.map.capacity() { now } else { (2 * now).max(4) };
        self.bytes + key.len() + table_bytes(table) <= budget
    }

    /// Adds `key`, not kept yet, with its `entry`.
    pub fn insert(&mut self, key: &str, entry: Entry) {
        self.bytes += weight(key, &entry.state);
        *self.counts.entry(entry.kind).or_default() += 1;
        self.map.insert(key.into(), entry);
    }

    pub fn remove(&mut self, key: &str) {
        if let Some(entry) = self.map.remove(key) {
            *self.counts.entry(entry.kind).or_default() -= 1;
            self.bytes -= weight(key, &entry.state);
        }
    }

    pub fn retain(&mut self, keep: impl Fn(&Entry) -> bool) {
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

    pub fn set(&mut self, key: &str, state: State) {
        if let Some(entry) = self.map.get_mut(key) {
            self.bytes = self.bytes + weight(key, &state) - weight(key, &entry.state);
            entry.state = state;
        }
    }
}

/// The connection that serves a kept key's slot now, as the rule sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Serving {
    pub node: u64,
    pub alive: bool,
    /// When the last probe it answered was sent (ms since the tracker started; 0: none yet).
    pub vouched_ms: u64,
}

/// Whether what was `known` of a key, read at `read_ms` on connection `node`, may answer at `now`: the
/// connection serving the key's slot now is the one it was read on, is alive, and answered a probe sent
/// less than [`TRUSTED_FOR`] ago (a probe is answered only after every change Redis pushed before it);
/// a value saying the key does not exist is also younger than [`ABSENT_FOR`]. Decided from the age of
/// the last answer at the moment of asking, not by a timer having fired: a process that did not get
/// the CPU for a while stops trusting at once.
pub(super) fn vouched(known: &Known, node: u64, read_ms: u64, serving: Option<Serving>, now: u64) -> bool {
    if aged(known, read_ms, now) {
        return false;
    }
    let Some(serving) = serving else { return false };
    let recent = serving.vouched_ms > 0 && now.saturating_sub(serving.vouched_ms) < TRUSTED_FOR.as_millis() as u64;
    serving.node == node && serving.alive && recent
}

/// Whether `known`, read at `read_ms`, says a key does not exist and is too old at `now` to be believed,
/// whatever its connection vouches for.
pub(super) fn aged(known: &Known, read_ms: u64, now: u64) -> bool {
    *known == Known::Absent && now.saturating_sub(read_ms) >= ABSENT_FOR.as_millis() as u64
}

#[cfg(test)]
#[path = "kept_tests.rs"]
mod tests;
