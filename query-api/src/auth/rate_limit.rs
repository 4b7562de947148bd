//! Throttles of the authentication step, each O(1) per request (`governor`'s GCRA: one atomic state per
//! key, no pruning on the request path):
//! - an optional per-key rate limit (off by default): each API key may make `RATE_LIMIT_BURST` requests
//!   at once, refilled at `RATE_LIMIT_PER_SECOND`; a request past it is answered 429 with `Retry-After`.
//!   Only keys that authenticated get a state, so their number is bounded by the keys there are; states
//!   idle long enough to be full again are dropped in the background ([`RateLimit::prune`]).
//! - lookups of unknown keys: each lookup in Redis that finds no key takes a token of one bucket for the
//!   whole instance (`UNKNOWN_KEYS_PER_SECOND`); while it is empty, keys not kept in memory are not looked
//!   up, and the request is answered 503 with `Retry-After`. Keys kept in memory are never throttled.

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// One state per API key (by its SHA-256).
type PerKey<C> = RateLimiter<[u8; 32], DefaultKeyedStateStore<[u8; 32]>, C, NoOpMiddleware<<C as Clock>::Instant>>;

pub struct RateLimit<C: Clock = DefaultClock> {
    limiter: PerKey<C>,
    clock: C,
}

fn quota(per_second: u32, burst: u32) -> Option<Quota> {
    let per_second = NonZeroU32::new(per_second)?;
    Some(Quota::per_second(per_second).allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN)))
}

impl RateLimit {
    /// `None` when `per_second` is 0 (off).
    pub fn new(per_second: u32, burst: u32) -> Option<Self> {
        Self::with_clock(per_second, burst, DefaultClock::default())
    }
}

impl<C: Clock + Clone> RateLimit<C> {
    fn with_clock(per_second: u32, burst: u32, clock: C) -> Option<Self> {
        let limiter = RateLimiter::new(quota(per_second, burst)?, DefaultKeyedStateStore::default(), clock.clone());
        Some(Self { limiter, clock })
    }

    /// Takes a token for `key` (its SHA-256 digest); without one, how long until there is one.
    pub fn take(&self, key: &[u8; 32]) -> Result<(), Duration> {
        self.limiter.check_key(key).map_err(|not_until| not_until.wait_time_from(self.clock.now()))
    }

    /// Drops the states of keys idle long enough to have a full burst again (they would start afresh).
    pub fn prune(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

/// The throttle of lookups of unknown keys.
pub struct UnknownKeys<C: Clock = DefaultClock> {
    limiter: RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<C::Instant>>,
    clock: C,
    /// Until when lookups are refused, once the bucket is empty.
    closed_until: Mutex<Option<Instant>>,
}

impl UnknownKeys {
    /// `None` when `per_second` is 0 (no throttle).
    pub fn new(per_second: u32) -> Option<Self> {
        Self::with_clock(per_second, DefaultClock::default())
    }
}

impl<C: Clock + Clone> UnknownKeys<C> {
    fn with_clock(per_second: u32, clock: C) -> Option<Self> {
        let limiter = RateLimiter::direct_with_clock(quota(per_second, per_second)?, clock.clone());
        Some(Self { limiter, clock, closed_until: Mutex::new(None) })
    }

    /// Whether a key not kept in memory may be looked up at `now`; if not, for how long it may not.
    pub fn admits(&self, now: Instant) -> Result<(), Duration> {
        match *self.closed_until.lock().expect("unknown keys") {
            Some(until) if until > now => Err(until - now),
            _ => Ok(()),
        }
    }

    /// Counts a lookup at `now` that found no key.
    pub fn unknown(&self, now: Instant) {
        if let Err(not_until) = self.limiter.check() {
            let wait = not_until.wait_time_from(self.clock.now());
            *self.closed_until.lock().expect("unknown keys") = Some(now + wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::*;

    #[test]
    fn a_key_gets_its_burst_then_one_request_per_interval_and_other_keys_are_not_affected() {
        let clock = FakeRelativeClock::default();
        let limit = RateLimit::with_clock(2, 3, clock.clone()).expect("on");
        for _ in 0..3 {
            assert_eq!(limit.take(&[1; 32]), Ok(()));
        }
        let wait = limit.take(&[1; 32]).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500), "one token every half second");
        assert_eq!(limit.take(&[2; 32]), Ok(()), "buckets are per key");
        clock.advance(Duration::from_millis(500));
        assert_eq!(limit.take(&[1; 32]), Ok(()));
        assert!(limit.take(&[1; 32]).is_err());
        // Idle long enough, the bucket is full again, never fuller.
        clock.advance(Duration::from_secs(60));
        for _ in 0..3 {
            assert_eq!(limit.take(&[1; 32]), Ok(()));
        }
        assert!(limit.take(&[1; 32]).is_err());
    }

    #[test]
    fn idle_keys_are_pruned_and_off_is_no_limit_at_all() {
        let clock = FakeRelativeClock::default();
        let limit = RateLimit::with_clock(2, 3, clock.clone()).expect("on");
        for key in 0..100u8 {
            limit.take(&[key; 32]).unwrap();
        }
        assert_eq!(limit.limiter.len(), 100);
        clock.advance(Duration::from_secs(2));
        limit.prune();
        assert_eq!(limit.limiter.len(), 0);
        assert!(RateLimit::new(0, 10).is_none());
    }

    #[test]
    fn past_its_rate_of_unknown_keys_an_instance_looks_up_no_key_it_does_not_keep_for_a_while() {
        let clock = FakeRelativeClock::default();
        let throttle = UnknownKeys::with_clock(10, clock.clone()).expect("on");
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(throttle.admits(t0), Ok(()));
            throttle.unknown(t0);
        }
        assert_eq!(throttle.admits(t0), Ok(()), "the burst is spent, not yet exceeded");
        throttle.unknown(t0);
        let wait = throttle.admits(t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100), "one lookup every tenth of a second");
        assert_eq!(throttle.admits(t0 + wait), Ok(()));
        assert!(UnknownKeys::new(0).is_none());
    }
}
