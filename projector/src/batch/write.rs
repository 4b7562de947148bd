//! Writing a batch: its groups to Redis and its poison to the dead-letter topics, each tried again while
//! the server is away. A write Redis fails is waited out once (with backoff that keeps growing across
//! batches while Redis keeps failing) and then handed back to the live loop, the batch dropped and read
//! again: held in place, the loop would report nothing, look at nothing and poll nothing for as long as
//! Redis refuses (an ACL, a full Redis, a hold), and past `max.poll.interval.ms` the member would leave
//! its group. Reading the batch again is harmless: every write checks the aggregate's sequence.

use shared::loss::{Loss, Losses};
use tokio::sync::watch;

use super::{Interrupted, SetAside};
use crate::backoff::Backoff;
use crate::observe::Metrics;
use crate::source::DeadLetter;
use crate::store::{Applied, Doubt, Group, Guard, Store, StoreError};

/// Writes dead letters, trying again until the broker has them; false when shut down first.
pub(super) async fn set_aside(
    poison: &impl SetAside,
    letters: &[DeadLetter],
    metrics: &Metrics,
    stopped: &mut watch::Receiver<bool>,
) -> bool {
    let retry = Retry { what: "write to the dead-letter topic", metrics };
    let mut backoff = Backoff::new();
    while !letters.is_empty() {
        match poison.set_aside(letters).await {
            Ok(()) => break,
            Err(e) if retry.after(e.to_string(), &mut backoff, stopped).await => {}
            Err(_) => return false,
        }
    }
    true
}

/// Writes every group. When Redis refuses the batch for a reason no retry can fix, writes the groups one
/// at a time and returns those it refuses, with why. Any other failure is waited out and handed back
/// ([`Interrupted::Retried`]: the batch is read again). The guard is asked before the first write and
/// after every error; nothing is written once it says Redis may have lost data.
pub(super) async fn write_all<'a>(
    groups: &'a [Group<'a>],
    store: &mut Store,
    metrics: &Metrics,
    guard: &mut impl Guard,
    stopped: &mut watch::Receiver<bool>,
) -> Result<(Applied<'a>, Vec<(&'a Group<'a>, String)>), Interrupted> {
    let retry = Retry { what: "apply a batch to redis", metrics };
    let (mut applied, mut refused) = (Vec::new(), Vec::new());
    let mut pending: Vec<&'a [Group<'a>]> = vec![groups];
    // A Redis that cannot say whether it lost data is not written to. Its silence is waited out once,
    // then handed back: the caller's housekeeping (sharing partitions, following the generation) goes on
    // while Redis does not answer.
    match guard.check(store.keys()).await {
        Ok(()) => {}
        Err(Doubt::Unanswered(e)) => {
            return Err(retry.hand_back(format!("asking whether it lost data: {e}"), store, stopped).await);
        }
        Err(Doubt::Lost(loss)) => return Err(Interrupted::Lost(loss)),
    }
    while let Some(part) = pending.pop() {
        match store.apply(part, guard).await {
            Ok(done) => {
                metrics.redis.out_of_memory.set(0);
                store.retry_backoff().reset();
                applied.extend(done);
            }
            // Redis lost data between the check and the write: what the write found gone is the loss.
            Err(StoreError::Lost(key)) => return Err(Interrupted::Lost(Losses::one(Loss::EpochGone { key }))),
            // The look before a fold with a gap: the states it started from may be lost ones.
            Err(StoreError::Doubted(Doubt::Lost(loss))) => return Err(Interrupted::Lost(loss)),
            Err(StoreError::Doubted(Doubt::Unanswered(e))) => {
                return Err(retry.hand_back(format!("asking whether it lost data: {e}"), store, stopped).await);
            }
            Err(e) if e.is_permanent() && part.len() == 1 => refused.push((&part[0], e.to_string())),
            // Which aggregate it is, one at a time tells.
            Err(e) if e.is_permanent() => pending.extend(part.iter().rev().map(std::slice::from_ref)),
            Err(e) => {
                // Until a write succeeds: another error meanwhile (a reconnection) does not mean room.
                if e.is_out_of_memory() {
                    metrics.redis.out_of_memory.set(1);
                }
                return Err(retry.hand_back(e, store, stopped).await);
            }
        }
    }
    Ok((applied, refused))
}

/// Retrying something that failed for a reason outside the batch (Redis or the broker away): each
/// failure is logged and counted, then waited out with backoff.
struct Retry<'a> {
    what: &'static str,
    metrics: &'a Metrics,
}

impl Retry<'_> {
    /// After a failure: true once it is time to try again, false when shut down meanwhile.
    async fn after(
        &self,
        error: impl std::fmt::Display,
        backoff: &mut Backoff,
        stopped: &mut watch::Receiver<bool>,
    ) -> bool {
        self.metrics.retries.inc();
        self.metrics.stuck.obstacle(format_args!("could not {}: {error}", self.what));
        tracing::error!(error = %error, "could not {}; retrying", self.what);
        backoff.wait(stopped).await
    }

    /// After a failure of Redis: waits with the store's backoff, then hands the batch back to be read
    /// again ([`Interrupted::Retried`]), or says it was shut down meanwhile.
    async fn hand_back(
        &self,
        error: impl std::fmt::Display,
        store: &mut Store,
        stopped: &mut watch::Receiver<bool>,
    ) -> Interrupted {
        if self.after(error, store.retry_backoff(), stopped).await {
            Interrupted::Retried
        } else {
            Interrupted::Stopped
        }
    }
}
