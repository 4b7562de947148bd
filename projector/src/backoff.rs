//! Waiting between attempts at something that failed for a reason outside the projector (Redis or the
//! broker away), without delaying a shutdown. The delays double from 100 ms up to 5 s, each with a random
//! part added (up to as much again, `backon`'s jitter): after an outage every instance retries at once
//! otherwise, in lockstep, and keeps doing so at each doubling.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::sync::watch;

/// The first delay, before its jitter.
const FIRST: Duration = Duration::from_millis(100);
/// The longest delay, before its jitter.
const LONGEST: Duration = Duration::from_secs(5);

/// Exponential backoff with jitter that gives up when the projector is shutting down.
pub struct Backoff(ExponentialBackoff, Waited);

/// Whether a delay was waited since the start: a reset of one that never waited does nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Waited {
    No,
    Yes,
}

impl Backoff {
    pub fn new() -> Self {
        let builder = ExponentialBuilder::default().with_min_delay(FIRST).with_max_delay(LONGEST);
        Self(builder.with_jitter().without_max_times().build(), Waited::No)
    }

    /// Starts again from the first delay (what was tried went through).
    pub fn reset(&mut self) {
        if self.1 == Waited::Yes {
            *self = Self::new();
        }
    }

    /// The next delay.
    fn next_delay(&mut self) -> Duration {
        self.0.next().unwrap_or(LONGEST)
    }

    /// Waits the next delay; false when shut down meanwhile.
    pub async fn wait(&mut self, stopped: &mut watch::Receiver<bool>) -> bool {
        self.1 = Waited::Yes;
        let delay = self.next_delay();
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => false,
            _ = tokio::time::sleep(delay) => true,
        }
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
