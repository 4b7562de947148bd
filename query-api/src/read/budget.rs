//! The bytes every request together reads into memory (`MAX_PAGES_MB`), beside each one's own bound
//! (`MAX_PAGE_MB`): a few clients paging interviews of long transcripts at `pageSize=100` at once would
//! otherwise hold a page's bound each, past the pod's memory limit.
//!
//! A read of interviews reserves what is free, up to its own bound, before it asks Redis, and passes that
//! to the page's script as its budget: transcripts beyond it are sent a chunk at a time, as they are past
//! `MAX_PAGE_MB`. Once read, it gives back what it does not hold, and keeps the rest until its answer is
//! written. A chunk of a long transcript takes its share while it is held. Only when less than a chunk is
//! free does a request wait (for at most its `REQUEST_TIMEOUT_MS`, then 503), never for more than that.
//! Counted in KiB, a semaphore's permits.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::transcript::CHUNK;

const KIB: u64 = 1024;

/// The bytes reads may hold, all requests together.
#[derive(Clone)]
pub struct Budget {
    free: Arc<Semaphore>,
    /// All of it, in KiB.
    total: u32,
}

/// What one read holds of the budget: given back when dropped.
#[derive(Debug)]
pub struct Held {
    permit: OwnedSemaphorePermit,
}

impl Budget {
    pub fn new(bytes: u64) -> Self {
        let total = (bytes / KIB).clamp(1, u32::MAX as u64) as u32;
        Budget { free: Arc::new(Semaphore::new(total as usize)), total }
    }

    /// Reserves what is free, up to `want` bytes (and the whole budget); when less than a chunk (or `want`,
    /// if smaller) is free, waits for that much.
    pub async fn reserve(&self, want: u64) -> Held {
        let want = want.div_ceil(KIB).clamp(1, self.total as u64) as u32;
        let floor = want.min((CHUNK / KIB) as u32);
        loop {
            let free = self.free.available_permits().min(u32::MAX as usize) as u32;
            if free < floor {
                let permit = self.free.clone().acquire_many_owned(floor).await.expect("the budget is never closed");
                return Held { permit };
            }
            // Another read may take it first: then look again.
            if let Ok(permit) = self.free.clone().try_acquire_many_owned(free.min(want)) {
                return Held { permit };
            }
        }
    }

    /// Bytes free now.
    #[cfg(test)]
    fn free(&self) -> u64 {
        self.free.available_permits() as u64 * KIB
    }
}

impl Held {
    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.permit.num_permits() as u64 * KIB
    }

    /// Holds what `other` holds too.
    pub fn merge(&mut self, other: Held) {
        self.permit.merge(other.permit);
    }

    /// Gives back what is held beyond `bytes`.
    pub fn keep(&mut self, bytes: u64) {
        let keep = bytes.div_ceil(KIB).max(1) as usize;
        let held = self.permit.num_permits();
        if keep < held {
            drop(self.permit.split(held - keep));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[tokio::test]
    async fn a_read_takes_what_is_free_up_to_its_bound_and_gives_back_what_it_does_not_hold() {
        let budget = Budget::new(10 * MIB);
        let mut first = budget.reserve(8 * MIB).await;
        assert_eq!(first.bytes(), 8 * MIB);
        // Two left: the next read gets two, not its eight, and reads with that.
        let second = budget.reserve(8 * MIB).await;
        assert_eq!((second.bytes(), budget.free()), (2 * MIB, 0));
        // The first held under 300 KiB of it: the rest is free again (counted in whole KiB).
        first.keep(300 * KIB - 100);
        assert_eq!(first.bytes(), 300 * KIB);
        assert_eq!(budget.free(), 10 * MIB - 300 * KIB - 2 * MIB);
        drop((first, second));
        assert_eq!(budget.free(), 10 * MIB);
        let (mut one, other) = (budget.reserve(MIB).await, budget.reserve(2 * MIB).await);
        one.merge(other);
        assert_eq!((one.bytes(), budget.free()), (3 * MIB, 7 * MIB), "one holds both");
        drop(one);
        assert_eq!(budget.free(), 10 * MIB);
    }

    #[tokio::test]
    async fn with_less_than_a_chunk_free_a_read_waits_until_one_is() {
        let budget = Budget::new(4 * MIB);
        let all = budget.reserve(4 * MIB).await;
        let waiting = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(4 * MIB).await.bytes() }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "nothing free: it waits");
        drop(all);
        assert_eq!(waiting.await.unwrap(), CHUNK, "a chunk's worth, the least a read takes");
    }
}
