//! The read model heals itself when Redis loses data. Before every batch is written, after every Redis
//! error, and a few times a second besides, each live projector:
//!
//! 1. asks every primary about itself and records its positions on each ([`look`], with [`loss`] telling
//!    a loss from what the primaries say): a restart, a failover, a flush, or a primary holding less than
//!    this projector wrote there is a loss; a batch about to be written is then dropped unwritten;
//! 2. on a loss, marks every partition of the generation as healing, up to the end it has now, and puts
//!    the active generation back if the loss took it ([`protocol`]);
//! 3. reads every partition of its own with a healing entry it has not answered yet again from the
//!    position Redis holds (the earliest offset where a primary holds none), and ends the entries it has
//!    caught up with.
//!
//! While any entry is left, the API answers 503 rather than a wrong answer. Every write checks the
//! aggregate's sequence, so reading a partition again changes nothing that Redis kept.
//!
//! The positions and the healing entries themselves are Redis keys, written by
//! [`crate::store::position`]; a loss is a [`shared::loss::Loss`] until it is written into an entry.
//! A rebuild uses the look alone: reading everything again is the whole of its healing.

mod look;
mod loss;
mod protocol;

pub use look::{watch_memory, Watch};
pub use protocol::{behind_commits, mark_everything, mark_lost, Heal, Parts};
