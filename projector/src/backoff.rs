//! Waiting between attempts at something that failed for a reason outside the projector (Redis or the
//! broker away), without delaying a shutdown. The delays double from 100 ms up to 5 s, each with a random
//! part added (up to as much again, `backon`'s jitter): after an outage every instance retries at once
//! otherwise, in lockstep, and keeps doing so at each doubling.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::sync::watch;

/// The first delay, before its jitter.
const FIRST: Duration = Duration::from_millis(100);
/// The longest delay, before its jitter.
const LONGEST: Duration = Duration::from_secs(5);

/// Exponential backoff with jitter that gives up when the projector is shutting down.
pub struct Backoff(ExponentialBackoff);

impl Backoff {
    pub fn new() -> Self {
        let builder = ExponentialBuilder::default().with_min_delay(FIRST).with_max_delay(LONGEST);
        Self(builder.with_jitter().without_max_times().build())
    }

    /// The next delay.
    fn next_delay(&mut self) -> Duration {
        self.0.next().unwrap_or(LONGEST)
    }

    /// Waits the next delay; false when shut down meanwhile.
    pub async fn wait(&mut self, stopped: &mut watch::Receiver<bool>) -> bool {
        let delay = self.next_delay();
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => false,
            _ = tokio::time::sleep(delay) => true,
        }
    }
}

/// The same backoff, waited out across calls rather than in one: a failure sets when the next attempt is
/// due, and the caller waits for it a slice at a time, doing other work between two slices.
pub struct Paced {
    backoff: Backoff,
    due: Option<Instant>,
}

impl Paced {
    pub fn new() -> Self {
        Self { backoff: Backoff::new(), due: None }
    }

    /// An attempt failed: the next is due after the next delay.
    pub fn failed(&mut self) {
        self.due = Some(Instant::now() + self.backoff.next_delay());
    }

    /// An attempt went through: the next failure waits the first delay again.
    pub fn succeeded(&mut self) {
        if self.due.is_some() {
            *self = Self::new();
        }
    }

    /// How long until the next attempt is due.
    pub fn remaining(&self) -> Duration {
        self.due.map(|due| due.saturating_duration_since(Instant::now())).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_five_seconds_each_with_a_random_part_so_instances_do_not_retry_in_lockstep() {
        let delays = |backoff: &mut Backoff| (0..10).map(|_| backoff.next_delay()).collect::<Vec<_>>();
        let (first, second) = (delays(&mut Backoff::new()), delays(&mut Backoff::new()));
        for (n, delay) in first.iter().enumerate() {
            let base = (FIRST * 2u32.pow(n as u32)).min(LONGEST);
            assert!(*delay >= base && *delay < base * 2, "delay {n}: {delay:?} for {base:?}");
        }
        assert_ne!(first, second, "two instances wait differently");
    }
}

#[cfg(test)]
mod paced_tests {
    use super::*;

    #[test]
    fn a_failure_makes_the_next_attempt_wait_and_a_success_starts_the_delays_again() {
        let mut paced = Paced::new();
        assert_eq!(paced.remaining(), Duration::ZERO, "nothing failed: due at once");
        for _ in 0..6 {
            paced.failed();
        }
        let waiting = paced.remaining();
        assert!(waiting > FIRST * 8 && waiting <= LONGEST * 2, "grown: {waiting:?}");
        paced.succeeded();
        assert_eq!(paced.remaining(), Duration::ZERO);
        paced.failed();
        assert!(paced.remaining() < FIRST * 2, "the first delay again: {:?}", paced.remaining());
    }
}
