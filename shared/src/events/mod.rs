//! The event contract with the main product (`spec/events.md`): the envelope, every event type, and the
//! decoding rule that tells a poison message (set aside) from a well-formed event of an unknown type (skipped).

mod data;
mod framing;

use chrono::{DateTime, FixedOffset, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use data::{type_label, TYPES};
pub use framing::{schema_id, unframe, Framing};

/// The three topics of the contract, named by the aggregate whose events they carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Topic {
    Study,
    Interview,
    ApiKey,
}

impl Topic {
    pub const ALL: [Topic; 3] = [Topic::Study, Topic::Interview, Topic::ApiKey];

    /// The contract's default topic name.
    pub fn default_name(self) -> &'static str {
        match self {
            Topic::Study => "study-events",
            Topic::Interview => "interview-events",
            Topic::ApiKey => "api-key-events",
        }
    }

    /// Short name of the aggregate, used in Redis keys and metrics.
    pub fn aggregate(self) -> &'static str {
        match self {
            Topic::Study => "study",
            Topic::Interview => "interview",
            Topic::ApiKey => "apikey",
        }
    }
}

/// The envelope every event travels in, with `occurredAt` normalized to UTC.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    pub event_id: String,
    pub kind: String,
    pub organization_id: String,
    pub aggregate_id: String,
    pub sequence: u64,
    pub occurred_at: DateTime<Utc>,
}

/// A decoded, well-formed event of a known type.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub envelope: Envelope,
    pub body: Body,
}

/// The per-type payload of an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    StudyCreated { internal_title: String },
    StudyRetitled { internal_title: String },
    StudyLaunched,
    StudyCompleted { completed_at: DateTime<Utc> },
    StudyReopened,
    StudyDeleted,
    InterviewStarted { study_id: String },
    ParticipantIdentified(ParticipantIdentified),
    MessageRecorded(MessageRecorded),
    FacetsUpdated { facets: Vec<crate::Facet> },
    VideoStored { bucket: Option<String>, key: String },
    VideoDeleted,
    InterviewCompleted,
    InterviewHidden,
    InterviewUnhidden,
    InterviewDeleted,
    ApiKeyCreated { name: String, key_sha256: String },
    ApiKeyDeleted,
}

impl Body {
    /// The topic, and so the aggregate, this event belongs to.
    pub fn topic(&self) -> Topic {
        use Body::*;
        match self {
            StudyCreated { .. }
            | StudyRetitled { .. }
            | StudyLaunched
            | StudyCompleted { .. }
            | StudyReopened
            | StudyDeleted => Topic::Study,
            ApiKeyCreated { .. } | ApiKeyDeleted => Topic::ApiKey,
            _ => Topic::Interview,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParticipantIdentified {
    pub participant_id: String,
    /// Required, and may be null: `deserialize_with` keeps serde from taking a missing field for null.
    #[serde(deserialize_with = "Option::deserialize")]
    pub first_name: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    pub last_name: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Participant,
    Interviewer,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRecorded {
    pub message_id: String,
    pub role: Role,
    pub text: String,
    #[serde(default)]
    pub translated_text: Option<String>,
    #[serde(default)]
    pub start_seconds: Option<f64>,
    #[serde(default)]
    pub end_seconds: Option<f64>,
}

/// The outcome of decoding one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    Event(Event),
    /// A well-formed envelope whose `type` this service does not know: skipped and counted.
    Unknown {
        envelope: Envelope,
    },
}

/// Why a message is poison: it is set aside in the dead-letter topic with this reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Poison(pub String);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnvelope {
    event_id: String,
    #[serde(rename = "type")]
    kind: String,
    organization_id: String,
    aggregate_id: String,
    sequence: u64,
    occurred_at: DateTime<FixedOffset>,
    data: serde_json::Map<String, Value>,
}

/// Decodes one message of `topic`. `key` is the Kafka message key, which must equal `aggregateId` when present.
/// The value is the envelope's JSON, plain or in a schema registry's framing ([`unframe`]).
pub fn decode(topic: Topic, key: Option<&[u8]>, value: &[u8]) -> Result<Decoded, Poison> {
    let (_, value) = unframe(value)?;
    let raw: RawEnvelope = serde_json::from_slice(value).map_err(|e| Poison(format!("invalid envelope: {e}")))?;
    if raw.sequence < 1 {
        return Err(Poison("invalid envelope: sequence must be >= 1".into()));
    }
    // An empty id names nothing; an empty organizationId would even spread an organization's keys over
    // the slots of a Redis Cluster, where no write could succeed.
    for (field, id) in
        [("eventId", &raw.event_id), ("organizationId", &raw.organization_id), ("aggregateId", &raw.aggregate_id)]
    {
        if id.is_empty() {
            return Err(Poison(format!("invalid envelope: {field} is empty")));
        }
        if id.len() > crate::keys::MAX_ID_BYTES {
            let bound = crate::keys::MAX_ID_BYTES;
            return Err(Poison(format!("invalid envelope: {field} is longer than {bound} bytes")));
        }
    }
    if let Some(key) = key {
        if key != raw.aggregate_id.as_bytes() {
            return Err(Poison("message key does not equal aggregateId".into()));
        }
    }
    let envelope = Envelope {
        event_id: raw.event_id,
        kind: raw.kind,
        organization_id: raw.organization_id,
        aggregate_id: raw.aggregate_id,
        sequence: raw.sequence,
        occurred_at: raw.occurred_at.with_timezone(&Utc),
    };
    let data = Value::Object(raw.data);
    let body = match data::body(&envelope.kind, data) {
        Ok(Some((owner, body))) if owner == topic => body,
        Ok(Some((owner, _))) => {
            return Err(Poison(format!(
                "event type {} belongs on {}, not {}",
                envelope.kind,
                owner.default_name(),
                topic.default_name()
            )))
        }
        Ok(None) => return Ok(Decoded::Unknown { envelope }),
        Err(e) => return Err(Poison(format!("invalid data for {}: {e}", envelope.kind))),
    };
    Ok(Decoded::Event(Event { envelope, body }))
}

#[cfg(test)]
mod tests;
