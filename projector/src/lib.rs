//! The projector: consumes the product's study, interview and API-key events from Kafka and keeps the
//! Redis read model that the query API serves; and the operator's commands around it.
//!
//! # Layout
//!
//! - [`batch`]: one batch's life, top to bottom: take messages from the broker, set poison aside, fold
//!   each aggregate's events and write them, count, commit. Start reading here (`batch/mod.rs`; the
//!   decoding and grouping are `batch/decode.rs`).
//! - `source`: everything said to the broker (the only code that knows librdkafka): the consumer and
//!   its batches, assignment, offsets, lag, and the dead-letter topics.
//! - `fold`: the projection as pure logic: an aggregate's state, how each event changes it, and what the
//!   read model must hold afterwards (documents, index entries, WebVTT cues).
//! - `store`: the Redis side: owners, the write script and the only Rust that knows its arguments,
//!   conflict retries, the guard asked before writing (`store/guard.rs`), which errors are tried again
//!   (`store/error.rs`), a generation's digest, and the positions and healing entries the read
//!   model holds itself.
//! - `run`: the projector as it runs, live on one generation, and how instances share partitions through
//!   Redis.
//! - `generation`: the read model as a whole, one generation after another: which one is active (the
//!   pointers, forward only), its layout, which ones Redis holds and their deletion, the rebuild with its
//!   handover and retirement, and what live projectors read to follow them.
//! - `heal`: how the read model heals after Redis lost data: `heal/look.rs` looks (before every batch
//!   and a few times a second), `heal/loss.rs` tells a loss from what the primaries say, and
//!   `heal/protocol.rs` answers (a loss is a `shared::loss::Loss` until it is written into a healing
//!   entry).
//! - `repair`: redoing one organization or aggregate from the topics while the live path goes on: the
//!   steps (`repair/mod.rs`), the target's events (`repair/target.rs`), the hold, staging and swap in
//!   Redis (`repair/staging.rs`), and `redrive` (`repair/redrive.rs`, the dead letters that repair).
//! - `observe`: one metrics registry and the HTTP server of `/metrics`, `/livez`, `/readyz`.
//! - [`ops`]: the operator's commands, one file each; all printing lives there.
//! - [`config`]: every setting, from flags or the environment.
//! - `testing` (with the `test-support` feature): a SASL login and a SigV4 verifier for tests of MSK IAM.

pub mod batch;
pub mod config;
pub mod ops;

mod backoff;
mod fold;
mod generation;
mod heal;
mod observe;
mod repair;
mod run;
mod source;
mod store;
#[cfg(any(test, feature = "test-support"))]
#[doc(hidden)]
pub mod testing;

use std::future::Future;

use tokio::sync::watch;

pub use config::{Config, Membership};

/// What `--version` says: the workspace's version and the commit it was built from.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("GIT_COMMIT"), ")");
pub use generation::pointer::first as first_generation;
pub use generation::rebuild::{run as rebuild, Notice as RebuildNotice, Options as RebuildOptions};
pub use generation::Undone;
pub use generation::{delete_generation, delete_generation_while, generation_keys};
#[doc(hidden)]
pub use generation::{signals as control_signals, Signals as ControlSignals};
pub use heal::Watch;
pub use observe::{Counts, Metrics, Outcome};
pub use repair::{run as repair, Report as RepairReport, Target as RepairTarget, ATTEMPTS as REPAIR_ATTEMPTS};
pub use run::{live_instances, Instance, Projector};
/// The operator's Kafka properties, which the benchmarks' ceilings read with too.
pub use source::{KafkaOptions, Partition, Properties};
/// The healing entries of a generation, as projectors mark and read them.
pub use store::position::{
    end_incomplete, healing as healing_entries, mark_healing, mark_incomplete, open_healing, Healing, Opened,
};
pub use store::{Digest, Store};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kafka: {0}")]
    Kafka(#[from] source::BrokerError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A TLS option that cannot work (not a source: the error is one line).
    #[error("invalid configuration: {0}")]
    RedisTls(shared::redis_tls::TlsError),
    /// Redis refused the connection in a way no retry can cure (see [`shared::redis_tls::refusal`]).
    #[error("cannot connect to the read model's Redis at {target}: {refusal}")]
    RedisRefused { target: String, refusal: shared::redis_tls::Refusal },
    #[error("{0}")]
    Refused(String),
    /// A repair whose swap did not happen (nothing was swapped: the live data is as it was), and why.
    #[error("the repair of {what} was not swapped in: {source}")]
    NotSwapped { what: String, source: store::StoreError },
    /// A repair whose swap Redis never answered, however often it was asked: the live data is as it was
    /// or repaired, never a mixture.
    #[error("the repair of {what} may or may not have been swapped in: Redis did not answer ({source}); the live data is either as it was or repaired, never a mixture; run the repair again")]
    SwapUnknown { what: String, source: redis::RedisError },
    /// A command that works on the active generation found its pointer missing: no read model yet, or Redis
    /// lost it with its primary (a projector's start puts it back). Never taken for generation 1.
    #[error("the active generation's pointer ({key}) is missing: there is no read model yet, or Redis lost it (a projector's start puts it back); nothing was done")]
    NoActiveGeneration { key: String },
    /// A rebuild whose generation the active pointer had moved past when it came to switch (another
    /// rebuild switched while this one's lock had lapsed): the pointer is left where it is.
    #[error("the active generation had moved past generation {generation} when its rebuild came to switch to it: it was not switched to, and nothing was deleted; `projector generations --delete {generation}` takes its memory back")]
    SwitchedPast { generation: u64 },
    /// A rebuild's switch that Redis undid before the old generation was deleted (see `generation::retire`).
    #[error("{0}")]
    SwitchUndone(generation::Undone),
    /// A generation of a layout this build does not read (one line, with the versions).
    #[error(transparent)]
    Layout(#[from] shared::layout::UnknownLayout),
}

/// A shutdown future as a watch channel that every loop can check.
pub fn stop_signal(shutdown: impl Future<Output = ()> + Send + 'static) -> watch::Receiver<bool> {
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    stopped
}

/// Runs the live projector until `shutdown` completes; the batch in hand is finished and committed first.
pub async fn run(config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), Error> {
    let stopped = stop_signal(shutdown);
    let Some(projector) = Projector::connect(config, stopped.clone()).await? else {
        return Ok(());
    };
    projector.serve_http(Default::default()).await;
    projector.run_live(stopped).await
}
