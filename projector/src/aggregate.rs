//! The projection itself, as pure logic: an aggregate's state, how each event changes it, and what the
//! read model must hold for it afterwards. Nothing here touches Redis or Kafka.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::events::{Body, Role};
use shared::time::{format_utc, score};
use shared::{Event, Facet, InterviewDocument, Participant, StudyDocument, Topic, VideoObject};

use crate::{participant, transcript};

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

/// What applying a run of events did, for the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub applied: u64,
    pub duplicates: u64,
    pub gaps: u64,
}

/// What became of one event: `applied`, `gap` (applied after a jump in sequence) or `duplicate`.
pub type Verdict = &'static str;

/// How the transcript key changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TranscriptChange {
    Keep,
    /// Append these cues (creating the transcript with its header if it does not exist yet).
    Append(String),
    Delete,
}

/// How the aggregate's index entry changes.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexChange {
    None,
    /// In the sorted set with this score.
    Add(f64),
    /// Not in the sorted set.
    Remove,
    /// The API key is live for its organization.
    KeyLive,
    /// The API key is revoked.
    KeyRevoked,
}

/// Everything the read model must hold for one aggregate after a run of events.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub sequence: u64,
    pub state: State,
    /// The served document, present only while the record is visible.
    pub document: Option<String>,
    pub index: IndexChange,
    pub transcript: TranscriptChange,
}

/// Applies `events` (one aggregate's, in arrival order, all of its organization) to `state` last applied
/// at `sequence`. Events at or below the applied sequence are duplicates and change nothing; a jump in
/// sequence is a gap, applied and counted.
pub fn fold(aggregate_id: &str, sequence: u64, state: State, events: &[&Event]) -> (Outcome, Tally) {
    let (outcome, tally, _) = fold_with_verdicts(aggregate_id, sequence, state, events);
    (outcome, tally)
}

/// [`fold`], also saying what became of each event.
pub fn fold_with_verdicts(
    aggregate_id: &str,
    mut sequence: u64,
    mut state: State,
    events: &[&Event],
) -> (Outcome, Tally, Vec<Verdict>) {
    let mut tally = Tally::default();
    let mut verdicts = Vec::with_capacity(events.len());
    let mut cues = String::new();
    for event in events {
        let envelope = &event.envelope;
        if envelope.sequence <= sequence {
            tally.duplicates += 1;
            verdicts.push("duplicate");
            continue;
        }
        verdicts.push(if envelope.sequence > sequence + 1 { "gap" } else { "applied" });
        if envelope.sequence > sequence + 1 {
            tally.gaps += 1;
            tracing::warn!(aggregate = aggregate_id, expected = sequence + 1, got = envelope.sequence, "sequence gap");
        }
        sequence = envelope.sequence;
        tally.applied += 1;
        apply(&mut state, event, &mut cues);
    }
    let outcome = outcome(aggregate_id, sequence, state, cues);
    (outcome, tally, verdicts)
}

fn apply(state: &mut State, event: &Event, cues: &mut String) {
    let at = event.envelope.occurred_at;
    match state {
        State::Study(study) => {
            study.updated_at = Some(at);
            study.created_at.get_or_insert(at);
            match &event.body {
                Body::StudyCreated { internal_title } => {
                    study.title = internal_title.clone();
                    study.created_at = Some(at);
                    study.status = StudyStatus::Draft;
                }
                Body::StudyRetitled { internal_title } => study.title = internal_title.clone(),
                Body::StudyLaunched | Body::StudyReopened => study.status = StudyStatus::InProgress,
                Body::StudyCompleted { completed_at } => {
                    study.status = StudyStatus::Completed;
                    study.completed_at = Some(*completed_at);
                }
                Body::StudyDeleted => study.deleted = true,
                _ => {}
            }
        }
        State::Interview(interview) => {
            interview.updated_at = Some(at);
            interview.created_at.get_or_insert(at);
            match &event.body {
                Body::InterviewStarted { study_id } => {
                    interview.created_at = Some(at);
                    interview.study_id.get_or_insert_with(|| study_id.clone());
                }
                Body::ParticipantIdentified(p) => {
                    interview.participant = Some(Participant {
                        id: p.participant_id.clone(),
                        name: participant::display_name(p.first_name.as_deref(), p.last_name.as_deref()),
                    })
                }
                Body::MessageRecorded(m) if m.role == Role::Participant && !interview.deleted => {
                    cues.push_str(&transcript::cue(&m.text, m.start_seconds, m.end_seconds));
                }
                Body::FacetsUpdated { facets } => interview.facets = facets.clone(),
                Body::VideoStored { bucket, key } => {
                    interview.video = Some(VideoObject { bucket: bucket.clone(), key: key.clone() })
                }
                Body::VideoDeleted => interview.video = None,
                Body::InterviewCompleted => interview.completed = true,
                Body::InterviewHidden => interview.hidden = true,
                Body::InterviewUnhidden => interview.hidden = false,
                Body::InterviewDeleted => {
                    interview.deleted = true;
                    cues.clear();
                }
                _ => {}
            }
        }
        State::ApiKey(key) => match &event.body {
            Body::ApiKeyCreated { name, key_sha256 } => {
                key.name = name.clone();
                key.sha256 = Some(key_sha256.clone());
            }
            Body::ApiKeyDeleted => key.deleted = true,
            _ => {}
        },
    }
}

fn outcome(id: &str, sequence: u64, state: State, cues: String) -> Outcome {
    let (document, index, transcript) = match &state {
        State::Study(study) => match (study.status, study.completed_at, study.deleted) {
            (StudyStatus::Completed, Some(completed_at), false) => {
                let doc = StudyDocument {
                    id: id.to_string(),
                    internal_title: study.title.clone(),
                    completed_on: completed_at.date_naive().format("%Y-%m-%d").to_string(),
                    created_at: format_time(study.created_at),
                    updated_at: format_time(study.updated_at),
                };
                (Some(to_json(&doc)), IndexChange::Add(score(&completed_at)), TranscriptChange::Keep)
            }
            _ => (None, IndexChange::Remove, TranscriptChange::Keep),
        },
        State::Interview(interview) => {
            let visible = interview.completed && !interview.hidden && !interview.deleted;
            let document = visible.then(|| {
                to_json(&InterviewDocument {
                    id: id.to_string(),
                    study_id: interview.study_id.clone(),
                    participant: interview.participant.clone(),
                    facets: interview.facets.clone(),
                    video: interview.video.clone(),
                    created_at: format_time(interview.created_at),
                    updated_at: format_time(interview.updated_at),
                })
            });
            let index = match (&interview.study_id, visible, interview.created_at) {
                (None, _, _) => IndexChange::None,
                (Some(_), true, Some(created_at)) => IndexChange::Add(score(&created_at)),
                (Some(_), _, _) => IndexChange::Remove,
            };
            let transcript = if interview.deleted {
                TranscriptChange::Delete
            } else if cues.is_empty() {
                TranscriptChange::Keep
            } else {
                TranscriptChange::Append(cues)
            };
            (document, index, transcript)
        }
        State::ApiKey(key) => {
            let index = match (&key.sha256, key.deleted) {
                (None, _) => IndexChange::None,
                (Some(_), false) => IndexChange::KeyLive,
                (Some(_), true) => IndexChange::KeyRevoked,
            };
            (None, index, TranscriptChange::Keep)
        }
    };
    Outcome { sequence, state, document, index, transcript }
}

fn format_time(at: Option<DateTime<Utc>>) -> String {
    at.as_ref().map(format_utc).unwrap_or_default()
}

fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("documents always serialize")
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
