//! Where the read model records the organization each aggregate belongs to (its owner: the organization
//! of its first event), so that an event naming another organization is refused. The projector claims the
//! record before it reads the aggregate's state, in the same round trip; a repair and `dlq replay` read it.
//!
//! Up to layout 2 each owner is a string of its own: 150 to 165 bytes of Redis for ids of 26 characters,
//! most of it the key's overhead and name. From layout 3 an aggregate type's owners are fields of
//! [`BUCKETS`] hashes, the aggregate's id choosing the hash by its CRC16. Redis keeps a hash of up to
//! `hash-max-listpack-entries` fields (512 by default from Redis 7) as one listpack: 84 bytes per owner at
//! 100,000 owners, 57 at a million, 54 at ten million (`scripts/bench-owners`), so up to 16.7 million
//! aggregates of a type (past that, hash tables). A lookup scans its hash's listpack: at ten million, in
//! a hash of 355 fields, Redis answers half as many `HSETNX` or `HGET` a second as `SET NX GET` of a key.
//!
//! The layout decides, not what is found: a generation of layout 1 or 2 keeps its owners as keys, so a
//! release that writes layout 3 rolls out on one, and a rebuild moves them.

use crate::keys::Keyspace;
use crate::Topic;

/// The first layout that keeps owners in shared hashes.
pub const BUCKETED_FROM_LAYOUT: u32 = 3;

/// How many hashes hold one aggregate type's owners: sized for ten million interviews, some 300 a hash.
pub const BUCKETS: u16 = 32_768;

/// Where one aggregate's owner is recorded in a generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A string of its own (layouts 1 and 2).
    Key(String),
    /// The aggregate's id, a field of one of its type's hashes (from layout 3).
    Field { hash: String, id: String },
}

impl Record {
    /// The record of `topic`'s aggregate `id` in the generation `keys` names, of `layout`.
    pub fn of(keys: &Keyspace, topic: Topic, id: &str, layout: u32) -> Self {
        if layout >= BUCKETED_FROM_LAYOUT {
            Record::Field { hash: keys.owners(topic, bucket(id)), id: id.to_string() }
        } else {
            Record::Key(keys.owner(topic, id))
        }
    }
}

/// The hash an aggregate's id falls in: its CRC16 (XMODEM, as Redis Cluster's slots), which spreads ids
/// evenly and is the same in every process and release.
pub fn bucket(id: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(id.as_bytes()) % BUCKETS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_three_keeps_owners_in_shared_hashes_and_the_layouts_before_a_key_each() {
        let keys = Keyspace::new("rm", 4);
        for layout in [1, 2] {
            assert_eq!(Record::of(&keys, Topic::Study, "s:1", layout), Record::Key("rm:g4:owner:study:s:1".into()));
        }
        let Record::Field { hash, id } = Record::of(&keys, Topic::Interview, "i-1", 3) else { panic!("a field") };
        assert_eq!((hash.as_str(), id.as_str()), (format!("rm:g4:owners:interview:{}", bucket("i-1")).as_str(), "i-1"));
        assert_eq!(keys.owners_of(&hash), Some(Topic::Interview));
    }

    #[test]
    fn ids_spread_evenly_over_the_hashes() {
        let mut counts = vec![0u32; BUCKETS as usize];
        let ids = 20 * BUCKETS as u32;
        for n in 0..ids {
            counts[bucket(&format!("01HZX{n:08}")) as usize] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        // Twenty on average: no hash empty, none past three times that.
        assert!(*min > 0 && *max < 60, "{min} to {max}");
    }
}
