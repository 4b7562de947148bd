//! The projection of events into the read model, and the projector's own commands (rebuild, repair).

mod compressed_transcripts;
mod counting;
mod crash_recovery;
mod event_schemas;
mod footprint;
mod group;
mod handover;
mod kafka_clients;
mod late_events;
mod looks;
mod projection;
mod rebuild;
mod repair;
mod scale_out;
mod schema_registry;
mod store;
mod transactions;
mod undone;
