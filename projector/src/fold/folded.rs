//! What the read model must hold for one aggregate after a run of events: its served document, its
//! index entry and its transcript, derived from its state alone.

use chrono::{DateTime, Utc};
use serde::Serialize;
use shared::time::{format_utc, score};
use shared::{InterviewDocument, StudyDocument};

use super::state::{State, StudyStatus};

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
    /// The API key is live for its organization under its current hash; the index entries of its
    /// retired hashes are removed.
    KeyLive {
        retired: Vec<String>,
    },
    /// The API key is revoked: the index entries of its current and retired hashes are removed.
    KeyRevoked {
        retired: Vec<String>,
    },
}

/// Everything the read model must hold for one aggregate after a run of events.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    pub sequence: u64,
    pub state: State,
    /// The served document, present only while the record is visible.
    pub document: Option<String>,
    pub index: IndexChange,
    pub transcript: TranscriptChange,
}

/// The outcome of `state`, last applied at `sequence`, with the cues recorded by this run of events.
pub(super) fn folded(id: &str, sequence: u64, state: State, cues: String) -> Folded {
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
            let visible = interview.served();
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
                (Some(_), false) => IndexChange::KeyLive { retired: key.retired.clone() },
                (Some(_), true) => IndexChange::KeyRevoked { retired: key.retired.clone() },
            };
            (None, index, TranscriptChange::Keep)
        }
    };
    Folded { sequence, state, document, index, transcript }
}

fn format_time(at: Option<DateTime<Utc>>) -> String {
    at.as_ref().map(format_utc).unwrap_or_default()
}

fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).expect("documents always serialize")
}
