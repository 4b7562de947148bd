//! The bookkeeping of what the tracker keeps (each entry's kind, state, connection and age; counts and
//! bytes by kind) and the one rule that decides whether a kept value may still answer ([`vouched`]),
//! with time passed in as a value so that the rule is tested without a clock or a connection.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::{ABSENT_FOR, TRUSTED_FOR};

/// What the map holds for each entry besides the key's and the value's bytes.
const ENTRY_OVERHEAD: usize = 96;

/// What a kept value is for: each kind has its own capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// An API key's entry in the key index.
    Key,
    /// An organization's epoch.
    Org,
    /// A key of the read model's condition (its active generation, its healing entries): a change wakes
    /// [`super::Tracker::changed`]. Not counted against any capacity, never forgotten for being idle.
    Watch,
}

/// How many values of each kind may be kept.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    pub keys: usize,
    pub orgs: usize,
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
    pub bytes: usize,
}

pub(super) fn weight(key: &str, state: &State) -> usize {
    ENTRY_OVERHEAD + key.len() + if let State::Known(known) = state { known.len() } else { 0 }
}

impl Entries {
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
    if *known == Known::Absent && now.saturating_sub(read_ms) >= ABSENT_FOR.as_millis() as u64 {
        return false;
    }
    let Some(serving) = serving else { return false };
    let recent = serving.vouched_ms > 0 && now.saturating_sub(serving.vouched_ms) < TRUSTED_FOR.as_millis() as u64;
    serving.node == node && serving.alive && recent
}

#[cfg(test)]
#[path = "kept_tests.rs"]
mod tests;
