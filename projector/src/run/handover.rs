//! A rebuild's handover, the one moment live projectors and a rebuild act together: the live projectors
//! commit what they applied and pause; once every one of them is paused, the rebuild catches up with
//! their committed offsets and switches the active generation in one `SET`; each live projector then
//! follows it and resumes from its committed offsets. If the rebuild dies during the handover (its lock
//! expires), the live projectors resume on their old generation.

use redis::AsyncCommands;
use shared::connection::Connection;
use shared::Keyspace;
use tokio::sync::watch;

use super::rebuild::{Notice, Notify, Options};
use super::{control, members, Projector};
use crate::batch::Step;
use crate::config::Config;
use crate::source::group_committed;
use crate::store::position;
use crate::Error;

/// Pauses the live projectors, catches up with their committed offsets and switches. False when it must
/// be tried again later (a live projector did not pause in time, or shutting down).
pub async fn run(
    config: &Config,
    options: &Options,
    conn: &mut Connection,
    projector: &mut Projector,
    stopped: &mut watch::Receiver<bool>,
    notify: Notify<'_>,
) -> Result<bool, Error> {
    let prefix = &config.key_prefix;
    let generation = projector.generation();
    let rebuild_key = Keyspace::rebuild(prefix);
    let _: () = conn.hset(&rebuild_key, "phase", control::HANDOVER).await?;
    let deadline = tokio::time::Instant::now() + options.handover_timeout;
    loop {
        let instances = members::live_instances(conn, prefix).await?;
        let running = instances.values().filter(|i| i.generation != generation && !i.paused).count();
        if running == 0 {
            break;
        }
        if tokio::time::Instant::now() > deadline || *stopped.borrow() {
            notify(Notice::HandoverPostponed { running });
            let _: () = conn.hset(&rebuild_key, "phase", control::BUILDING).await?;
            return Ok(false);
        }
        if projector.step(stopped, std::time::Duration::from_millis(200)).await == Step::Stopped {
            return Ok(false);
        }
    }
    let live = group_committed(config, &config.group_id)?;
    // What this rebuild committed before a restart counts as applied.
    let own = projector.source.committed()?;
    let reached = |projector: &Projector, partition| {
        projector.source.applied_offset(partition).max(own.get(partition).copied().unwrap_or(0))
    };
    while !live.iter().all(|(partition, offset)| reached(projector, partition) >= *offset) {
        if projector.step(stopped, std::time::Duration::from_millis(200)).await == Step::Stopped {
            let _: () = conn.hset(&rebuild_key, "phase", control::BUILDING).await?;
            return Ok(false);
        }
    }
    // The new generation says how far it applied each partition before anyone reads it.
    let keys = projector.store.keys().clone();
    position::record(conn, &keys, &projector.source.positions(), &mut position::Written::new()).await?;
    let _: () = conn.set(Keyspace::active_generation(prefix), generation).await?;
    Ok(true)
}
