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

/// One event of the contract, ready to publish.
pub fn event(topic: Topic, org: &str, aggregate: &str, sequence: u64, kind: &str, at: &str, data: Value) -> Outgoing {
    let value = json!({
        "eventId": uuid::Uuid::new_v4().to_string(),
        "type": kind,
        "organizationId": org,
        "aggregateId": aggregate,
        "sequence": sequence,
        "occurredAt": at,
        "data": data,
    });
    Outgoing { topic, key: aggregate.to_string(), value: value.to_string().into_bytes() }
}

/// A raw message under `key`, for poison messages.
pub fn raw(topic: Topic, key: &str, value: &str) -> Outgoing {
    Outgoing { topic, key: key.to_string(), value: value.as_bytes().to_vec() }
}

/// The lowercase hex SHA-256 of an API key, as `api_key.created` carries it.
pub fn sha256_hex(key: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}
