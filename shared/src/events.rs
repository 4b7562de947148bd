//! The event contract with the main product (`spec/events.md`): the envelope, every event type, and the
//! decoding rule that tells a poison message (set aside) from a well-formed event of an unknown type (skipped).

use chrono::{DateTime, FixedOffset, Utc};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::Value;

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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Title {
    internal_title: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Completed {
    completed_at: DateTime<FixedOffset>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Started {
    study_id: String,
}

#[derive(Deserialize)]
struct Facets {
    facets: Vec<crate::Facet>,
}

#[derive(Deserialize)]
struct Video {
    #[serde(default)]
    bucket: Option<String>,
    key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct KeyCreated {
    name: String,
    key_sha256: String,
}

/// Decodes one message of `topic`. `key` is the Kafka message key, which must equal `aggregateId` when present.
pub fn decode(topic: Topic, key: Option<&[u8]>, value: &[u8]) -> Result<Decoded, Poison> {
    let raw: RawEnvelope = serde_json::from_slice(value).map_err(|e| Poison(format!("invalid envelope: {e}")))?;
    if raw.sequence < 1 {
        return Err(Poison("invalid envelope: sequence must be >= 1".into()));
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
    let body = match body(&envelope.kind, data) {
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

/// Every event type of the contract.
pub const TYPES: [&str; 18] = [
    "study.created",
    "study.retitled",
    "study.launched",
    "study.completed",
    "study.reopened",
    "study.deleted",
    "interview.started",
    "interview.participant_identified",
    "interview.message_recorded",
    "interview.facets_updated",
    "interview.video_stored",
    "interview.video_deleted",
    "interview.completed",
    "interview.hidden",
    "interview.unhidden",
    "interview.deleted",
    "api_key.created",
    "api_key.deleted",
];

/// A metric label for a `type` value: the type itself when the contract has it, `other` otherwise, so
/// that what a producer sends cannot grow a label set without bound.
pub fn type_label(kind: &str) -> String {
    if TYPES.contains(&kind) { kind } else { "other" }.to_string()
}

fn parse<T: DeserializeOwned>(data: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(data)
}

/// The body of a known type and the topic it belongs to, or `None` for an unknown type.
fn body(kind: &str, data: Value) -> Result<Option<(Topic, Body)>, serde_json::Error> {
    use Topic::*;
    let decoded = match kind {
        "study.created" => (Study, Body::StudyCreated { internal_title: parse::<Title>(data)?.internal_title }),
        "study.retitled" => (Study, Body::StudyRetitled { internal_title: parse::<Title>(data)?.internal_title }),
        "study.launched" => (Study, Body::StudyLaunched),
        "study.completed" => {
            let at = parse::<Completed>(data)?.completed_at.with_timezone(&Utc);
            (Study, Body::StudyCompleted { completed_at: at })
        }
        "study.reopened" => (Study, Body::StudyReopened),
        "study.deleted" => (Study, Body::StudyDeleted),
        "interview.started" => (Interview, Body::InterviewStarted { study_id: parse::<Started>(data)?.study_id }),
        "interview.participant_identified" => (Interview, Body::ParticipantIdentified(parse(data)?)),
        "interview.message_recorded" => (Interview, Body::MessageRecorded(parse(data)?)),
        "interview.facets_updated" => (Interview, Body::FacetsUpdated { facets: parse::<Facets>(data)?.facets }),
        "interview.video_stored" => {
            let video: Video = parse(data)?;
            (Interview, Body::VideoStored { bucket: video.bucket, key: video.key })
        }
        "interview.video_deleted" => (Interview, Body::VideoDeleted),
        "interview.completed" => (Interview, Body::InterviewCompleted),
        "interview.hidden" => (Interview, Body::InterviewHidden),
        "interview.unhidden" => (Interview, Body::InterviewUnhidden),
        "interview.deleted" => (Interview, Body::InterviewDeleted),
        "api_key.created" => {
            let created: KeyCreated = parse(data)?;
            let sha = created.key_sha256;
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
                return Err(serde::de::Error::custom("keySha256 must be 64 lowercase hex digits"));
            }
            (ApiKey, Body::ApiKeyCreated { name: created.name, key_sha256: sha })
        }
        "api_key.deleted" => (ApiKey, Body::ApiKeyDeleted),
        _ => return Ok(None),
    };
    Ok(Some(decoded))
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
