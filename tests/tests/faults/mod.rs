//! Faults of the read model's Redis while events flow and requests run: the read model heals itself.

mod cluster;
mod key_index;
mod one_redis;
mod resharding;
mod resilience;
