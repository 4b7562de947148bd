//! What a repair targets, an organization or one aggregate, and how its events are told among the topics'
//! messages as the repair reads them: an organization's by a byte search for its id before any decoding,
//! an aggregate's by the message key; each kept by sequence, the last one published winning. Apart from
//! the repair's steps ([`super`]), which hold, stage and swap what is read here.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use shared::{decode, Decoded, Event, Topic};

use crate::fold::{fold, Folded, State};
use crate::source::{Partition, Reader, Record};
use crate::Error;

/// How far the reading is: messages read, of how many.
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// What to repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Organization(String),
    Aggregate(Topic, String),
}

/// The target's events, by aggregate and sequence.
pub type Aggregates = BTreeMap<(Topic, String), BTreeMap<u64, Event>>;

/// The target's events, as they are read.
pub struct Collected {
    pub target: Target,
    /// The organization, once known (an aggregate's: its owner, or its first event's).
    pub org: Option<String>,
    /// What an organization's id looks like in a JSON value.
    needle: Vec<u8>,
    pub aggregates: Aggregates,
    pub kept: u64,
}

impl Collected {
    pub fn new(target: Target, owner: Option<String>) -> Self {
        let (org, needle) = match &target {
            Target::Organization(org) => (Some(org.clone()), serde_json::to_vec(org).expect("a string serializes")),
            Target::Aggregate(..) => (owner, Vec::new()),
        };
        Self { target, org, needle, aggregates: BTreeMap::new(), kept: 0 }
    }

    /// Keeps the record's event if it is the target's; returns its aggregate then.
    pub fn offer(&mut self, record: Record<'_>) -> Option<(Topic, String)> {
        let value = record.value?;
        match &self.target {
            Target::Organization(_) => {
                if !value.contains(&b'\\') && !contains(value, &self.needle) {
                    return None;
                }
            }
            Target::Aggregate(topic, id) => {
                if record.topic != *topic || record.key.is_some_and(|k| k != id.as_bytes()) {
                    return None;
                }
            }
        }
        let Ok(Decoded::Event(event)) = decode(record.topic, record.key, value) else { return None };
        if let Target::Aggregate(_, id) = &self.target {
            if event.envelope.aggregate_id != *id {
                return None;
            }
        }
        let org = self.org.get_or_insert_with(|| event.envelope.organization_id.clone());
        if event.envelope.organization_id != *org {
            return None;
        }
        self.kept += 1;
        let aggregate = (record.topic, event.envelope.aggregate_id.clone());
        // One partition holds an aggregate, read in offset order: a later event with a sequence wins.
        self.aggregates.entry(aggregate.clone()).or_default().insert(event.envelope.sequence, event);
        Some(aggregate)
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// One aggregate folded from scratch, its events in sequence order.
pub fn folded(aggregates: &Aggregates, aggregate: &(Topic, String)) -> Folded {
    let events: Vec<&Event> = aggregates[aggregate].values().collect();
    fold(&aggregate.1, 0, State::new(aggregate.0), &events).0
}

pub fn describe(target: &Target) -> String {
    match target {
        Target::Organization(org) => format!("organization {org}"),
        Target::Aggregate(topic, id) => format!("{} {id}", topic.aggregate()),
    }
}

/// Reads every partition on to its end as it is now, noting the aggregates whose events came.
pub fn read_on(
    reader: &mut Reader,
    marks: &mut HashMap<Partition, (i64, i64)>,
    total: &mut u64,
    read: &mut u64,
    collected: &mut Collected,
    touched: &mut BTreeSet<(Topic, String)>,
    progress: Progress<'_>,
) -> Result<(), Error> {
    let now = reader.watermarks()?;
    for (p, (_, high)) in &now {
        let before = marks.get(p).map_or(0, |(_, h)| *h);
        *total += (high - before).max(0) as u64;
    }
    *marks = now;
    let base = *read;
    let all = *total;
    *read += reader.read_to(
        marks,
        |r| {
            if let Some(a) = collected.offer(r) {
                touched.insert(a);
            }
        },
        |n| progress(base + n, all),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(topic: Topic, key: &'a [u8], value: &'a [u8]) -> Record<'a> {
        Record {
            topic,
            topic_name: topic.default_name(),
            partition: 0,
            offset: 0,
            key: Some(key),
            value: Some(value),
            timestamp_ms: None,
        }
    }

    fn event(org: &str, id: &str, sequence: u64, title: &str) -> String {
        serde_json::json!({
            "eventId": format!("{id}-{sequence}-{title}"), "type": "study.retitled", "organizationId": org,
            "aggregateId": id, "sequence": sequence, "occurredAt": "2026-01-01T00:00:00Z",
            "data": {"internalTitle": title}
        })
        .to_string()
    }

    #[test]
    fn an_organization_keeps_its_events_only_and_a_later_event_with_a_sequence_wins() {
        let mut c = Collected::new(Target::Organization("org-1".into()), None);
        assert!(c.offer(record(Topic::Study, b"s1", event("org-1", "s1", 1, "first").as_bytes())).is_some());
        assert!(c.offer(record(Topic::Study, b"s2", event("org-10", "s2", 1, "x").as_bytes())).is_none());
        assert!(c.offer(record(Topic::Study, b"s3", event("org-2", "s3", 1, "x").as_bytes())).is_none());
        // An id written with an escape is still found, by decoding.
        let escaped = event("org-1", "s4", 1, "y").replace("\"org-1\"", "\"org\\u002d1\"");
        assert!(c.offer(record(Topic::Study, b"s4", escaped.as_bytes())).is_some());
        assert!(c.offer(record(Topic::Study, b"s1", event("org-1", "s1", 1, "corrected").as_bytes())).is_some());
        assert!(c.offer(record(Topic::Study, b"s1", b"{not json")).is_none());
        assert_eq!(c.kept, 3);
        let s1 = &c.aggregates[&(Topic::Study, "s1".to_string())];
        assert_eq!(s1.len(), 1);
        assert!(s1[&1].envelope.event_id.contains("corrected"));
    }

    #[test]
    fn an_aggregate_keeps_its_own_events_of_its_owner_only() {
        let mut c = Collected::new(Target::Aggregate(Topic::Study, "s1".into()), Some("org-1".into()));
        assert!(c.offer(record(Topic::Study, b"s2", event("org-1", "s2", 1, "x").as_bytes())).is_none());
        assert!(c.offer(record(Topic::Study, b"s1", event("org-2", "s1", 1, "x").as_bytes())).is_none());
        assert!(c.offer(record(Topic::Study, b"s1", event("org-1", "s1", 2, "x").as_bytes())).is_some());
        assert!(c.offer(record(Topic::Interview, b"s1", event("org-1", "s1", 3, "x").as_bytes())).is_none());
        assert_eq!(c.kept, 1);
    }
}
