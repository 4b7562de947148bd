//! The question the store asks before it writes: may Redis have lost data since the last look? Asked by
//! [`crate::batch`] before a batch is written and after every Redis error, and by [`super::Store::apply`]
//! again before a fold with a gap is written. Here, beside the store that asks it, so that the store needs
//! nothing of the batch that drives it. The store only asks: the look itself (`INFO`, the recorded
//! positions) is the live projector's [`crate::Watch`], and a benchmark from memory asks nobody.

use std::collections::HashMap;
use std::future::Future;

use shared::loss::Losses;
use shared::Keyspace;

use crate::source::Partition;

/// Asked before a batch is written to Redis and after every Redis error: whether Redis may have lost
/// data since the last look.
pub trait Guard {
    /// Where the partitions stand before the batch about to be written (what the guard may record).
    fn positions(&mut self, _positions: HashMap<Partition, i64>) {}

    /// The positions the last check recorded on every primary, once taken: what the batch's commit may
    /// reach (none: nothing recorded since).
    fn recorded(&mut self) -> Option<HashMap<Partition, i64>> {
        None
    }

    /// The layout of `generation`, as the store read it (what the guard may record beside the positions).
    fn layout(&mut self, _generation: u64, _layout: u32) {}

    fn check(&mut self, keys: &Keyspace) -> impl Future<Output = Result<(), Doubt>> + Send;
}

/// Why a guard would not let a batch be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Doubt {
    /// Redis may have lost data: what, and where.
    Lost(Losses),
    /// Redis did not answer the question (it is away); asked again before anything is written.
    Unanswered(String),
}

/// No guard: for a benchmark from memory, whose Redis loses nothing.
impl Guard for () {
    async fn check(&mut self, _: &Keyspace) -> Result<(), Doubt> {
        Ok(())
    }
}
