//! Step 2 of a batch's life: every record decoded into an event, a letter to set aside (poison, with the
//! reason) or an event of a type this service does not know (skipped); and step 3's grouping of the
//! events by aggregate, each aggregate's events in arrival order.

use std::collections::HashMap;

use shared::events::{schema_id, unframe};
use shared::{decode, Decoded, Event, Topic};

use super::{DeadLetter, Record};
use crate::observe::{Outcome, Tally};
use crate::store::Group;

/// A message to set aside: its letter, which record it is, and its topic and type for the metrics.
pub(super) struct Letter {
    pub letter: DeadLetter,
    pub origin: usize,
    pub topic: Topic,
    pub kind: String,
}

/// A batch decoded: the events to apply with the index of the record each came from, the poison, and
/// the events of a type this service does not know (index and type), and the messages read from a schema
/// registry's framing (index and schema id).
pub(super) struct DecodedBatch {
    pub events: Vec<Event>,
    pub origins: Vec<usize>,
    pub letters: Vec<Letter>,
    pub skipped: Vec<(usize, String)>,
    pub framed: Vec<(usize, u32)>,
}

/// Decodes every record.
pub(super) fn decode_all(records: &[Record<'_>]) -> DecodedBatch {
    let mut events = Vec::with_capacity(records.len());
    let mut origins = Vec::with_capacity(records.len());
    let (mut letters, mut skipped, mut framed) = (Vec::new(), Vec::new(), Vec::new());
    for (i, record) in records.iter().enumerate() {
        let decoded = match record.value {
            Some(value) => decode(record.topic, record.key, value),
            None => Err(shared::Poison("message has no value".into())),
        };
        if let (Ok(_), Some(schema_id)) = (&decoded, record.value.and_then(schema_id)) {
            framed.push((i, schema_id));
        }
        match decoded {
            Ok(Decoded::Event(event)) => {
                events.push(event);
                origins.push(i);
            }
            Ok(Decoded::Unknown { envelope }) => {
                tracing::info!(topic = record.topic_name, kind = %envelope.kind, event_id = %envelope.event_id, "skipped an event of an unknown type");
                skipped.push((i, envelope.kind));
            }
            Err(poison) => {
                tracing::warn!(topic = record.topic_name, partition = record.partition, offset = record.offset, reason = %poison, "poison message");
                let (topic, kind) = (record.topic, claimed_type(record));
                letters.push(Letter { letter: DeadLetter::new(record, poison.0), origin: i, topic, kind });
            }
        }
    }
    DecodedBatch { events, origins, letters, skipped, framed }
}

pub(super) fn count(tally: &mut Tally, topic: Topic, kind: &str, outcome: Outcome) {
    *tally.entry((topic, shared::events::type_label(kind), outcome)).or_default() += 1;
}

/// The `type` a poison message claims, if its value is a JSON object with one; for the metrics only.
fn claimed_type(record: &Record<'_>) -> String {
    let body = record.value.and_then(|v| Some(unframe(v).ok()?.1));
    let claimed = body.and_then(|v| serde_json::from_slice::<serde_json::Value>(v).ok());
    claimed.as_ref().and_then(|v| Some(v.get("type")?.as_str()?.to_string())).unwrap_or_default()
}

/// Groups a batch's events by aggregate, keeping each aggregate's events in arrival order.
pub fn group(events: &[Event]) -> Vec<Group<'_>> {
    let mut index: HashMap<(Topic, &str), usize> = HashMap::new();
    let mut groups: Vec<Group<'_>> = Vec::new();
    for event in events {
        let topic = event.body.topic();
        let id = event.envelope.aggregate_id.as_str();
        let i = *index.entry((topic, id)).or_insert_with(|| {
            groups.push(Group { topic, aggregate_id: id, events: Vec::new() });
            groups.len() - 1
        });
        groups[i].events.push(event);
    }
    groups
}
