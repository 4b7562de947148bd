//! Benchmarks of the projector and the API, each reported as a ratio against a ceiling measured in the
//! same run (see the table "Where each figure stands" at the top of `BENCHMARKS.md`, and
//! `scripts/bench-replay`, `scripts/bench-api`).
//!
//! The binaries print one line of `name=value` pairs that the scripts turn into a table.

pub mod apply;
pub mod broker;
pub mod compression;
pub mod report;
pub mod stream;
