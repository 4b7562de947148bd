//! Faults of the read model's Redis while events flow and requests run: the read model heals itself.

mod cluster;
mod fixed_address;
mod halted;
mod healing_state;
mod key_index;
mod one_redis;
mod pointer;
mod resharding;
mod resilience;
mod stale_shares;
mod start;
mod unmarked;
