//! The end-to-end suite: every test against the real servers of the local stack (`scripts/stack up`),
//! one module per area, in one binary. Each test creates its own topics, key prefix and consumer group
//! (or its own Redis), so they run in parallel.

mod api;
mod cluster_faults;
mod conventions;
mod counting;
mod crash_recovery;
mod docs_page;
mod edge;
mod event_schemas;
mod freshness;
mod http;
mod kafka_clients;
mod late_events;
mod logs;
mod media;
mod memory;
mod operability;
mod probes;
mod projection;
mod pushed;
mod read_cache;
mod read_model_store;
mod rebuild;
mod redis_acl;
mod redis_faults;
mod redis_tls;
mod repair;
mod resharding;
mod resilience;
mod revocation;
mod scale_out;
mod traces;
mod transactions;
mod transcripts;
