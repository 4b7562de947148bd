//! What a rebuild does once it has switched: after the grace period, it deletes the generation it
//! switched from, and only while the active pointer names its own generation or a later one.
//!
//! Redis can undo a switch. The pointer's primary is flushed or restored from before the switch, and a
//! live projector that had not followed yet puts the pointer back to its own generation when it marks
//! the loss (`heal::protocol::mark_lost`). The API then serves that generation again, once every live
//! projector reports it. Deleting it would take the read model from under the API: lists cut short and
//! live keys refused while the keys go, then a heal from nothing. A live projector that had followed puts
//! the pointer forward again at its next look, so the rebuild waits one more grace period (at least
//! [`SETTLE`]) for the pointer to name its generation. If it never does, the old generation stays, the
//! rebuild's own is deleted (unless a live projector writes it), and the rebuild ends with an error that
//! says so.

use std::time::{Duration, Instant};

use shared::connection::Connection;
use shared::Keyspace;
use tokio::sync::watch;

use super::plan::{Notice, Notify};
use crate::backoff::Backoff;
use crate::run::members;
use crate::Error;

/// The shortest wait for an undone switch to be put forward again: a live projector that followed it
/// looks every 250 ms.
const SETTLE: Duration = Duration::from_secs(5);

/// A switch Redis undid before the old generation was deleted: what the pointer named, and what became
/// of the rebuild's own generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undone {
    pub generation: u64,
    pub old: u64,
    pub active: Option<u64>,
    /// The rebuild's own generation was deleted (no live projector wrote it).
    pub deleted: bool,
}

impl std::fmt::Display for Undone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Undone { generation, old, active, deleted } = self;
        let active = active.map_or("gone".to_string(), |a| format!("generation {a}"));
        let own = if *deleted { "deleted" } else { "left in place (a live projector writes it)" };
        write!(
            f,
            "the switch to generation {generation} was undone: the active pointer names {active} (Redis lost the \
             switch: a flush, a restart or a restore); generation {old} was kept and generation {generation} \
             {own}; run the rebuild again"
        )
    }
}

/// Deletes generation `old` once `grace` is over, while the pointer names `generation` or a later one;
/// see the module's documentation. A Redis that stalls or fails meanwhile delays this for up to a minute.
pub(super) async fn retire(
    conn: &mut Connection,
    prefix: &str,
    (generation, old): (u64, u64),
    grace: Duration,
    stopped: &mut watch::Receiver<bool>,
    notify: Notify<'_>,
) -> Result<(), Error> {
    tokio::select! {
        _ = stopped.wait_for(|stop| *stop) => {}
        _ = tokio::time::sleep(grace) => {}
    }
    let old_keys = Keyspace::new(prefix.to_string(), old);
    let settle_by = Instant::now() + grace.max(SETTLE);
    let (give_up, mut backoff) = (Instant::now() + Duration::from_secs(60), Backoff::new());
    loop {
        let active = match super::delete_generation_while(conn, &old_keys, |a| a >= Some(generation)).await {
            Ok(Ok(keys)) => {
                notify(Notice::Deleted { generation: old, keys });
                return Ok(());
            }
            Ok(Err(active)) => active,
            Err(e) if Instant::now() < give_up => {
                tracing::warn!(error = %e, generation = old, "deleting the old generation failed; trying again");
                if !backoff.wait(stopped).await {
                    return Ok(());
                }
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if Instant::now() >= settle_by || *stopped.borrow() {
            return Err(Error::SwitchUndone(undone(conn, prefix, (generation, old), active, notify).await?));
        }
        tracing::warn!(generation, ?active, "the switch was undone; waiting for it to be put forward again");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The switch stayed undone: the rebuild's own generation goes too, unless a live projector writes it
/// or the pointer moved since.
async fn undone(
    conn: &mut Connection,
    prefix: &str,
    (generation, old): (u64, u64),
    active: Option<u64>,
    notify: Notify<'_>,
) -> Result<Undone, Error> {
    let written = members::live_instances(conn, prefix).await?.values().any(|i| i.generation == generation);
    let mut deleted = false;
    if active.is_some_and(|a| a < generation) && !written {
        let own = Keyspace::new(prefix.to_string(), generation);
        if let Ok(keys) = super::delete_generation_while(conn, &own, |a| a.is_some_and(|a| a < generation)).await? {
            notify(Notice::Deleted { generation, keys });
            deleted = true;
        }
    }
    Ok(Undone { generation, old, active, deleted })
}
