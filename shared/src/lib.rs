//! Wire types shared by the projector (which writes the read model) and the query API (which reads it).
//!
//! Keeping the event contract, the stored documents and every Redis key name in one thin crate means the
//! two binaries cannot disagree about what is on the bus or where a document lives.
//!
//! # Layout
//!
//! - What crosses the bus and the store: [`events`] (the event contract and its decoder), [`documents`]
//!   (what the projector stores and the API serves), [`keys`] (every Redis key name), [`time`] (one format
//!   and one order for timestamps), [`projectors`] (the report each live projector keeps in Redis),
//!   [`layout`] (the read model's layout version, which both binaries check before they use a generation),
//!   [`owners`] (where each aggregate's organization is recorded, by layout).
//! - Healing: [`loss`] (a loss of data, as the projector names it in healing entries and the API reads it
//!   back) and [`scope`] (which slots it touched).
//! - Redis for both binaries (feature `connection`): `connection` (one server or a cluster),
//!   `cluster_pipeline` (a batch as one pipeline per primary), [`cluster_nodes`] (the topology),
//!   `redis_options` (the options both binaries flatten into their configuration), `redis_tls`
//!   (`rediss://` and the refusals no retry cures), [`redis_url`] (the configured `Target`, and URLs
//!   shown without their password), `lease` (a token with a TTL its holder renews: the rebuild lock, a
//!   repair's hold and lease).
//! - Background tasks (feature `task`, which `connection` brings): `task` (a spawned task aborted when
//!   its guard drops: a lease's renewal, the projector's memory gauges, the query API's refresh).
//! - Around `run()` (feature `process`): `process` (logging, traces, shutdown), `json_log` (the flat
//!   JSON line with trace and span ids); and [`log_every`] (a
//!   repeated warning at most once a period). Feature `metrics`: `process_metrics` (each binary's
//!   `*_build_info` and the `process_*` metrics of its `/metrics`). `settings_doc`: the check that every
//!   setting has its row in docs/configuration.md.

pub mod cluster_nodes;
#[cfg(feature = "connection")]
pub mod cluster_pipeline;
pub mod codec;
#[cfg(feature = "connection")]
pub mod connection;
pub mod documents;
pub mod events;
#[cfg(feature = "process")]
pub mod json_log;
pub mod keys;
pub mod layout;
#[cfg(feature = "connection")]
pub mod lease;
pub mod log_every;
pub mod loss;
pub mod owners;
#[cfg(feature = "process")]
pub mod process;
#[cfg(feature = "metrics")]
pub mod process_metrics;
pub mod projectors;
#[cfg(feature = "connection")]
pub mod redis_options;
#[cfg(feature = "connection")]
pub mod redis_tls;
pub mod redis_url;
pub mod scope;
#[cfg(feature = "process")]
pub mod settings_doc;
#[cfg(feature = "task")]
pub mod task;
pub mod time;

pub use documents::{Facet, InterviewDocument, Participant, StudyDocument, VideoObject};
pub use events::{decode, Decoded, Envelope, Event, Poison, Topic};
pub use keys::Keyspace;
pub use projectors::ProjectorReport;
