//! Throttles of the authentication step, each O(1) per request (`governor`'s GCRA: one atomic state per
//! key, no pruning on the request path):
//! - an optional per-key rate limit (off by default): each API key may make `RATE_LIMIT_BURST` requests
//!   at once, refilled at `RATE_LIMIT_PER_SECOND`; a request past it is answered 429 with `Retry-After`.
//!   Only keys that authenticated get a state, so their number is bounded by the keys there are; states
//!   idle long enough to be full again are dropped in the background ([`RateLimit::prune`]).
//! - lookups of unknown keys: each lookup in Redis that finds no key takes a token of its client's bucket
//!   (`UNKNOWN_KEYS_PER_SECOND`, per [`Client`]); while it is empty, that client's keys not kept in memory
//!   are not looked up, and its request is answered 429 with `Retry-After`. One client sending random
//!   keys is throttled alone; keys kept in memory are never throttled.
//!
//! A key's standing after each request is reported in the `RateLimit-Policy` and `RateLimit` headers
//! ([`RateLimit::policy`], [`Standing::header`]), so clients can pace themselves before a 429.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::middleware::{NoOpMiddleware, StateInformationMiddleware};
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};

use super::client::Client;

/// One state per API key (by its SHA-256), which reports what is left after each request.
type PerKey<C> = RateLimiter<[u8; 32], DefaultKeyedStateStore<[u8; 32]>, C, StateInformationMiddleware>;

/// The response headers of the rate limit.
pub const RATE_LIMIT_POLICY: &str = "ratelimit-policy";
pub const RATE_LIMIT: &str = "ratelimit";

/// The name of the one policy in the `RateLimit-Policy` and `RateLimit` headers.
const POLICY: &str = "default";

pub struct RateLimit<C: Clock = DefaultClock> {
    limiter: PerKey<C>,
    clock: C,
    /// Requests a key may make at once: the bucket's size.
    burst: u32,
    /// How long the bucket takes to get one token back.
    interval: Duration,
}

/// Where a key's bucket stands after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    /// Requests the key may still make at once.
    pub remaining: u32,
    /// How long until the bucket is full again, if no request is made meanwhile.
    pub full_in: Duration,
}

/// A request past the key's rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// How long until a token is back (`Retry-After`).
    pub wait: Duration,
    pub standing: Standing,
}

/// Where the authentication step reports a key's [`Standing`] for the response's headers: put in a
/// request's extensions before it is handled, read once its response is written.
#[derive(Debug, Clone, Default)]
pub struct Report(Arc<OnceLock<Standing>>);

impl Report {
    pub fn set(&self, standing: Standing) {
        let _ = self.0.set(standing);
    }

    pub fn get(&self) -> Option<Standing> {
        self.0.get().copied()
    }
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
        let quota = quota(per_second, burst)?;
        let limiter = RateLimiter::new(quota, DefaultKeyedStateStore::default(), clock.clone());
        let (burst, interval) = (quota.burst_size().get(), quota.replenish_interval());
        Some(Self { limiter, clock, burst, interval })
    }

    /// Takes a token for `key` (its SHA-256 digest) and says where its bucket stands; without a token, how
    /// long until there is one.
    ///
    /// GCRA keeps when the bucket will be full again but tells only the tokens left, so `full_in` is
    /// counted from them: a token back every interval. It is exact after a burst and at most one interval
    /// late otherwise, never early. A refused request leaves the bucket empty: it is full once the next
    /// token is back and `burst - 1` more after it.
    pub fn take(&self, key: &[u8; 32]) -> Result<Standing, Refused> {
        match self.limiter.check_key(key) {
            Ok(snapshot) => {
                let remaining = snapshot.remaining_burst_capacity().min(self.burst);
                Ok(Standing { remaining, full_in: self.interval * (self.burst - remaining) })
            }
            Err(not_until) => {
                let wait = not_until.wait_time_from(self.clock.now());
                let full_in = wait + self.interval * (self.burst - 1);
                Err(Refused { wait, standing: Standing { remaining: 0, full_in } })
            }
        }
    }

    /// The `RateLimit-Policy` header (IETF draft httpapi-ratelimit-headers, structured-field form):
    /// `"default";q=<burst>;w=<window>`. A token bucket has no fixed window, so the policy says what the
    /// bucket holds (`q`, the burst) and how long it takes to fill from empty (`w`, burst × interval, in
    /// whole seconds rounded up, at least 1): `q / w` is the sustained rate when the burst takes a second
    /// or more to refill, and below it (never above) otherwise. A client that waits `w` seconds without a
    /// request may make `q` at once again.
    pub fn policy(&self) -> String {
        format!("\"{POLICY}\";q={};w={}", self.burst, seconds(self.interval * self.burst))
    }
}

impl Standing {
    /// The `RateLimit` header: `"default";r=<remaining>;t=<seconds until the bucket is full again>`,
    /// rounded up.
    pub fn header(&self) -> String {
        format!("\"{POLICY}\";r={};t={}", self.remaining, seconds(self.full_in))
    }
}

/// Whole seconds, rounded up, at least 1.
fn seconds(duration: Duration) -> u64 {
    duration.as_secs_f64().ceil().max(1.0) as u64
}

impl<C: Clock + Clone> RateLimit<C> {
    /// Drops the states of keys idle long enough to have a full burst again (they would start afresh).
    pub fn prune(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

/// The throttle of lookups of unknown keys, one bucket per client.
pub struct UnknownKeys<C: Clock = DefaultClock> {
    limiter: RateLimiter<Client, DefaultKeyedStateStore<Client>, C, NoOpMiddleware<C::Instant>>,
    clock: C,
    /// Until when each client whose bucket is empty has its lookups refused.
    closed: Mutex<HashMap<Client, Instant>>,
}

impl UnknownKeys {
    /// `None` when `per_second` is 0 (no throttle).
    pub fn new(per_second: u32) -> Option<Self> {
        Self::with_clock(per_second, DefaultClock::default())
    }
}

impl<C: Clock + Clone> UnknownKeys<C> {
    fn with_clock(per_second: u32, clock: C) -> Option<Self> {
        let limiter =
            RateLimiter::new(quota(per_second, per_second)?, DefaultKeyedStateStore::default(), clock.clone());
        Some(Self { limiter, clock, closed: Mutex::new(HashMap::new()) })
    }

    /// Whether a key not kept in memory may be looked up for `client` at `now`; if not, for how long it may
    /// not.
    pub fn admits(&self, client: Client, now: Instant) -> Result<(), Duration> {
        match self.closed.lock().expect("unknown keys").get(&client) {
            Some(until) if *until > now => Err(*until - now),
            _ => Ok(()),
        }
    }

    /// Counts a lookup for `client` at `now` that found no key.
    pub fn unknown(&self, client: Client, now: Instant) {
        if let Err(not_until) = self.limiter.check_key(&client) {
            let wait = not_until.wait_time_from(self.clock.now());
            self.closed.lock().expect("unknown keys").insert(client, now + wait);
        }
    }

    /// Drops the buckets of clients idle long enough to be full again, and the refusals that ended.
    pub fn prune(&self, now: Instant) {
        self.closed.lock().expect("unknown keys").retain(|_, until| *until > now);
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    /// Clients with a bucket or a refusal kept.
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.limiter.len() + self.closed.lock().expect("unknown keys").len()
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
            assert!(limit.take(&[1; 32]).is_ok());
        }
        let wait = limit.take(&[1; 32]).unwrap_err().wait;
        assert_eq!(wait, Duration::from_millis(500), "one token every half second");
        assert!(limit.take(&[2; 32]).is_ok(), "buckets are per key");
        clock.advance(Duration::from_millis(500));
        assert!(limit.take(&[1; 32]).is_ok());
        assert!(limit.take(&[1; 32]).is_err());
        // Idle long enough, the bucket is full again, never fuller.
        clock.advance(Duration::from_secs(60));
        for _ in 0..3 {
            assert!(limit.take(&[1; 32]).is_ok());
        }
        assert!(limit.take(&[1; 32]).is_err());
    }

    #[test]
    fn the_headers_count_the_tokens_left_and_the_seconds_until_the_bucket_is_full_again() {
        let clock = FakeRelativeClock::default();
        let limit = RateLimit::with_clock(2, 5, clock.clone()).expect("on");
        assert_eq!(limit.policy(), "\"default\";q=5;w=3", "five tokens, refilled in 2.5 s");
        let headers: Vec<String> = (0..5).map(|_| limit.take(&[1; 32]).unwrap().header()).collect();
        assert_eq!(
            headers,
            [
                "\"default\";r=4;t=1",
                "\"default\";r=3;t=1",
                "\"default\";r=2;t=2",
                "\"default\";r=1;t=2",
                "\"default\";r=0;t=3"
            ]
        );
        let refused = limit.take(&[1; 32]).unwrap_err();
        assert_eq!(refused.wait, Duration::from_millis(500));
        assert_eq!(refused.standing, Standing { remaining: 0, full_in: Duration::from_millis(2500) });
        clock.advance(Duration::from_millis(1000));
        let standing = limit.take(&[1; 32]).unwrap();
        assert_eq!(standing, Standing { remaining: 1, full_in: Duration::from_millis(2000) });
        // Slow refills: one token a second, a burst of one.
        let slow = RateLimit::with_clock(1, 1, clock.clone()).expect("on");
        assert_eq!(slow.policy(), "\"default\";q=1;w=1");
        assert_eq!(slow.take(&[1; 32]).unwrap().header(), "\"default\";r=0;t=1");
        // A rate above the burst: the window is still a whole second.
        let fast = RateLimit::with_clock(100, 10, clock).expect("on");
        assert_eq!(fast.policy(), "\"default\";q=10;w=1");
    }

    #[test]
    fn a_report_keeps_the_first_standing_it_is_given() {
        let report = Report::default();
        assert_eq!(report.get(), None);
        let standing = Standing { remaining: 3, full_in: Duration::from_secs(1) };
        report.clone().set(standing);
        report.set(Standing { remaining: 0, full_in: Duration::ZERO });
        assert_eq!(report.get(), Some(standing));
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
    fn past_its_rate_of_unknown_keys_a_client_gets_no_key_looked_up_for_a_while_and_others_do() {
        let clock = FakeRelativeClock::default();
        let throttle = UnknownKeys::with_clock(10, clock.clone()).expect("on");
        let (abuser, other) = (Client::of([203, 0, 113, 7].into()), Client::of([198, 51, 100, 1].into()));
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(throttle.admits(abuser, t0), Ok(()));
            throttle.unknown(abuser, t0);
        }
        assert_eq!(throttle.admits(abuser, t0), Ok(()), "the burst is spent, not yet exceeded");
        throttle.unknown(abuser, t0);
        let wait = throttle.admits(abuser, t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100), "one lookup every tenth of a second");
        assert_eq!(throttle.admits(other, t0), Ok(()), "another client is not affected");
        throttle.unknown(other, t0);
        assert_eq!(throttle.admits(other, t0), Ok(()), "and has its own bucket");
        assert_eq!(throttle.admits(abuser, t0 + wait), Ok(()));
        // Once every bucket is full again, nothing is kept of either client.
        clock.advance(Duration::from_secs(2));
        throttle.prune(t0 + Duration::from_secs(2));
        assert_eq!(throttle.kept(), 0);
        assert!(UnknownKeys::new(0).is_none());
    }
}
