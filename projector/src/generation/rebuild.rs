//! `projector rebuild`: the read model rebuilt by replaying every topic from its earliest offset into a
//! new generation, beside the live one, which keeps serving and keeps receiving live events.
//!
//! One rebuild at a time: it holds `P:rebuild-lock` (a TTL it keeps renewing). Its state lives in
//! `P:rebuild`, and its progress in its own consumer group, so an interrupted rebuild resumes where it
//! stopped; if its generation lost its data meanwhile (a Redis restart), it starts over in a new one.
//! It reads every partition itself (no group membership to share them with), from its group's committed
//! offsets. Once within `handover_lag` messages of the end of every partition, it hands over (see
//! [`super::handover`]). The old generation is deleted after a grace period with `UNLINK`, in batches, while
//! the switch holds (see [`super::retire`]).
//! A generation is never made active before it has caught up.
//!
//! What it does is told as [`Notice`]s, which the operator command prints; its options, notices and lock
//! are [`super::plan`]'s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use shared::connection::Connection;
use shared::lease::{Lease, OnLapse};
use shared::Keyspace;
use tokio::sync::watch;

use super::plan::read_again;
pub use super::plan::{Lock, Notice, Notify, Options, LOCK_TTL};
use super::{control, handover, retire};
use crate::backoff::Backoff;
use crate::batch::Step;
use crate::config::Config;
use crate::heal::Watch;
use crate::observe::now;
use crate::run::{self, Projector};
use crate::store::{self, position, Digest};
use crate::Error;

/// How often a rebuild that is still reading full batches measures how far it is from the end.
const MEASURE_LAG_EVERY: Duration = Duration::from_secs(1);

/// Rebuilds, switches, and deletes the old generation after the grace period. Returns the new generation,
/// or `None` when shut down first (the next rebuild resumes).
pub async fn run(
    config: Config,
    options: Options,
    mut stopped: watch::Receiver<bool>,
    notify: Notify<'_>,
) -> Result<Option<u64>, Error> {
    let prefix = config.redis.key_prefix.clone();
    let Some(mut conn) = store::connect(&config, &mut stopped).await? else { return Ok(None) };
    let token = uuid::Uuid::new_v4().to_string();
    let lock = Keyspace::rebuild_lock(&prefix);
    let deadline = Instant::now() + options.lock_wait;
    // A lock Redis lost is taken again: the rebuild reads again what Redis lost, and no other rebuild can
    // be running unless it took the lock meanwhile (then this one stops).
    let lock = loop {
        if let Some(lease) = Lease::try_take(&mut conn, &lock, &token, LOCK_TTL, OnLapse::TakeAgain).await? {
            break Lock(lease);
        }
        if Instant::now() >= deadline {
            return Err(Error::Refused(format!("another rebuild is running: {lock} is held")));
        }
        notify(Notice::WaitingForLock { lock: lock.clone() });
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => return Ok(None),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    };
    let result = rebuild(&config, &options, &mut conn, &lock, &mut stopped, notify).await;
    if let Err(e) = lock.0.release(&mut conn).await {
        tracing::warn!(error = %e, "could not release the rebuild lock; it expires by itself");
    }
    let Some((generation, old)) = result? else { return Ok(None) };
    retire::retire(&mut conn, &prefix, (generation, old), options.grace, &mut stopped, notify).await?;
    Ok(Some(generation))
}

/// The generation to build into and its consumer group: the interrupted rebuild's, if its generation
/// still has its data, or a new one.
async fn target(config: &Config, conn: &mut Connection, old: u64, notify: Notify<'_>) -> Result<(u64, String), Error> {
    let prefix = &config.redis.key_prefix;
    let state = control::rebuild_state(conn, prefix).await?;
    let resumable = match state.generation {
        Some(g) if g != old => conn.exists::<_, bool>(Keyspace::new(prefix.clone(), g).meta()).await?,
        _ => false,
    };
    if let (Some(generation), Some(group), true) = (state.generation, state.group.clone(), resumable) {
        notify(Notice::Resuming { generation });
        return Ok((generation, group));
    }
    if let Some(lost) = state.generation {
        notify(Notice::StartingOver { lost });
        super::delete_generation(conn, &Keyspace::new(prefix.clone(), lost)).await?;
    }
    // Above the counter, the active generation and the abandoned rebuild's, so that a counter Redis lost
    // or rolled back never hands out a generation number again.
    let above = old.max(state.generation.unwrap_or(0));
    let generation = super::pointer::next(conn, prefix, above).await?;
    let group = format!("{}-rebuild-g{generation}", config.group_id);
    let started = now().to_string();
    let meta = Keyspace::new(prefix.clone(), generation).meta();
    let layout = shared::layout::LAYOUT.to_string();
    let fields = [("started", started.as_str()), ("group", group.as_str()), (shared::layout::FIELD, layout.as_str())];
    let _: () = conn.hset_multiple(&meta, &fields).await?;
    let keys = Keyspace::new(prefix.clone(), generation);
    store::position::open_healing(conn, &keys, store::position::Opened::of_layout(shared::layout::LAYOUT)).await?;
    notify(Notice::Building { generation, active: old });
    Ok((generation, group))
}

/// Builds the new generation and switches to it; `(new, old)`.
async fn rebuild(
    config: &Config,
    options: &Options,
    conn: &mut Connection,
    lock: &Lock,
    stopped: &mut watch::Receiver<bool>,
    notify: Notify<'_>,
) -> Result<Option<(u64, u64)>, Error> {
    let prefix = &config.redis.key_prefix;
    let old = super::pointer::required(conn, prefix).await?;
    let (generation, group) = target(config, conn, old, notify).await?;
    let rebuild_key = Keyspace::rebuild(prefix);
    let fields =
        [("generation", generation.to_string()), ("group", group.clone()), ("phase", control::BUILDING.into())];
    let _: () = conn.hset_multiple(&rebuild_key, &fields).await?;

    let mut build_config = config.clone();
    build_config.group_id = group;
    build_config.generation = Some(generation);
    let Some(mut projector) = Projector::connect(build_config, stopped.clone()).await? else { return Ok(None) };
    let everything: Vec<_> = projector.source.partitions()?.to_vec();
    // An interrupted rebuild resumes from what its generation holds.
    let starts = position::read(conn, projector.store.keys(), &everything).await?;
    projector.source.assign(everything.into_iter().collect(), |p| starts.get(p).copied().flatten())?;
    let mut watch = projector.take_watch();
    let mut last_recorded = Instant::now();
    let rebuilding = Arc::new(AtomicBool::new(true));
    projector.serve_http(rebuilding.clone()).await;
    let mut last_report = Instant::now();
    let mut last_measured: Option<Instant> = None;
    let full = Step::Applied(config.batch_size as usize);
    loop {
        lock.ensure_held()?;
        let stepped = projector.step(&mut watch, stopped, Duration::from_millis(200)).await;
        let lost = match &stepped {
            Step::Stopped => return Ok(None),
            Step::Lost(losses) => Some(losses.clone()),
            Step::Applied(_) | Step::Idle => None,
        };
        let lost = match lost {
            None if last_recorded.elapsed() >= Duration::from_secs(1) => {
                last_recorded = Instant::now();
                let keys = projector.store.keys().clone();
                match watch.record(&keys, &mut projector.source).await {
                    Ok(losses) if !losses.is_empty() => Some(losses),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!(error = %e, "could not record the rebuild's positions");
                        None
                    }
                }
            }
            lost => lost,
        };
        if let Some(losses) = lost {
            if let Err(e) = read_again(&mut projector, &mut watch, losses, notify).await {
                if !ride_out(&mut projector, &mut watch, lock, e, stopped, notify).await? {
                    return Ok(None);
                }
            }
        }
        // The exact lag takes a broker round trip per partition: measure it once a second while full
        // batches keep coming, and after every short batch or empty poll, where the end may be near.
        if stepped == full && last_measured.is_some_and(|at| at.elapsed() < MEASURE_LAG_EVERY) {
            continue;
        }
        last_measured = Some(Instant::now());
        let Some(remaining) = projector.source.exact_lag() else { continue };
        projector.metrics.rebuild_remaining.set(remaining);
        if last_report.elapsed() > Duration::from_secs(5) {
            notify(Notice::Remaining { generation, messages: remaining });
            last_report = Instant::now();
        }
        if remaining <= options.handover_lag {
            match handover::run(config, options, conn, lock, &mut projector, &mut watch, stopped, notify).await {
                Ok(true) => break,
                Ok(false) => {}
                // Over: its state is gone, and nothing is to resume.
                Err(e @ Error::SwitchedPast { .. }) => return Err(e),
                Err(e) => {
                    // The live projectors resume while this rebuild waits (best effort: the phase is
                    // written again at the next handover).
                    let _ = handover::set_phase(conn, &rebuild_key, &projector, control::BUILDING).await;
                    if !ride_out(&mut projector, &mut watch, lock, e, stopped, notify).await? {
                        return Ok(None);
                    }
                }
            }
            if *stopped.borrow() {
                return Ok(None);
            }
        }
    }
    rebuilding.store(false, Ordering::Relaxed);
    projector.metrics.rebuild_remaining.set(0);
    projector.source.commit_applied();
    // The switch is done: tidying up and reporting it may wait for a Redis that stalls, never fail it.
    let (mut backoff, give_up) = (Backoff::new(), Instant::now() + Duration::from_secs(60));
    loop {
        let tidied = async {
            let _: () = conn.del(&rebuild_key).await?;
            Digest::of(conn, &Keyspace::new(prefix.clone(), generation)).await
        };
        match tidied.await {
            Ok(digest) => {
                notify(Notice::Switched { generation, old, digest });
                break;
            }
            Err(e) if Instant::now() < give_up && backoff.wait(stopped).await => {
                tracing::warn!(error = %e, generation, "switched; reading the new generation's digest failed, trying again");
            }
            Err(e) => {
                tracing::warn!(error = %e, generation, "switched; the new generation's digest could not be read");
                break;
            }
        }
    }
    Ok(Some((generation, old)))
}

/// Redis or the broker away for a while (a restart, a failover) while the rebuild builds: it waits, then
/// goes on from what its generation holds, under the same lock, rather than exit and leave the operator to
/// run it again. True once it goes on; false when shut down meanwhile; an error that is not passing, or
/// the lock lost (Redis away longer than its expiry, or another rebuild took it), ends the rebuild.
async fn ride_out(
    projector: &mut Projector,
    watch: &mut Watch,
    lock: &Lock,
    mut error: Error,
    stopped: &mut watch::Receiver<bool>,
    notify: Notify<'_>,
) -> Result<bool, Error> {
    let mut backoff = Backoff::new();
    loop {
        if !run::passing(&error) {
            return Err(error);
        }
        lock.ensure_held()?;
        notify(Notice::Interrupted { generation: projector.generation(), error: error.to_string() });
        if !backoff.wait(stopped).await {
            return Ok(false);
        }
        let everything: Vec<_> = projector.source.partitions()?.to_vec();
        let mut conn = watch.conn();
        match position::read(&mut conn, projector.store.keys(), &everything).await {
            Ok(starts) => {
                projector.source.rewind(&starts)?;
                watch.forget_all();
                projector.store.forget_epochs();
                return Ok(true);
            }
            Err(e) => error = e.into(),
        }
    }
}
