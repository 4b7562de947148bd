//! What the projector remembers of each aggregate between batches, stored beside its document: enough to
//! fold the next events without reading anything else.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{Facet, Participant, Topic, VideoObject};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StudyStatus {
    #[default]
    Draft,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StudyState {
    pub title: String,
    pub status: StudyStatus,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    pub deleted: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InterviewState {
    pub study_id: Option<String>,
    pub created_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    pub participant: Option<Participant>,
    pub facets: Vec<Facet>,
    pub video: Option<VideoObject>,
    pub completed: bool,
    pub hidden: bool,
    pub deleted: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyState {
    pub name: String,
    pub sha256: Option<String>,
    /// Every other hash the key was created with before: none of them may open anything any more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<String>,
    pub deleted: bool,
}

/// The projector's state of one aggregate, stored beside its document (serialized without a tag: the
/// topic tells which shape to decode).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum State {
    Study(StudyState),
    Interview(InterviewState),
    ApiKey(KeyState),
}

impl State {
    pub fn new(topic: Topic) -> Self {
        match topic {
            Topic::Study => State::Study(StudyState::default()),
            Topic::Interview => State::Interview(InterviewState::default()),
            Topic::ApiKey => State::ApiKey(KeyState::default()),
        }
    }

    /// Decodes a stored state; the topic decides its shape.
    pub fn decode(topic: Topic, json: &str) -> Result<Self, serde_json::Error> {
        Ok(match topic {
            Topic::Study => State::Study(serde_json::from_str(json)?),
            Topic::Interview => State::Interview(serde_json::from_str(json)?),
            Topic::ApiKey => State::ApiKey(serde_json::from_str(json)?),
        })
    }
}
