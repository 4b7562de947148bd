//! The projector's own batch path fed from memory: what it does per batch once the broker has delivered
//! the messages ([`projector::batch::project`]: decode, set poison aside, fold and write, count), with
//! dead letters going nowhere.

use anyhow::{bail, Result};
use projector::batch::{project, Record};
use projector::{Metrics, Outcome, Store};
use shared::connection::{Connection, Settings};
use shared::redis_url::Target;
use shared::{Keyspace, Topic};

use crate::stream::Message;

/// A store on its own key prefix, at that prefix's active generation (1 on a new prefix, of this build's
/// layout).
pub async fn store(target: &Target, prefix: &str) -> Result<Store> {
    store_of_layout(target, prefix, shared::layout::LAYOUT).await
}

/// [`store`] in a layout this build writes: an earlier one, for a build of an earlier revision to read.
pub async fn store_of_layout(target: &Target, prefix: &str, layout: u32) -> Result<Store> {
    if !shared::layout::READS.contains(&layout) {
        bail!("layout {layout}: this build writes layouts {:?}", shared::layout::READS);
    }
    let settings = Settings { timeout: std::time::Duration::from_secs(30), cluster_retries: 12 };
    let mut conn = Connection::connect(target, settings).await?;
    let generation = projector::first_generation(&mut conn, prefix).await?;
    let keys = Keyspace::new(prefix, generation);
    // In the layout a new read model gets, as the projector marks one.
    let _: bool =
        redis::cmd("HSETNX").arg(keys.meta()).arg(shared::layout::FIELD).arg(layout).query_async(&mut conn).await?;
    // And its healing state opened, with nothing healing: written whole, it is complete. Without the field
    // an API reads a generation of this layout as having lost its healing state, and answers 503.
    projector::open_healing(&mut conn, &keys, projector::Opened::of_layout(layout)).await?;
    Ok(Store::new(conn, keys).of_layout(layout))
}

/// The stream has no poison; were there any, it would be counted and dropped.
/// The projector's batch path from memory, with its metrics.
pub struct Pipeline {
    store: Store,
    metrics: Metrics,
}

impl Pipeline {
    pub fn new(store: Store) -> Self {
        Self { store, metrics: Metrics::new(Topic::ALL.map(|t| t.default_name().to_string())) }
    }

    /// Applies one batch as the projector does.
    pub async fn apply(&mut self, batch: &[Message]) -> Result<()> {
        let records: Vec<Record<'_>> = batch
            .iter()
            .enumerate()
            .map(|(i, m)| Record {
                topic: m.topic,
                topic_name: m.topic.default_name(),
                partition: 0,
                offset: i as i64,
                key: Some(m.key.as_bytes()),
                value: Some(&m.value),
                timestamp_ms: None,
            })
            .collect();
        let (_never, mut stopped) = tokio::sync::watch::channel(false);
        // No guard: this benchmark's Redis loses nothing while it runs.
        if let Err(interrupted) =
            project(&records, &mut (), &mut self.store, &self.metrics, &mut (), &mut stopped).await
        {
            bail!("the batch was not applied: {interrupted:?}");
        }
        Ok(())
    }

    /// Events applied so far (not duplicates), gaps included.
    pub fn applied(&self) -> u64 {
        let counts = self.metrics.counts();
        counts.of(Outcome::Applied) + counts.of(Outcome::Gap)
    }
}
