//! The live projector: batch after batch, and every 250 ms the housekeeping that keeps several instances
//! and a rebuild in step: follow the active generation, pause for a rebuild's handover, report itself
//! and take its share of the partitions.

use std::time::{Duration, Instant};

use shared::connection::Connection;
use shared::loss::{Loss, Losses};
use shared::task::AbortOnDrop;
use shared::Keyspace;
use tokio::sync::watch;

use super::members::{self, Instance};
use super::Projector;
use crate::batch::Step;
use crate::config::Membership;
use crate::generation::{self as control, Signals};
use crate::heal::{watch_memory, Heal};
use crate::observe::now;
use crate::store::position;
use crate::Error;

/// How often a live projector reads the control keys and reports itself.
const CHECK_EVERY: Duration = Duration::from_millis(250);

pub async fn run(mut projector: Projector, mut stopped: watch::Receiver<bool>) -> Result<(), Error> {
    let id = uuid::Uuid::new_v4().to_string();
    let mut conn = projector.conn();
    let mut heal = Heal::new(projector.take_watch());
    let _memory = AbortOnDrop::spawn(watch_memory(conn.clone(), projector.metrics()));
    let mut last_check: Option<Instant> = None;
    if projector.config.membership == Membership::Group {
        projector.source.join()?;
    }
    loop {
        if last_check.is_none_or(|at| at.elapsed() >= CHECK_EVERY) {
            last_check = Some(Instant::now());
            if !housekeeping(&mut projector, &mut heal, &mut conn, &id, &mut stopped).await? {
                break;
            }
            heal.check(&mut projector.healing()).await?;
        }
        if heal.unmarked() {
            // No batch onto a loss not marked yet (see `Heal::unmarked`): the next look marks it again.
            let next = last_check.map_or(Duration::ZERO, |at| CHECK_EVERY.saturating_sub(at.elapsed()));
            tokio::select! {
                _ = stopped.wait_for(|stop| *stop) => break,
                _ = tokio::time::sleep(next) => continue,
            }
        }
        match projector.step(&mut heal.watch, &mut stopped, CHECK_EVERY).await {
            Step::Stopped => {
                tracing::info!("stopping before the batch in hand was applied; it will be applied again");
                break;
            }
            Step::Lost(losses) => heal.lost(&mut projector.healing(), losses).await?,
            Step::Applied(_) | Step::Idle => {}
        }
        if *stopped.borrow() {
            break;
        }
    }
    heal.leave(&mut projector.healing()).await;
    projector.source.commit_applied();
    let _ = members::leave(&mut conn, &projector.config.redis.key_prefix, &id).await;
    tracing::info!(counts = ?projector.metrics.counts(), "projector stopped");
    Ok(())
}

/// Follows the active generation forward (a pointer gone back is a loss), pauses for a handover, reports
/// this instance and takes its share of the partitions. False when shut down during a pause.
async fn housekeeping(
    projector: &mut Projector,
    heal: &mut Heal,
    conn: &mut Connection,
    id: &str,
    stopped: &mut watch::Receiver<bool>,
) -> Result<bool, Error> {
    let prefix = projector.config.redis.key_prefix.clone();
    let follow = projector.config.generation.is_none();
    match control::signals(conn, &prefix).await {
        Ok(Signals { active, handover }) => {
            match active {
                Some(active)
                    if follow && active > projector.generation() && reads_layout(conn, &prefix, active).await? =>
                {
                    if let Some(losses) = follow_up(projector, conn, active).await {
                        heal.lost(&mut projector.healing(), losses).await?;
                    }
                }
                Some(active) if follow && active < projector.generation() => {
                    let loss = Loss::GenerationBack { from: projector.generation(), to: active };
                    heal.lost(&mut projector.healing(), Losses::one(loss)).await?;
                }
                _ => {}
            }
            if let Some(target) = handover.filter(|t| follow && *t != projector.generation()) {
                if !pause(projector, heal, conn, id, target, stopped).await? {
                    return Ok(false);
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not read the control keys"),
    }
    match members::report(conn, &prefix, id, &instance(projector, false)).await {
        Ok(live) => {
            let group = &projector.config.group_id;
            let mut members: Vec<String> =
                live.into_iter().filter(|(_, i)| &i.group == group).map(|(id, _)| id).collect();
            if !members.iter().any(|m| m == id) {
                members.push(id.to_string());
            }
            if let Err(e) = take_share(projector, conn, id, &members).await {
                tracing::warn!(error = %e, "could not take this projector's share of the partitions");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not report this projector or read the others"),
    }
    Ok(true)
}

/// Reads the partitions that are this instance's share: those the consumer group assigned it, or, with
/// Redis membership, its share among the live `members` of its group. One it did not read yet starts
/// from the position the read model holds.
async fn take_share(
    projector: &mut Projector,
    conn: &mut Connection,
    id: &str,
    members: &[String],
) -> Result<(), Error> {
    let group = projector.source.group_share();
    let all = projector.source.partitions()?;
    let count = all.len();
    let share = group.unwrap_or_else(|| members::share(id, members, all));
    let taken = share.len();
    let new = projector.source.to_place(&share);
    if share == *projector.source.assigned() && new.is_empty() {
        return Ok(());
    }
    let starts = position::read(conn, projector.store.keys(), &new).await?;
    if projector.source.assign(share, |p| starts.get(p).copied().flatten())? {
        tracing::info!(
            partitions = taken,
            of = count,
            instances = members.len(),
            "reading a new share of the partitions"
        );
    }
    Ok(())
}

/// Commits what was applied and waits while a rebuild hands over to `target`; follows the switch when it
/// happens. False when shut down meanwhile.
async fn pause(
    projector: &mut Projector,
    heal: &mut Heal,
    conn: &mut Connection,
    id: &str,
    target: u64,
    stopped: &mut watch::Receiver<bool>,
) -> Result<bool, Error> {
    // The rebuild catches up with what this projector applied as its generation's positions say (a commit
    // can fail, or still be on its way): they are recorded before it reports itself paused, and then
    // committed. Until they are, it goes on, and pauses at a later look.
    let keys = projector.store.keys().clone();
    match heal.watch.record(&keys, &mut projector.source).await {
        Ok(losses) if losses.is_empty() => projector.source.commit_applied(),
        Ok(losses) => {
            heal.lost(&mut projector.healing(), losses).await?;
            return Ok(true);
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not record what was applied before pausing; pausing at a later look");
            return Ok(true);
        }
    }
    let prefix = projector.config.redis.key_prefix.clone();
    tracing::info!(target, "paused for a rebuild's handover");
    projector.metrics.stuck.set_paused(true);
    let resumed = wait_for_the_switch(projector, heal, conn, id, target, stopped, &prefix).await;
    projector.metrics.stuck.set_paused(false);
    if resumed? {
        tracing::info!(generation = projector.generation(), "resumed");
        return Ok(true);
    }
    Ok(false)
}

/// Paused: reports itself as such until the rebuild switches to `target` (then follows it) or ends the
/// handover without a switch. False when shut down meanwhile.
async fn wait_for_the_switch(
    projector: &mut Projector,
    heal: &mut Heal,
    conn: &mut Connection,
    id: &str,
    target: u64,
    stopped: &mut watch::Receiver<bool>,
    prefix: &str,
) -> Result<bool, Error> {
    loop {
        if let Err(e) = members::report(conn, prefix, id, &instance(projector, true)).await {
            tracing::warn!(error = %e, "could not report this projector's state");
        }
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => return Ok(false),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let signals = match control::signals(conn, prefix).await {
            Ok(signals) => signals,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the control keys");
                continue;
            }
        };
        if signals.active == Some(target) {
            if !reads_layout(conn, prefix, target).await? {
                continue;
            }
            if let Some(losses) = follow_up(projector, conn, target).await {
                heal.lost(&mut projector.healing(), losses).await?;
            }
            return Ok(true);
        }
        if signals.handover != Some(target) {
            tracing::warn!(target, "the handover ended without a switch; resuming on the current generation");
            return Ok(true);
        }
    }
}

/// Whether this build reads the layout of generation `active`, which it is about to follow: a layout it
/// does not read (a rebuild by a newer projector) ends the projector with one line; a failed read is asked
/// again at the next look.
async fn reads_layout(conn: &mut Connection, prefix: &str, active: u64) -> Result<bool, Error> {
    match crate::generation::check_layout(conn, &Keyspace::new(prefix.to_string(), active)).await {
        Ok(_) => Ok(true),
        Err(Error::Redis(e)) => {
            tracing::warn!(error = %e, active, "could not read the new generation's layout");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Writes to the newer generation `active` from the next batch on. A partition the generation holds less
/// of than this projector applied is a loss of that generation, returned to be healed like any other:
/// Redis lost what a rebuild wrote before its switch (a restart from an older snapshot landing during
/// the handover), or this projector wrote to an older generation for a while (it started while the
/// pointer was behind). Marked, it makes the API answer 503 where it would have served the hole.
async fn follow_up(projector: &mut Projector, conn: &mut Connection, active: u64) -> Option<Losses> {
    projector.switch_generation(active);
    let positions = projector.source.positions();
    let assigned: Vec<_> = positions.keys().cloned().collect();
    match position::read(conn, projector.store.keys(), &assigned).await {
        Ok(held) => {
            let mut behind: Vec<String> = held
                .iter()
                .filter(|(p, at)| at.is_none_or(|at| at < positions[*p]))
                .map(|(p, at)| {
                    format!("{p} at {} below {}", at.map_or("nothing".into(), |o| o.to_string()), positions[p])
                })
                .collect();
            behind.sort();
            let first = behind.first()?.clone();
            tracing::warn!(partitions = behind.len(), %first, "the new generation holds less than was applied");
            Some(Losses::one(Loss::SwitchedShort { partitions: behind.len(), first, generation: active }))
        }
        Err(e) => {
            // Not known to hold what was applied: healed as if it did not (the next look would record this
            // projector's positions in it, vouching for what it may not hold).
            tracing::warn!(error = %e, "could not read the new generation's positions; reading again from them");
            let first = "its positions not read".to_string();
            Some(Losses::one(Loss::SwitchedShort { partitions: assigned.len(), first, generation: active }))
        }
    }
}

fn instance(projector: &Projector, paused: bool) -> Instance {
    Instance {
        group: projector.config.group_id.clone(),
        generation: projector.generation(),
        paused,
        heartbeat: now(),
        last_progress: projector.metrics.heartbeat.get(),
        partitions: projector.source.assigned_partitions(),
        latest_event: projector.metrics.latest_event.get(),
        caught_up: projector.metrics.caught_up(),
    }
}
