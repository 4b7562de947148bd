//! The long-running modes of the projector: `live` (project as events arrive, follow the active
//! generation, pause for a rebuild's handover) and `rebuild` (replay everything into a new generation and
//! switch to it), and how instances coordinate through Redis (`members`, `control`).

mod control;
mod handover;
mod live;
mod members;
pub mod rebuild;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use shared::connection::Connection;
use shared::{Keyspace, Topic};
use tokio::sync::watch;

pub use control::rebuild_state;
pub use members::{live_instances, Instance};

use crate::batch::{self, Step};
use crate::config::Config;
use crate::observe::{self, Health, Metrics};
use crate::source::Source;
use crate::store::{self, Store};
use crate::Error;

/// One projector: its configuration, where it reads, where it writes and what it reports.
pub struct Projector {
    config: Config,
    source: Source,
    store: Store,
    metrics: Arc<Metrics>,
}

impl Projector {
    /// Connects to Redis (waiting for it) and to the broker. `None` when shut down meanwhile.
    pub async fn connect(config: Config, mut stopped: watch::Receiver<bool>) -> Result<Option<Self>, Error> {
        config.validate()?;
        let Some(mut conn) = store::connect(&config, &mut stopped).await else { return Ok(None) };
        store::check_no_eviction(&mut conn).await?;
        let generation = match config.generation {
            Some(generation) => generation,
            None => store::active_generation(&mut conn, &config.key_prefix).await?,
        };
        tracing::info!(generation, prefix = %config.key_prefix, group = %config.group_id, "projecting");
        let metrics = Arc::new(Metrics::new(Topic::ALL.map(|t| config.topic_name(t).to_string())));
        metrics.generation.set(generation as i64);
        metrics.beat();
        Ok(Some(Self {
            source: Source::connect(&config, metrics.clone())?,
            store: Store::new(conn, Keyspace::new(config.key_prefix.clone(), generation)),
            metrics,
            config,
        }))
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
        let health = Health { metrics: self.metrics(), stall_after: self.config.stall_after(), rebuilding };
        observe::serve_http(self.config.http_addr.0, health).await
    }

    /// Projects live events until `stopped`; see [`live`].
    pub async fn run_live(self, stopped: watch::Receiver<bool>) -> Result<(), Error> {
        live::run(self, stopped).await
    }

    /// One batch: see [`crate::batch`].
    async fn step(&mut self, stopped: &mut watch::Receiver<bool>, idle: Duration) -> Step {
        batch::step(&mut self.source, &mut self.store, &self.metrics, stopped, idle).await
    }

    /// Writes to another generation from the next batch on.
    fn switch_generation(&mut self, generation: u64) {
        tracing::info!(from = self.generation(), to = generation, "switching generation");
        self.store.set_generation(generation);
        self.metrics.generation.set(generation as i64);
    }

    fn conn(&self) -> Connection {
        self.store.conn()
    }
}
