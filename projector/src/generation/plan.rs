//! What a rebuild is told and tells, apart from how it builds: its options, the notices it gives its
//! operator, the lock it holds, and how it reads its generation again after a loss (while it builds and
//! during its handover). Imported by [`super::rebuild`], [`super::handover`] and [`super::retire`] and
//! importing none of them: the rebuild calls the handover and the retirement, and neither calls back.

use std::time::Duration;

use shared::connection::Connection;
use shared::lease::Lease;
use shared::loss::Losses;

use crate::heal::Watch;
use crate::run::Projector;
use crate::store::{position, Digest};
use crate::Error;

/// How the rebuild behaves; see `projector rebuild --help`.
#[derive(Debug, Clone)]
pub struct Options {
    pub grace: Duration,
    pub handover_lag: i64,
    pub handover_timeout: Duration,
    pub lock_wait: Duration,
}

/// What a rebuild tells its operator as it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    WaitingForLock {
        lock: String,
    },
    Resuming {
        generation: u64,
    },
    StartingOver {
        lost: u64,
    },
    Building {
        generation: u64,
        active: u64,
    },
    Remaining {
        generation: u64,
        messages: i64,
    },
    HandoverPostponed {
        running: usize,
    },
    Switched {
        generation: u64,
        old: u64,
        digest: Digest,
    },
    Deleted {
        generation: u64,
        keys: usize,
    },
    /// Redis lost data of the generation being built: it is read again from what Redis holds.
    ReadingAgain {
        generation: u64,
        loss: Losses,
    },
    /// Redis or the broker was away for a while (a restart, a failover): the rebuild goes on from what its
    /// generation holds.
    Interrupted {
        generation: u64,
        error: String,
    },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::WaitingForLock { lock } => {
                write!(f, "waiting for {lock}: another rebuild holds it (a rebuild that died releases it within 10 s)")
            }
            Notice::Resuming { generation } => write!(f, "resuming the interrupted rebuild of generation {generation}"),
            Notice::StartingOver { lost } => {
                write!(f, "starting over: the interrupted rebuild's generation {lost} lost its data")
            }
            Notice::Building { generation, active } => {
                write!(f, "rebuilding into generation {generation} (active: {active})")
            }
            Notice::Remaining { generation, messages } => {
                write!(f, "generation {generation}: {messages} messages to go")
            }
            Notice::HandoverPostponed { running } => {
                write!(f, "handover postponed: {running} live projector(s) did not pause")
            }
            Notice::Switched { generation, old, digest } => {
                write!(f, "switched to generation {generation} (was {old}); digest {digest}")
            }
            Notice::Deleted { generation, keys } => write!(f, "deleted generation {generation} ({keys} keys)"),
            Notice::ReadingAgain { generation, loss } => {
                write!(f, "generation {generation}: Redis lost data ({loss}); reading again from what it holds")
            }
            Notice::Interrupted { generation, error } => {
                write!(f, "generation {generation}: interrupted ({error}); going on from what it holds")
            }
        }
    }
}

/// Where a rebuild's notices go.
pub type Notify<'a> = &'a (dyn Fn(Notice) + Send + Sync);

/// How long the rebuild lock lasts unless renewed; a running rebuild that finds it gone takes it again
/// within a quarter of this.
pub const LOCK_TTL: Duration = Duration::from_secs(10);
/// The rebuild lock as this rebuild holds it.
pub struct Lock(pub(super) Lease);

impl Lock {
    /// Stops a rebuild whose lock was lost: another rebuild may be running, and two would switch in turn.
    pub fn ensure_held(&self) -> Result<(), Error> {
        if self.0.is_lost() {
            return Err(Error::Refused(format!(
                "this rebuild lost {}: it expired or was taken (Redis lost it, or stalled longer than {} s); \
                 run the rebuild again",
                self.0.key(),
                LOCK_TTL.as_secs()
            )));
        }
        Ok(())
    }

    /// Asks Redis whether this rebuild still holds the lock, right before the switch.
    pub async fn check(&self, conn: &mut Connection) -> Result<(), Error> {
        self.0.check(conn).await?;
        self.ensure_held()
    }
}

/// After Redis lost data of the generation being built: reads every partition again from what Redis
/// holds (the earliest offset where a primary holds nothing). Nobody reads the generation yet, so this
/// is the whole of its healing.
pub async fn read_again(
    projector: &mut Projector,
    watch: &mut Watch,
    losses: Losses,
    notify: Notify<'_>,
) -> Result<(), Error> {
    notify(Notice::ReadingAgain { generation: projector.generation(), loss: losses });
    let everything: Vec<_> = projector.source.partitions()?.to_vec();
    let mut conn = watch.conn();
    let starts = position::read(&mut conn, projector.store.keys(), &everything).await?;
    projector.source.rewind(&starts)?;
    watch.forget_all();
    projector.store.forget_epochs();
    Ok(())
}
