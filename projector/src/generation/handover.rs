//! A rebuild's handover, the one moment live projectors and a rebuild act together: the live projectors
//! commit what they applied, record it as their generation's positions and pause; once every one of them
//! is paused, the rebuild catches up with those positions or their committed offsets, whichever is
//! further, and switches the active generation forward (never back: see [`super::pointer`]); each
//! live projector then follows it and resumes where it was. If the rebuild dies during the handover (its
//! lock expires), the live projectors resume on their old generation.

use std::collections::{BTreeSet, HashMap};

use redis::AsyncCommands;
use shared::connection::Connection;
use shared::loss::Losses;
use shared::Keyspace;
use tokio::sync::watch;

use super::control;
use super::plan::{read_again, Lock, Notice, Notify, Options};
use crate::batch::Step;
use crate::config::Config;
use crate::heal::Watch;
use crate::run::{members, Projector};
use crate::source::{group_committed, Partition};
use crate::store::position;
use crate::Error;

/// Deletes the rebuild's state if it is still this rebuild's (ARGV[1] its generation).
const END_IF_OURS: &str =
    "if redis.call('HGET', KEYS[1], 'generation') == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// Pauses the live projectors, catches up with what they applied and switches. False when it must
/// be tried again later (a live projector did not pause in time, or shutting down).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    config: &Config,
    options: &Options,
    conn: &mut Connection,
    lock: &Lock,
    projector: &mut Projector,
    watch: &mut Watch,
    stopped: &mut watch::Receiver<bool>,
    notify: Notify<'_>,
) -> Result<bool, Error> {
    let prefix = &config.redis.key_prefix;
    let generation = projector.generation();
    let rebuild_key = Keyspace::rebuild(prefix);
    set_phase(conn, &rebuild_key, projector, control::HANDOVER).await?;
    let deadline = tokio::time::Instant::now() + options.handover_timeout;
    let paused: BTreeSet<u64> = loop {
        // No report is no evidence of no projector: the reports may have been lost with their primary,
        // and every live projector reports again within the liveness timeout. Until the reports have been
        // known whole that long, the handover waits.
        let (instances, known_for) = members::live_instances_known_for(conn, prefix).await?;
        let running = instances.values().filter(|i| i.generation != generation && !i.paused).count();
        if running == 0 && members::tells_everyone(known_for) {
            break instances.values().map(|i| i.generation).filter(|g| *g != generation).collect();
        }
        if tokio::time::Instant::now() > deadline || *stopped.borrow() {
            notify(Notice::HandoverPostponed { running });
            set_phase(conn, &rebuild_key, projector, control::BUILDING).await?;
            return Ok(false);
        }
        lock.ensure_held()?;
        match projector.step(watch, stopped, std::time::Duration::from_millis(200)).await {
            Step::Stopped => return Ok(false),
            Step::Lost(losses) => return postpone(conn, &rebuild_key, projector, watch, losses, notify).await,
            Step::Applied(_) | Step::Idle => {}
        }
    };
    let live = live_applied(config, conn, projector, &paused).await?;
    // What this rebuild applied, never what its group committed: a resumed rebuild starts each partition
    // at the position its generation holds (`Source::assign`), which covers what it applied before a
    // restart, and offsets its group committed before its generation lost data vouch for nothing.
    let reached = |projector: &Projector, partition| projector.source.applied_offset(partition);
    while !live.iter().all(|(partition, offset)| reached(projector, partition) >= *offset) {
        lock.ensure_held()?;
        match projector.step(watch, stopped, std::time::Duration::from_millis(200)).await {
            Step::Stopped => {
                set_phase(conn, &rebuild_key, projector, control::BUILDING).await?;
                return Ok(false);
            }
            Step::Lost(losses) => return postpone(conn, &rebuild_key, projector, watch, losses, notify).await,
            Step::Applied(_) | Step::Idle => {}
        }
    }
    // The new generation says how far it applied each partition before anyone reads it, and is switched
    // to only if Redis kept everything this rebuild wrote, and only while this rebuild holds the lock.
    let keys = projector.store.keys().clone();
    let losses = watch.record(&keys, &mut projector.source).await?;
    if !losses.is_empty() {
        return postpone(conn, &rebuild_key, projector, watch, losses, notify).await;
    }
    // Its healing state opened (again): the rebuild marks nothing there, so a hash its primary lost held
    // nothing else, and the generation was just found whole.
    let opened = crate::store::position::Opened::of_layout(super::check_layout(conn, &keys).await?);
    crate::store::position::open_healing(conn, &keys, opened).await?;
    lock.check(conn).await?;
    // Forward only: the lock can lapse between its check and the switch, and a rebuild that took it
    // meanwhile may have switched further. Moving the pointer back would serve an older read model.
    // The pointer found at this generation already is this rebuild's own switch, made by an attempt whose
    // reply came too late (a timeout): only this rebuild switches to its generation.
    if super::pointer::raise(conn, prefix, generation).await? == super::pointer::Raised::Past {
        // This rebuild is over: its state goes, unless another rebuild's has replaced it.
        let _: i64 = redis::Script::new(END_IF_OURS).key(&rebuild_key).arg(generation).invoke_async(conn).await?;
        return Err(Error::SwitchedPast { generation });
    }
    Ok(true)
}

/// How far the paused live projectors got on each partition: what their group committed, or what the
/// generations they write hold, whichever is further. A commit can fail, or (from a group member) still
/// be on its way when its projector reports itself paused; a paused projector has recorded what it applied
/// as its generation's positions first. Catching up with less would switch to a generation holding less
/// than the one the API serves (the live projectors would find it and heal it, but the API would serve it
/// short until they did).
async fn live_applied(
    config: &Config,
    conn: &mut Connection,
    projector: &mut Projector,
    generations: &BTreeSet<u64>,
) -> Result<HashMap<Partition, i64>, Error> {
    let mut applied = group_committed(config, &config.group_id)?;
    let partitions = projector.source.partitions()?.to_vec();
    for generation in generations {
        let keys = Keyspace::new(config.redis.key_prefix.clone(), *generation);
        for (partition, held) in position::read(conn, &keys, &partitions).await? {
            if let Some(held) = held {
                let entry = applied.entry(partition).or_insert(held);
                *entry = (*entry).max(held);
            }
        }
    }
    Ok(applied)
}

/// Redis lost data of the new generation during the handover: the live projectors resume, and the
/// rebuild reads again what was lost before it tries again.
async fn postpone(
    conn: &mut Connection,
    rebuild_key: &str,
    projector: &mut Projector,
    watch: &mut Watch,
    losses: Losses,
    notify: Notify<'_>,
) -> Result<bool, Error> {
    set_phase(conn, rebuild_key, projector, control::BUILDING).await?;
    read_again(projector, watch, losses, notify).await?;
    Ok(false)
}

/// Writes the rebuild's whole state with its phase (not the phase alone): a Redis that lost the state
/// meanwhile gets it back, so that the live projectors see the handover.
pub(super) async fn set_phase(
    conn: &mut Connection,
    rebuild_key: &str,
    projector: &Projector,
    phase: &str,
) -> Result<(), Error> {
    let fields = [
        ("generation", projector.generation().to_string()),
        ("group", projector.config.group_id.clone()),
        ("phase", phase.to_string()),
    ];
    let _: () = conn.hset_multiple(rebuild_key, &fields).await?;
    Ok(())
}
