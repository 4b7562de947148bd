//! The end-to-end suite: every test against the real servers of the local stack (`scripts/stack up`),
//! in one binary, grouped by area in folders; the helpers they share are the `end_to_end` library
//! (`tests/src`). Each test creates its own topics, key prefix and consumer group (or its own Redis), so
//! they run in parallel.
//!
//! # Layout
//! - [`api`]: the API as integrators call it: every rule of api.md over HTTP, its conventions, hostile
//!   input, reads kept in memory and the changes Redis pushes, revocation, transcripts, memory.
//! - [`projector`]: the projection: generated streams against an independent fold, counting, crashes,
//!   late events, transaction markers, the event contract, other brokers, rebuild, repair, scale-out,
//!   and the write script at its limits.
//! - [`faults`]: Redis losing data or failing over (one Redis, a cluster), slots moving, outages ridden
//!   out: the read model heals itself.
//! - [`security`]: TLS to Redis and the least-privilege Redis users the project ships.
//! - [`operations`]: what an operator reads: logs, traces, metrics, readiness, the operator commands.

mod api;
mod faults;
mod operations;
mod projector;
mod security;
