//! The projector's own decode-and-apply path fed from memory: what it does per batch once the broker has
//! delivered the messages ([`shared::decode`], [`projector::pipeline::group`], [`Store::apply`]).

use anyhow::Result;
use projector::store::Store;
use shared::connection::{Connection, Settings, Target};
use shared::{decode, Decoded, Event, Keyspace};

use crate::stream::Message;

/// A store on its own key prefix, at that prefix's active generation (1 on a new prefix).
pub async fn store(target: &Target, prefix: &str) -> Result<Store> {
    let settings = Settings { timeout: std::time::Duration::from_secs(30), cluster_retries: 12 };
    let mut conn = Connection::connect(target, settings).await?;
    let generation = projector::store::active_generation(&mut conn, prefix).await?;
    Ok(Store::new(conn, Keyspace::new(prefix, generation)))
}

/// Decodes and applies one batch as the projector does; returns the events applied (not duplicates).
pub async fn apply_batch(store: &mut Store, batch: &[Message]) -> Result<u64> {
    let events: Vec<Event> = batch
        .iter()
        .filter_map(|m| match decode(m.topic, Some(m.key.as_bytes()), &m.value) {
            Ok(Decoded::Event(event)) => Some(event),
            _ => None,
        })
        .collect();
    let groups = projector::pipeline::group(&events);
    let applied = store.apply(&groups).await?;
    Ok(applied.tally.applied)
}
