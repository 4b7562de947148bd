//! Builders of event messages as the main product publishes them.

use serde_json::{json, Value};
use shared::Topic;

/// One message to publish: topic, key, value.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub topic: Topic,
    pub key: String,
    pub value: Vec<u8>,
}

/// One event of the contract, ready to publish, with a fresh `eventId`.
pub fn event(topic: Topic, org: &str, aggregate: &str, sequence: u64, kind: &str, at: &str, data: Value) -> Outgoing {
    let id = uuid::Uuid::new_v4().to_string();
    let value = envelope(&Envelope { event_id: &id, kind, org, aggregate, sequence, at }, data);
    Outgoing { topic, key: aggregate.to_string(), value: value.to_string().into_bytes() }
}

/// The envelope fields of one event.
pub struct Envelope<'a> {
    pub event_id: &'a str,
    pub kind: &'a str,
    pub org: &'a str,
    pub aggregate: &'a str,
    pub sequence: u64,
    /// `occurredAt`, RFC 3339.
    pub at: &'a str,
}

/// One event of the contract as the JSON value of its message: the one place that spells the envelope.
pub fn envelope(e: &Envelope<'_>, data: Value) -> Value {
    json!({
        "eventId": e.event_id,
        "type": e.kind,
        "organizationId": e.org,
        "aggregateId": e.aggregate,
        "sequence": e.sequence,
        "occurredAt": e.at,
        "data": data,
    })
}

/// A raw message under `key`, for poison messages.
pub fn raw(topic: Topic, key: &str, value: &str) -> Outgoing {
    Outgoing { topic, key: key.to_string(), value: value.as_bytes().to_vec() }
}

/// The lowercase hex SHA-256 of an API key, as `api_key.created` carries it (also a digest of any text).
pub use shared::keys::key_sha256;
