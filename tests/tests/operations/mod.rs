//! What an operator reads and runs: logs, traces, metrics, readiness.

mod logs;
mod operability;
mod probes;
mod traces;
