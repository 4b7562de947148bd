//! Writing a batch: its groups to Redis and its poison to the dead-letter topics, each tried again while
//! the server is away. A write Redis fails is handed back to the live loop, the batch dropped and read
//! again: held in place, the loop would report nothing, look at nothing and poll nothing for as long as
//! Redis refuses (an ACL, a full Redis, a hold), its report would lapse, and past `max.poll.interval.ms`
//! the member would leave its group. The backoff before the next attempt keeps growing across batches
//! while Redis keeps failing, and is waited out at most [`SLICE`] at a time, the loop's housekeeping
//! between two slices. Reading the batch again is harmless: every write checks the aggregate's sequence.

use std::time::Duration;

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
/// at a time and returns those it refuses, with why. Any other failure is handed back
/// ([`Interrupted::Retried`]: the batch is read again once a slice of the backoff is waited). The guard is asked before the first write and
/// after every error; nothing is written once it says Redis may have lost data.
pub(super) async fn write_all<'a>(
    groups: &'a [Group<'a>],
    store: &mut Store,
    metrics: &Metrics,
    guard: &mut impl Guard,
    stopped: &mut watch::Receiver<bool>,
) -> Result<(Applied<'a>, Vec<(&'a Group<'a>, String)>), Interrupted> {
    let retry = Retry { what: "apply a batch to redis", metrics };
    // A write Redis failed is not tried again before its delay is over.
    if !store.retry_pace().remaining().is_zero() {
        return Err(wait_a_slice(store, stopped).await);
    }
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
                store.retry_pace().succeeded();
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
    /// A failure: logged, counted, and kept as what holds the projector.
    fn failed(&self, error: impl std::fmt::Display) {
        self.metrics.retries.inc();
        self.metrics.stuck.obstacle(format_args!("could not {}: {error}", self.what));
        tracing::error!(error = %error, "could not {}; retrying", self.what);
    }

    /// After a failure: true once it is time to try again, false when shut down meanwhile.
    async fn after(
        &self,
        error: impl std::fmt::Display,
        backoff: &mut Backoff,
        stopped: &mut watch::Receiver<bool>,
    ) -> bool {
        self.failed(error);
        backoff.wait(stopped).await
    }

    /// After a failure of Redis: the next attempt is due after the store's backoff, of which a slice is
    /// waited before the batch is handed back to be read again ([`Interrupted::Retried`]); or it was shut
    /// down meanwhile.
    async fn hand_back(
        &self,
        error: impl std::fmt::Display,
        store: &mut Store,
        stopped: &mut watch::Receiver<bool>,
    ) -> Interrupted {
        self.failed(error);
        store.retry_pace().failed();
        wait_a_slice(store, stopped).await
    }
}

/// How long a write Redis failed is waited out at a time: the live loop's housekeeping comes between two
/// slices, well within a projector report's lifetime (5 s).
const SLICE: Duration = Duration::from_secs(1);

/// Waits for the next write to be due, a [`SLICE`] at most; then the batch is handed back.
async fn wait_a_slice(store: &mut Store, stopped: &mut watch::Receiver<bool>) -> Interrupted {
    let slice = store.retry_pace().remaining().min(SLICE);
    tokio::select! {
        _ = stopped.wait_for(|stop| *stop) => Interrupted::Stopped,
        _ = tokio::time::sleep(slice) => Interrupted::Retried,
    }
}
