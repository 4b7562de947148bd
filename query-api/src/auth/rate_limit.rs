//! An optional per-key rate limit (off by default): each API key gets a token bucket of
//! `RATE_LIMIT_BURST` requests, refilled at `RATE_LIMIT_PER_SECOND`; a request without a token is
//! answered 429 with `Retry-After`. Buckets exist only for keys that authenticated, so their number is
//! bounded by the keys there are; idle ones are dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Above this many buckets, those idle long enough to be full again are dropped.
const PRUNE_ABOVE: usize = 10_000;

pub struct RateLimit {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<[u8; 32], Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    /// `None` when `per_second` is 0 (off).
    pub fn new(per_second: u32, burst: u32) -> Option<Self> {
        (per_second > 0).then(|| Self {
            per_second: f64::from(per_second),
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        })
    }

    /// Takes a token for `key` (its SHA-256 digest) at `now`; without one, how long until there is one.
    pub fn take(&self, key: &[u8; 32], now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().expect("rate-limit buckets");
        if buckets.len() > PRUNE_ABOVE {
            let full_after = Duration::from_secs_f64(self.burst / self.per_second);
            buckets.retain(|_, b| now.duration_since(b.at) < full_after);
        }
        let bucket = buckets.entry(*key).or_insert(Bucket { tokens: self.burst, at: now });
        let refilled = bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * self.per_second;
        bucket.tokens = refilled.min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / self.per_second))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_its_burst_then_one_request_per_interval_and_other_keys_are_not_affected() {
        let limit = RateLimit::new(2, 3).expect("on");
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(limit.take(&[1; 32], t0), Ok(()));
        }
        let wait = limit.take(&[1; 32], t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500), "one token every half second");
        assert_eq!(limit.take(&[2; 32], t0), Ok(()), "buckets are per key");
        assert_eq!(limit.take(&[1; 32], t0 + Duration::from_millis(500)), Ok(()));
        assert!(limit.take(&[1; 32], t0 + Duration::from_millis(500)).is_err());
        // Idle long enough, the bucket is full again, never fuller.
        for _ in 0..3 {
            assert_eq!(limit.take(&[1; 32], t0 + Duration::from_secs(60)), Ok(()));
        }
        assert!(limit.take(&[1; 32], t0 + Duration::from_secs(60)).is_err());
    }

    #[test]
    fn off_is_no_limit_at_all() {
        assert!(RateLimit::new(0, 10).is_none());
    }
}
