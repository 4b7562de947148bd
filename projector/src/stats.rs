//! Counters of what the projector did, shared by the consumer loop and whoever reports them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub struct Stats {
    pub batches: AtomicU64,
    pub applied: AtomicU64,
    pub duplicates: AtomicU64,
    pub gaps: AtomicU64,
    pub refused: AtomicU64,
    pub skipped: AtomicU64,
    pub dead_lettered: AtomicU64,
    /// Attempts to apply a batch or write dead letters that failed and were retried.
    pub retries: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub batches: u64,
    pub applied: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub refused: u64,
    pub skipped: u64,
    pub dead_lettered: u64,
    pub retries: u64,
}

impl Stats {
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            batches: self.batches.load(Relaxed),
            applied: self.applied.load(Relaxed),
            duplicates: self.duplicates.load(Relaxed),
            gaps: self.gaps.load(Relaxed),
            refused: self.refused.load(Relaxed),
            skipped: self.skipped.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            retries: self.retries.load(Relaxed),
        }
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }
}
