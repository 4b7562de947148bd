//! The projection itself, as pure logic: an aggregate's state, how each event changes it, and what the
//! read model must hold for it afterwards. Nothing here touches Redis or Kafka; `store` writes what
//! [`fold`] decides.

mod folded;
mod participant;
mod state;
pub mod stored;
mod transcript;

use shared::events::{Body, Role};
use shared::{Event, Participant, VideoObject};

pub use folded::{Folded, IndexChange, TranscriptChange};
pub use state::{State, StudyStatus};
pub use transcript::HEADER as TRANSCRIPT_HEADER;

/// What became of one event in a fold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// The next event of its aggregate: applied.
    Applied,
    /// Applied after a jump in sequence (an event in between never arrived, or not yet).
    Gap,
    /// At or below the sequence already applied: changes nothing.
    Duplicate,
    /// At or below the sequence already applied, and in a gap the aggregate skipped: it arrived too late
    /// to be applied in order, so it changes nothing either (the aggregate needs a repair to have it).
    Late,
}

/// Applies `events` (one aggregate's, in arrival order, all of its organization) to `state` last applied
/// at `sequence`, and says what became of each event. Events at or below the applied sequence change
/// nothing: late when their sequence is one a gap skipped, duplicates otherwise. A jump in sequence is a
/// gap, applied and counted, and the sequences it skipped are recorded in the state.
pub fn fold(aggregate_id: &str, mut sequence: u64, mut state: State, events: &[&Event]) -> (Folded, Vec<Verdict>) {
    let mut verdicts = Vec::with_capacity(events.len());
    let mut cues = String::new();
    for event in events {
        let envelope = &event.envelope;
        if envelope.sequence <= sequence {
            verdicts.push(if state.in_gap(envelope.sequence) { Verdict::Late } else { Verdict::Duplicate });
            continue;
        }
        if envelope.sequence > sequence + 1 {
            verdicts.push(Verdict::Gap);
            state.record_gap(sequence + 1, envelope.sequence - 1);
            tracing::warn!(aggregate = aggregate_id, expected = sequence + 1, got = envelope.sequence, "sequence gap");
        } else {
            verdicts.push(Verdict::Applied);
        }
        sequence = envelope.sequence;
        apply(&mut state, event, &mut cues);
    }
    (folded::folded(aggregate_id, sequence, state, cues), verdicts)
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
                    // Not completed, visible, created now; the study never changes.
                    interview.created_at = Some(at);
                    interview.completed = false;
                    interview.hidden = false;
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
                // Created again with another secret: the one it replaces is revoked for good.
                if let Some(old) = key.sha256.replace(key_sha256.clone()).filter(|old| old != key_sha256) {
                    if !key.retired.contains(&old) {
                        key.retired.push(old);
                    }
                }
                key.retired.retain(|retired| retired != key_sha256);
            }
            Body::ApiKeyDeleted => key.deleted = true,
            _ => {}
        },
    }
}

#[cfg(test)]
mod tests;
