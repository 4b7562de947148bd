//! The `data` of each event type: how it is read, and which types the contract has.

use chrono::{DateTime, FixedOffset, Utc};
use serde::{de::DeserializeOwned, Deserialize};
use serde_json::Value;

use super::{Body, Topic};

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
pub(super) fn body(kind: &str, data: Value) -> Result<Option<(Topic, Body)>, serde_json::Error> {
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
        "interview.started" => {
            let study_id = parse::<Started>(data)?.study_id;
            let study_id = non_empty("studyId", study_id)?;
            if study_id.len() > crate::keys::MAX_ID_BYTES {
                let bound = crate::keys::MAX_ID_BYTES;
                return Err(serde::de::Error::custom(format!("studyId is longer than {bound} bytes")));
            }
            (Interview, Body::InterviewStarted { study_id })
        }
        "interview.participant_identified" => {
            let participant: super::ParticipantIdentified = parse(data)?;
            non_empty("participantId", &participant.participant_id)?;
            (Interview, Body::ParticipantIdentified(participant))
        }
        "interview.message_recorded" => {
            let message: super::MessageRecorded = parse(data)?;
            non_empty("messageId", &message.message_id)?;
            (Interview, Body::MessageRecorded(message))
        }
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

/// An id that names nothing when empty: poison.
fn non_empty<S: AsRef<str>>(field: &str, id: S) -> Result<S, serde_json::Error> {
    match id.as_ref().is_empty() {
        true => Err(serde::de::Error::custom(format!("{field} is empty"))),
        false => Ok(id),
    }
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
