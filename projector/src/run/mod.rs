//! The projector as it runs: one [`Projector`] on one generation, live (project as events arrive, follow
//! the active generation, pause for a rebuild's handover), and how live instances share the partitions
//! through Redis (`members`).
//!
//! # Layout
//!
//! - [`Projector`] (here): one projector's configuration, source, store and metrics, and its start.
//! - `live`: batch after batch, and the housekeeping that keeps instances and a rebuild in step.
//! - `members`: the instances' reports and their share of the partitions.
//!
//! Which generation a start runs on, the switches it follows, and the rebuild that replays a new one (with
//! its handover and retirement) are [`crate::generation`]'s.
//!
//! Elsewhere: how a live projector notices that Redis lost data and projects it again is
//! [`crate::heal`]'s; a `repair` of one organization or aggregate is [`crate::repair`](mod@crate::repair)'s.

mod live;
pub(crate) mod members;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use shared::connection::Connection;
use shared::loss::{Loss, Losses};
use shared::{Keyspace, Topic};
use tokio::sync::watch;

pub use members::{live_instances, live_instances_known_for, tells_everyone, Instance};

use crate::backoff::Backoff;
use crate::batch::{self, Step};
use crate::config::{Config, Membership};
use crate::generation;
use crate::heal::{self, Watch};
use crate::observe::{self, Health, Metrics};
use crate::source::Source;
use crate::store::position::{self, Opened};
use crate::store::{self, Guard, Store};
use crate::Error;

/// Whether an error of the start is Redis or the broker away for a while, not a refusal.
pub(crate) fn passing(e: &Error) -> bool {
    match e {
        Error::Redis(e) => !store::is_refused(e),
        Error::Kafka(e) => e.is_passing(),
        _ => false,
    }
}

/// One projector: its configuration, where it reads, where it writes and what it reports.
pub struct Projector {
    pub(crate) config: Config,
    pub(crate) source: Source,
    pub(crate) store: Store,
    pub(crate) metrics: Arc<Metrics>,
    /// The look at every primary, its first taken before the start's check: handed to the loop that
    /// projects, whose first look then compares with it.
    pub(crate) watch: Option<Watch>,
}

impl Projector {
    /// Connects to Redis (waiting for it) and to the broker. `None` when shut down meanwhile. A start that
    /// meets Redis or the broker away once connected (a restart, a failover) starts again, with backoff,
    /// rather than exit; a refusal (a setting, a permission, an evicting Redis) stops it with one line.
    pub async fn connect(mut config: Config, mut stopped: watch::Receiver<bool>) -> Result<Option<Self>, Error> {
        config.validate()?;
        config.load_kafka_properties()?;
        crate::source::check_prerequisites(&config).await?;
        let mut backoff = Backoff::new();
        loop {
            let Some(conn) = store::connect(&config, &mut stopped).await? else { return Ok(None) };
            match Self::start(config.clone(), conn).await {
                Err(e) if passing(&e) => {
                    tracing::warn!(error = %e, "the start met Redis or the broker away; starting again");
                    if !backoff.wait(&mut stopped).await {
                        return Ok(None);
                    }
                }
                started => return started.map(Some),
            }
        }
    }

    /// The start, once connected to Redis: a new read model is marked incomplete, and a loss while no
    /// projector ran is marked, before anything is projected.
    async fn start(config: Config, mut conn: Connection) -> Result<Self, Error> {
        store::check_no_eviction(&mut conn).await?;
        let metrics = Arc::new(Metrics::new(Topic::ALL.map(|t| config.topic_name(t).to_string())));
        metrics.stuck.set_stall_after(config.stall_after());
        // Watching begins before anything is read: a loss from here on is seen by the first look of the
        // loop that projects (it compares with this one), one before it by the check below. A first look
        // taken after the check would take a flush in between for the state of things.
        let mut watch = Watch::new(conn.clone(), metrics.clone());
        watch.look().await?;
        let mut active = generation::pointer::active(&mut conn, &config.redis.key_prefix).await?;
        // No pointer is no evidence of no read model: Redis may have lost the pointer with its primary
        // while it holds generations. One is put back (once marked, below), never a new one begun beside
        // it: see [`to_put_back`].
        let mut restored = None;
        if config.generation.is_none() && active.is_none() {
            restored = to_put_back(&mut conn, &config.redis.key_prefix).await?;
            if let Some(generation) = restored {
                tracing::error!(
                    generation,
                    "the active generation's pointer is gone while Redis holds generations: putting it back"
                );
                active = restored;
            }
        }
        let generation = config.generation.or(active).unwrap_or(1);
        let mut projector = Self {
            source: Source::connect(&config, metrics.clone())?,
            store: Store::new(conn.clone(), Keyspace::new(config.redis.key_prefix.clone(), generation)),
            metrics,
            config,
            watch: Some(watch),
        };
        // The layout of the generation found (layout 1 until read: a new read model is written in this
        // build's).
        let mut found_layout = 1;
        if projector.config.generation.is_some() || active.is_some() {
            // Nothing is read, marked or written in a layout this build does not know.
            let keys = projector.store.keys().clone();
            let layout = generation::check_layout(&mut conn, &keys).await?;
            found_layout = layout;
            // A meta Redis lost (with its primary's data) gets back the layout the positions recorded.
            if layout > 1 && generation::restore_layout(&mut conn, &keys, layout).await? {
                tracing::warn!(layout, "the generation's meta had lost its layout; written back from the positions");
            }
        }
        if projector.config.generation.is_none() && active.is_none() {
            // A new read model: incomplete until it has caught up with every partition, and marked so
            // before the API can find it.
            let keys = projector.store.keys().clone();
            // Its layout first, so that no reader ever finds the generation without it.
            let layout = shared::layout::LAYOUT;
            generation::write_layout(&mut conn, &keys, layout).await?;
            // Then its healing state, opened before anything is marked there: from now on its absence is
            // a loss.
            let opened = Opened::of_layout(layout);
            position::open_healing(&mut conn, &keys, opened).await?;
            let losses = Losses::one(Loss::NewReadModel);
            let losses =
                heal::mark_lost(projector.config.generation.is_none(), &mut conn, &keys, opened, &losses).await?;
            heal::mark_everything(&mut projector.source, &mut conn, &keys, opened, &losses).await?;
            let generation = generation::pointer::first(&mut conn, &projector.config.redis.key_prefix).await?;
            projector.store.set_generation(generation);
        } else if projector.config.generation.is_none() {
            // Redis may have lost data while no projector looked: marked before anything more is served.
            let keys = projector.store.keys().clone();
            // A broker whose group coordinator the projector relies on keeps each commit's metadata, so an
            // offset an operator reset is told from the projector's; one used with Redis membership may
            // not (the local stack's keeps none), and there every committed offset counts.
            let only_marked = projector.config.membership == Membership::Group;
            let lost = match restored {
                Some(generation) => Some(Loss::PointerLost { generation }),
                None => heal::behind_commits(&projector.source, &mut conn, &keys, only_marked).await?,
            };
            if let Some(loss) = lost {
                tracing::error!(%loss, "the read model's Redis lost data while no projector ran; projecting again");
                let opened = Opened::of_layout(found_layout);
                let losses = Losses::one(loss);
                let follows = projector.config.generation.is_none();
                let losses = heal::mark_lost(follows, &mut conn, &keys, opened, &losses).await?;
                heal::mark_everything(&mut projector.source, &mut conn, &keys, opened, &losses).await?;
                projector.metrics.redis.losses.inc();
            }
        }
        let generation = projector.generation();
        tracing::info!(generation, prefix = %projector.config.redis.key_prefix, group = %projector.config.group_id, "projecting");
        projector.metrics.generation.set(generation as i64);
        projector.metrics.beat();
        Ok(projector)
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    pub fn generation(&self) -> u64 {
        self.store.keys().generation()
    }

    /// Starts the HTTP server of metrics and health when an address is configured; returns where it
    /// listens. `rebuilding` is set while this projector is a rebuild that has not caught up.
    pub async fn serve_http(&self, rebuilding: Arc<AtomicBool>) -> Option<SocketAddr> {
        let restart_stuck_after = self.config.restart_stuck_after();
        let health = Health { metrics: self.metrics(), restart_stuck_after, rebuilding };
        observe::serve_http(self.config.http_addr.0, health).await
    }

    /// Projects live events until `stopped`; see [`live`].
    pub async fn run_live(self, stopped: watch::Receiver<bool>) -> Result<(), Error> {
        live::run(self, stopped).await
    }

    /// One batch: see [`crate::batch`].
    pub(crate) async fn step(
        &mut self,
        guard: &mut impl Guard,
        stopped: &mut watch::Receiver<bool>,
        idle: Duration,
    ) -> Step {
        batch::step(&mut self.source, &mut self.store, &self.metrics, guard, stopped, idle).await
    }

    /// What healing works on: see [`heal::Parts`].
    pub(crate) fn healing(&mut self) -> heal::Parts<'_> {
        heal::Parts {
            source: &mut self.source,
            store: &mut self.store,
            metrics: &self.metrics,
            follows_active: self.config.generation.is_none(),
        }
    }

    /// Writes to another generation from the next batch on.
    pub(crate) fn switch_generation(&mut self, generation: u64) {
        tracing::info!(from = self.generation(), to = generation, "switching generation");
        self.store.set_generation(generation);
        self.metrics.generation.set(generation as i64);
    }

    pub(crate) fn conn(&self) -> Connection {
        self.store.conn()
    }

    /// The look begun at the start (a new one if it was handed over already).
    pub(crate) fn take_watch(&mut self) -> Watch {
        self.watch.take().unwrap_or_else(|| Watch::new(self.conn(), self.metrics()))
    }
}

/// The generation a start puts the lost active pointer back to. The highest that live projectors report
/// writing, when any does: they were serving it a moment ago. Else the highest Redis holds but the one a
/// rebuild builds (unfinished or abandoned: put back, the API would answer 503 until it caught up, and a
/// rebuild by a newer release would stop every start on its layout); the rebuild's only when Redis holds
/// no other. `None`: Redis holds no generation, a new read model.
async fn to_put_back(conn: &mut Connection, prefix: &str) -> Result<Option<u64>, Error> {
    let holding = generation::all_holding_keys(conn, prefix).await?;
    let reported = live_instances(conn, prefix).await?;
    let written = reported.values().map(|i| i.generation).filter(|g| holding.contains(g)).max();
    if written.is_some() {
        return Ok(written);
    }
    let building = generation::rebuild_state(conn, prefix).await?.generation;
    let finished = holding.iter().rev().find(|g| Some(**g) != building);
    Ok(finished.or(holding.last()).copied())
}
