//! Dead letters that repair. `dlq replay` publishes letters back to their topics; the live path applies
//! one in order, but one whose aggregate has moved on (events after it were applied, the gap counted) is
//! a duplicate to the live path and would change nothing. So each published letter is judged here as the
//! live path will judge it, and every aggregate that moved on past a letter is repaired from the topics,
//! where the letter now stands in its sequence's place.

use std::collections::BTreeSet;

use serde::Serialize;
use shared::owners::Record;
use shared::{decode, Decoded, Keyspace};

use super::{self as repair, Progress, Target};
use crate::config::Config;
use crate::source::DeadLetter;
use crate::store::{self, Store};
use crate::Error;

/// What became of the letters a replay published, as `dlq replay -o json` prints it.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Redriven {
    /// Letters published back to their topics.
    pub replayed: usize,
    /// Letters the live path applies in order: their aggregates had not moved past them.
    pub applied: usize,
    /// Letters whose aggregates had moved on, and were repaired with them.
    pub repaired: usize,
    /// The aggregates repaired, as `TOPIC:ID`.
    pub repaired_aggregates: Vec<String>,
    /// Letters still poison: they return to the dead-letter topic with their reason.
    pub still_poison: usize,
    /// Letters of an event type the projector does not know, or of another topic: skipped again.
    pub skipped: usize,
    /// Letters of another organization than their aggregate's: refused again.
    pub refused: usize,
}

/// Judges the letters a replay published and repairs every aggregate that moved on past one.
pub async fn after_replay(config: &Config, letters: &[DeadLetter], progress: Progress<'_>) -> Result<Redriven, Error> {
    let mut redriven = Redriven { replayed: letters.len(), ..Redriven::default() };
    let (_stop, mut stopped) = tokio::sync::watch::channel(false);
    let mut conn = store::connect(config, &mut stopped).await?.ok_or_else(|| Error::Refused("no redis".into()))?;
    let generation = crate::generation::pointer::required(&mut conn, &config.redis.key_prefix).await?;
    let keys = Keyspace::new(config.redis.key_prefix.clone(), generation);
    let layout = crate::generation::check_layout(&mut conn, &keys).await?;
    let mut store = Store::new(conn.clone(), keys.clone()).of_layout(layout);
    let mut moved_on = BTreeSet::new();
    for letter in letters {
        let Some(topic) = config.topic_of(&letter.topic) else {
            redriven.skipped += 1;
            continue;
        };
        let decoded = letter.value.as_deref().map(|value| decode(topic, letter.key.as_deref(), value));
        let event = match decoded {
            Some(Ok(Decoded::Event(event))) => event,
            Some(Ok(Decoded::Unknown { .. })) => {
                redriven.skipped += 1;
                continue;
            }
            Some(Err(_)) | None => {
                redriven.still_poison += 1;
                continue;
            }
        };
        let (id, org) = (&event.envelope.aggregate_id, &event.envelope.organization_id);
        let record = Record::of(&keys, topic, id, layout);
        let owner: Option<String> = store::owners::read(&record).query_async(&mut conn).await?;
        if owner.as_ref().is_some_and(|owner| owner != org) {
            redriven.refused += 1;
            continue;
        }
        let (stored, _) = store.stored(topic, org, id).await.map_err(|e| Error::Refused(e.to_string()))?;
        if stored >= event.envelope.sequence {
            redriven.repaired += 1;
            moved_on.insert((topic, id.clone()));
        } else {
            redriven.applied += 1;
        }
    }
    for (topic, id) in moved_on {
        repair::run(config, Target::Aggregate(topic, id.clone()), repair::ATTEMPTS, progress).await?;
        redriven.repaired_aggregates.push(format!("{}:{id}", config.topic_name(topic)));
    }
    Ok(redriven)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_its_counts_in_camel_case() {
        let json = serde_json::to_value(Redriven { replayed: 2, repaired: 1, ..Redriven::default() }).unwrap();
        assert_eq!(json["replayed"], 2);
        assert_eq!(json["repairedAggregates"], serde_json::json!([]));
        assert_eq!(json["stillPoison"], 0);
    }
}
