//! The live projector: the pipeline, plus following the active generation and pausing for a rebuild's
//! handover (see [`crate::control`]).

use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::control::{self, Instance};
use crate::metrics::now;
use crate::pipeline::{Projector, Step};
use crate::Error;

/// How often a live projector reads the control keys and reports itself.
const CHECK_EVERY: Duration = Duration::from_millis(250);

pub async fn run(mut projector: Projector, mut stopped: watch::Receiver<bool>) -> Result<(), Error> {
    let id = uuid::Uuid::new_v4().to_string();
    let prefix = projector.config.key_prefix.clone();
    let follow = projector.config.generation.is_none();
    let mut conn = projector.store.conn();
    let mut last_check: Option<Instant> = None;
    loop {
        if last_check.is_none_or(|at| at.elapsed() >= CHECK_EVERY) {
            last_check = Some(Instant::now());
            match control::signals(&mut conn, &prefix).await {
                Ok(signals) => {
                    if let Some(active) = signals.active.filter(|a| follow && *a > projector.generation()) {
                        projector.switch_generation(active);
                    }
                    if let Some(target) = signals.handover.filter(|t| follow && *t != projector.generation()) {
                        if !pause(&mut projector, &mut conn, &id, target, &mut stopped).await? {
                            break;
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not read the control keys"),
            }
            match control::report(&mut conn, &prefix, &id, &instance(&projector, false)).await {
                Ok(live) => {
                    let group = &projector.config.group_id;
                    let mut members: Vec<String> =
                        live.into_iter().filter(|(_, i)| &i.group == group).map(|(id, _)| id).collect();
                    if !members.contains(&id) {
                        members.push(id.clone());
                    }
                    if let Err(e) = projector.rebalance(&id, &members) {
                        tracing::warn!(error = %e, "could not take this projector's share of the partitions");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not report this projector or read the others"),
            }
        }
        match projector.step(&mut stopped, CHECK_EVERY).await? {
            Step::Stopped => {
                tracing::info!("stopping before the batch in hand was applied; it will be applied again");
                let _ = control::leave(&mut conn, &prefix, &id).await;
                return Ok(());
            }
            Step::Applied(_) | Step::Idle => {}
        }
        if *stopped.borrow() {
            break;
        }
    }
    projector.commit_applied()?;
    let _ = control::leave(&mut conn, &prefix, &id).await;
    tracing::info!(stats = ?projector.stats.snapshot(), "projector stopped");
    Ok(())
}

/// Commits what was applied and waits while a rebuild hands over to `target`; follows the switch when it
/// happens. Returns false when shut down meanwhile.
async fn pause(
    projector: &mut Projector,
    conn: &mut shared::connection::Connection,
    id: &str,
    target: u64,
    stopped: &mut watch::Receiver<bool>,
) -> Result<bool, Error> {
    projector.commit_applied()?;
    let prefix = projector.config.key_prefix.clone();
    tracing::info!(target, "paused for a rebuild's handover");
    loop {
        if let Err(e) = control::report(conn, &prefix, id, &instance(projector, true)).await {
            tracing::warn!(error = %e, "could not report this projector's state");
        }
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => return Ok(false),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let signals = match control::signals(conn, &prefix).await {
            Ok(signals) => signals,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the control keys");
                continue;
            }
        };
        if signals.active == Some(target) {
            projector.switch_generation(target);
            break;
        }
        if signals.handover != Some(target) {
            tracing::warn!(target, "the handover ended without a switch; resuming on the current generation");
            break;
        }
    }
    tracing::info!(generation = projector.generation(), "resumed");
    Ok(true)
}

fn instance(projector: &Projector, paused: bool) -> Instance {
    Instance {
        group: projector.config.group_id.clone(),
        generation: projector.generation(),
        paused,
        heartbeat: now(),
        last_progress: projector.metrics.heartbeat.get(),
        partitions: projector.assigned_partitions(),
    }
}
