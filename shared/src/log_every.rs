//! A log line that repeats at most once a period: the binaries' warnings about a fault that every request
//! or every fetch meets again (Redis away, a partition that cannot be read) would otherwise flood the log
//! and hide everything else. Each line let through says how many were left out since the last one.

use std::sync::atomic::{AtomicU64, Ordering};

pub struct LogEvery {
    /// When the last line was let through, in milliseconds since the Unix epoch.
    last_ms: AtomicU64,
    skipped: AtomicU64,
    period_ms: u64,
}

impl LogEvery {
    /// At most one line a second.
    pub const fn second() -> Self {
        Self::millis(1000)
    }

    /// At most one line every `period_ms` milliseconds.
    pub const fn millis(period_ms: u64) -> Self {
        Self { last_ms: AtomicU64::new(0), skipped: AtomicU64::new(0), period_ms }
    }

    /// `Some(lines left out since the last one)` when a line may be written now.
    pub fn allow(&self) -> Option<u64> {
        let now =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let last = self.last_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= self.period_ms
            && self.last_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            return Some(self.skipped.swap(0, Ordering::Relaxed));
        }
        self.skipped.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::LogEvery;

    #[test]
    fn a_burst_is_logged_once_with_how_many_were_left_out() {
        let every = LogEvery::second();
        assert_eq!(every.allow(), Some(0));
        for _ in 0..99 {
            assert_eq!(every.allow(), None);
        }
        every.last_ms.store(0, std::sync::atomic::Ordering::Relaxed); // a second later
        assert_eq!(every.allow(), Some(99));
    }
}
