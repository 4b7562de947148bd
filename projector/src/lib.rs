//! The projector: consumes the product's study, interview and API-key events and keeps the read model.

pub mod aggregate;
pub mod participant;
pub mod transcript;
