//! What an operator reads and runs: logs, traces, metrics, readiness, upgrades, generations left behind.

mod compressed_layout;
mod configuration;
mod generations;
mod logs;
mod operability;
mod probes;
mod stuck;
mod traces;
mod upgrades;
