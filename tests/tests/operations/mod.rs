//! What an operator reads and runs: logs, traces, metrics, readiness, upgrades.

mod logs;
mod operability;
mod probes;
mod traces;
mod upgrades;
