//! What the projector tells its operators while it runs: one Prometheus registry of counters, gauges and
//! histograms, and the small HTTP server of `/metrics`, `/livez` and `/readyz`.

mod halt_health;
mod http;
mod kafka_health;
mod metrics;
mod redis_health;
mod stuck;

pub use http::{start as serve_http, Health};
pub use metrics::{now, Counts, Metrics, Outcome, PartitionLabels, Tally};
pub use redis_health::NodeLabels;
