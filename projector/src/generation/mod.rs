//! The generation's room: the read model as a whole, from the generation a start finds to the one a
//! rebuild retires. A generation is every key under `{prefix}:g{N}:`; the API serves the one the active
//! pointer names. Everything that reads or writes which generation is which is here, under two rules:
//! the pointers only go forward, and no missing key is evidence (Redis may have lost it with its primary).
//!
//! # Layout
//!
//! - [`pointer`](mod@pointer): the active generation's pointer and the generation counter, every read
//!   and write of them (`raise`, which is also the switch, `raise_both`, `next`, `first`), and the one
//!   typed read of both ([`Pointers`]).
//! - `meta`: a generation's layout, read, checked, written at its start and written back after a loss.
//! - `keys`: which generations Redis holds (found without the pointers), every key of one, and deleting
//!   one.
//! - [`rebuild`] and `handover`: a new generation replayed from the topics, and the switch to it;
//!   `retire`: the old generation deleted once the switch holds; `plan`: the rebuild's options, notices
//!   and lock and its reading again after a loss, which the three share (the rebuild calls the other two,
//!   and neither imports it).
//! - `control`: what live projectors read to follow a switch and pause for a handover.
//!
//! Elsewhere: the projector that runs on a generation is [`crate::run`]'s (which asks this room which
//! generation to run on, and follows its switches); the reports of live projectors that a handover waits
//! for are `run::members`.

mod control;
mod handover;
mod keys;
mod meta;
mod plan;
pub mod pointer;
pub mod rebuild;
mod retire;

pub use control::{rebuild_state, signals, Signals};
pub use keys::{all_holding_keys, delete_generation, delete_generation_while, generation_keys, holding_keys};
pub use meta::{check_layout, layout, restore_layout, write_layout};
pub use pointer::Pointers;
pub use retire::Undone;
