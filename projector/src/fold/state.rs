//! What the projector remembers of each aggregate between batches, stored beside its document: enough to
//! fold the next events without reading anything else, and the sequences it skipped (so that one arriving
//! late is told from a duplicate).

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
    /// The sequences skipped by gaps, as inclusive ranges, oldest first (see [`State::gaps`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<(u64, u64)>,
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
    /// The sequences skipped by gaps, as inclusive ranges, oldest first (see [`State::gaps`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<(u64, u64)>,
}

impl InterviewState {
    /// Whether the API serves the interview: completed, not hidden, not deleted (it has a document).
    pub fn served(&self) -> bool {
        self.completed && !self.hidden && !self.deleted
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyState {
    pub name: String,
    pub sha256: Option<String>,
    /// Every other hash the key was created with before: none of them may open anything any more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<String>,
    pub deleted: bool,
    /// The sequences skipped by gaps, as inclusive ranges, oldest first (see [`State::gaps`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<(u64, u64)>,
}

/// The most gap ranges one aggregate's state keeps (see [`State::record_gap`]).
pub const MAX_GAPS: usize = 64;

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

    /// The sequences this aggregate skipped and never applied, as inclusive ranges, oldest first: what
    /// an event at or below the applied sequence is late for. Absent from the stored state while empty,
    /// so an aggregate without gaps is stored as it always was. At most [`MAX_GAPS`] ranges.
    pub fn gaps(&self) -> &[(u64, u64)] {
        match self {
            State::Study(s) => &s.gaps,
            State::Interview(s) => &s.gaps,
            State::ApiKey(s) => &s.gaps,
        }
    }

    /// Whether this is an interview the API serves ([`InterviewState::served`]).
    pub fn is_served_interview(&self) -> bool {
        matches!(self, State::Interview(i) if i.served())
    }

    pub fn gaps_mut(&mut self) -> &mut Vec<(u64, u64)> {
        match self {
            State::Study(s) => &mut s.gaps,
            State::Interview(s) => &mut s.gaps,
            State::ApiKey(s) => &mut s.gaps,
        }
    }

    /// Records the sequences `from..=to` as skipped. Past [`MAX_GAPS`] ranges the two oldest become one,
    /// which also covers the sequences applied between them: an event redelivered from there is then
    /// taken for a late one (the aggregate is flagged for a repair it did not need, which is harmless),
    /// never the reverse. Events cannot grow a state without bound this way.
    pub fn record_gap(&mut self, from: u64, to: u64) {
        let gaps = self.gaps_mut();
        gaps.push((from, to));
        if gaps.len() > MAX_GAPS {
            gaps[0].1 = gaps[1].1;
            gaps.remove(1);
        }
    }

    /// Whether `sequence` lies in a recorded gap.
    pub fn in_gap(&self, sequence: u64) -> bool {
        self.gaps().iter().any(|(from, to)| (*from..=*to).contains(&sequence))
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
