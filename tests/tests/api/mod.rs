//! The API as integrators call it.

mod connections;
mod conventions;
mod docs_page;
mod edge;
mod freshness;
mod http;
mod invalid_keys;
mod media;
mod memory;
mod pushed;
mod read_cache;
mod revocation;
mod spec;
mod transcripts;
mod without_tracking;
