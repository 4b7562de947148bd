//! Wire types shared by the projector (which writes the read model) and the query API (which reads it).
//!
//! Keeping the event contract, the stored documents and every Redis key name in one thin crate means the
//! two binaries cannot disagree about what is on the bus or where a document lives.

pub mod cluster_nodes;
#[cfg(feature = "connection")]
pub mod cluster_pipeline;
#[cfg(feature = "connection")]
pub mod connection;
pub mod documents;
pub mod events;
pub mod keys;
#[cfg(feature = "connection")]
pub mod lease;
pub mod log_every;
#[cfg(feature = "process")]
pub mod process;
pub mod projectors;
#[cfg(feature = "connection")]
pub mod redis_tls;
pub mod redis_url;
pub mod scope;
pub mod time;

pub use documents::{Facet, InterviewDocument, Participant, StudyDocument, VideoObject};
pub use events::{decode, Decoded, Envelope, Event, Poison, Topic};
pub use keys::Keyspace;
pub use projectors::ProjectorReport;
