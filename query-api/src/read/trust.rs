//! What vouches for data kept in memory: an epoch, and when the read that found it started.
//!
//! The projector writes a new random token to an epoch with every change it applies (the key index's for
//! API keys, an organization's for its reads), in the same script as the change. What the API keeps is
//! tagged with the epoch it was read with, and the background refresh reads the epochs a few times a
//! second. Kept data answers only while its epoch is the one last read and that read started less than
//! [`TRUSTED_FOR`] ago: so an answer from memory is never more than that behind Redis, even when the
//! refreshes fail. Both caches (`crate::auth::key_cache`, [`crate::read::cache`]) use this one type.

use std::time::{Duration, Instant};

/// How long after its start a read of an epoch vouches for what is kept under it.
pub const TRUSTED_FOR: Duration = Duration::from_millis(750);

/// An epoch as last read, and when that read started.
#[derive(Debug, Clone)]
pub struct Vouched<E> {
    epoch: E,
    read_at: Instant,
}

/// What a read of the epoch changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The same epoch: vouched for as of the later of the two reads.
    Same,
    /// Another epoch, read after the one kept: it replaces it, and what was kept under the old one is stale.
    Changed,
    /// Another epoch, read before the one kept was: ignored.
    Older,
}

impl<E: PartialEq> Vouched<E> {
    pub fn new(epoch: E, read_at: Instant) -> Self {
        Self { epoch, read_at }
    }

    pub fn epoch(&self) -> &E {
        &self.epoch
    }

    /// Whether data kept under `epoch` may answer at `now`.
    pub fn vouches_for(&self, epoch: &E, now: Instant) -> bool {
        self.epoch == *epoch && self.is_recent(now)
    }

    /// Whether the latest read of the epoch started less than [`TRUSTED_FOR`] before `now`.
    pub fn is_recent(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.read_at) < TRUSTED_FOR
    }

    /// Records a read that started at `read_at` and found `epoch`.
    pub fn saw(&mut self, epoch: E, read_at: Instant) -> Seen {
        if self.epoch == epoch {
            self.read_at = self.read_at.max(read_at);
            Seen::Same
        } else if self.read_at > read_at {
            Seen::Older
        } else {
            *self = Self { epoch, read_at };
            Seen::Changed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epoch_vouches_only_for_its_own_data_and_only_for_a_while() {
        let t0 = Instant::now();
        let vouched = Vouched::new("a", t0);
        assert!(vouched.vouches_for(&"a", t0 + TRUSTED_FOR - Duration::from_millis(1)));
        assert!(!vouched.vouches_for(&"a", t0 + TRUSTED_FOR));
        assert!(!vouched.vouches_for(&"b", t0));
    }

    #[test]
    fn a_later_read_renews_or_replaces_and_an_earlier_one_changes_nothing() {
        let t0 = Instant::now();
        let mut vouched = Vouched::new("a", t0);
        assert_eq!(vouched.saw("a", t0 + TRUSTED_FOR), Seen::Same);
        assert!(vouched.vouches_for(&"a", t0 + TRUSTED_FOR));
        assert_eq!(vouched.saw("a", t0), Seen::Same, "an older read of the same epoch renews nothing");
        assert!(vouched.is_recent(t0 + TRUSTED_FOR + Duration::from_millis(1)));
        assert_eq!(vouched.saw("b", t0 + Duration::from_millis(1)), Seen::Older);
        assert_eq!(vouched.epoch(), &"a");
        assert_eq!(vouched.saw("b", t0 + TRUSTED_FOR * 2), Seen::Changed);
        assert!(vouched.vouches_for(&"b", t0 + TRUSTED_FOR * 2) && !vouched.vouches_for(&"a", t0 + TRUSTED_FOR * 2));
    }
}
