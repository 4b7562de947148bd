//! Keys looked up in Redis and found in no organization, kept in this process so that a client repeating
//! an invalid key is answered 401 without a lookup, and without a throttle's token. They are not kept on
//! the connections Redis pushes changes on: a client sending random keys would fill Redis's tracking table
//! with keys that never change.
//!
//! A key created later must not stay refused, and a missing Redis key is no evidence, so each entry holds
//! the key index's epoch its lookup read in the same script (the projector replaces the epoch whenever it
//! applies an API-key event, and the index and its epoch share one slot). An entry answers only while the
//! epoch Redis pushes the changes of (`crate::read::push`, vouched for by a recent probe) is still that
//! one: one key event anywhere ends every entry at once.
//!
//! Bounded: two tables of at most `INVALID_KEY_CACHE_SIZE` entries each, the older dropped whole when the
//! newer is full (an entry found in the older moves to the newer), so that the keys asked for again stay
//! and memory never passes two tables' worth (about 60 bytes an entry).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

/// What an entry remembers of the epoch: a hash of it (epochs are random tokens).
type EpochHash = u64;

pub struct InvalidKeys {
    cap: usize,
    tables: Mutex<Tables>,
    hasher: std::collections::hash_map::RandomState,
}

#[derive(Default)]
struct Tables {
    newer: HashMap<[u8; 32], EpochHash>,
    older: HashMap<[u8; 32], EpochHash>,
}

impl InvalidKeys {
    /// `None` when `cap` is 0 (nothing kept).
    pub fn new(cap: usize) -> Option<Self> {
        (cap > 0).then(|| InvalidKeys { cap, tables: Mutex::default(), hasher: Default::default() })
    }

    fn hash(&self, epoch: &str) -> EpochHash {
        self.hasher.hash_one(epoch)
    }

    /// Remembers that `key` (its SHA-256 digest) was in no organization while the key index's epoch was
    /// `epoch`.
    pub fn insert(&self, key: [u8; 32], epoch: &str) {
        let epoch = self.hash(epoch);
        let mut tables = self.tables.lock().expect("invalid keys");
        tables.insert(key, epoch, self.cap);
    }

    /// Whether `key` is known to be in no organization while the epoch is `epoch`.
    pub fn contains(&self, key: &[u8; 32], epoch: &str) -> bool {
        let epoch = self.hash(epoch);
        let mut tables = self.tables.lock().expect("invalid keys");
        if let Some(seen) = tables.newer.get(key) {
            return *seen == epoch;
        }
        match tables.older.remove(key) {
            Some(seen) if seen == epoch => {
                tables.insert(*key, seen, self.cap);
                true
            }
            _ => false,
        }
    }

    /// Entries held, in both tables.
    #[cfg(test)]
    fn len(&self) -> usize {
        let tables = self.tables.lock().expect("invalid keys");
        tables.newer.len() + tables.older.len()
    }
}

impl Tables {
    fn insert(&mut self, key: [u8; 32], epoch: EpochHash, cap: usize) {
        if self.newer.len() >= cap && !self.newer.contains_key(&key) {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(key, epoch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> [u8; 32] {
        [n; 32]
    }

    #[test]
    fn an_invalid_key_answers_only_while_the_epoch_is_the_one_its_lookup_read() {
        let invalid = InvalidKeys::new(10).unwrap();
        invalid.insert(key(1), "epoch-a");
        assert!(invalid.contains(&key(1), "epoch-a"));
        // A key event replaced the epoch: the key may exist now.
        assert!(!invalid.contains(&key(1), "epoch-b"));
        assert!(!invalid.contains(&key(2), "epoch-a"), "never looked up");
        assert!(InvalidKeys::new(0).is_none());
    }

    #[test]
    fn at_most_two_tables_are_held_and_keys_asked_for_again_stay() {
        let invalid = InvalidKeys::new(3).unwrap();
        for n in 0..3 {
            invalid.insert(key(n), "e");
        }
        // Full: the next one starts a new table, the three are the older one.
        invalid.insert(key(3), "e");
        assert!(invalid.contains(&key(0), "e"), "found in the older table, moved to the newer");
        for n in 4..6 {
            invalid.insert(key(n), "e");
        }
        // The newer table (3, 0, 4) was full at 5: 1 and 2, not asked for again, are gone.
        assert!(!invalid.contains(&key(1), "e") && !invalid.contains(&key(2), "e"));
        assert!(invalid.contains(&key(0), "e") && invalid.contains(&key(3), "e"));
        for n in 10..100 {
            invalid.insert(key(n), "e");
        }
        assert!(invalid.len() <= 6, "{}", invalid.len());
    }
}
