//! How a state is stored. A served interview's state is mostly its document again (study, participant,
//! facets, video, times), and a state's JSON is too long for Redis to keep its hash compact. From layout 2
//! on, a served interview's state is stored as `{"served":true}` (with its gaps, if any), and read back
//! from the document the same script wrote beside it, in the same slot: the document renders every field
//! of the state exactly (times to the nanosecond), and served means completed, not hidden, not deleted.
//! Every other state is stored whole, as in layout 1. Either form is read in every layout.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use shared::{InterviewDocument, Topic};

use super::state::{InterviewState, State};

/// The first layout that stores a served interview's state without what its document holds.
pub const SERVED_FROM_LAYOUT: u32 = 2;

/// What a served interview's stored state starts with.
const SERVED: &str = r#"{"served":"#;

/// A served interview's stored state: what its document does not hold.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Served {
    served: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    gaps: Vec<(u64, u64)>,
}

/// A stored state that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum StoredError {
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("a served interview's state without its document")]
    NoDocument,
    #[error("a served interview's document with the time {0:?}")]
    Time(String),
    #[error("a served interview's state that says it is not served")]
    NotServed,
}

/// Whether a stored state is a served interview's, stored without what its document holds.
pub fn is_served(stored: &[u8]) -> bool {
    stored.starts_with(SERVED.as_bytes())
}

/// The state as stored in a generation of `layout`, beside `document` (the one the same write stores).
pub fn encode(state: &State, document: Option<&str>, layout: u32) -> String {
    if let (State::Interview(interview), Some(document)) = (state, document) {
        if layout >= SERVED_FROM_LAYOUT && interview.served() {
            let served = Served { served: true, gaps: interview.gaps.clone() };
            let stored = serde_json::to_string(&served).expect("a served state serializes");
            debug_assert_eq!(
                decode(Topic::Interview, &stored, Some(document)).ok().as_ref(),
                Some(state),
                "a served interview's state is read back whole from its document"
            );
            return stored;
        }
    }
    serde_json::to_string(state).expect("state always serializes")
}

/// A stored state of `topic`, with the aggregate's stored document if it has one (only a served
/// interview's state needs it).
pub fn decode(topic: Topic, stored: &str, document: Option<&str>) -> Result<State, StoredError> {
    if topic != Topic::Interview || !is_served(stored.as_bytes()) {
        return Ok(State::decode(topic, stored)?);
    }
    let served: Served = serde_json::from_str(stored)?;
    if !served.served {
        return Err(StoredError::NotServed);
    }
    let document: InterviewDocument = serde_json::from_str(document.ok_or(StoredError::NoDocument)?)?;
    Ok(State::Interview(InterviewState {
        study_id: document.study_id,
        created_at: time(&document.created_at)?,
        updated_at: time(&document.updated_at)?,
        participant: document.participant,
        facets: document.facets,
        video: document.video,
        completed: true,
        hidden: false,
        deleted: false,
        gaps: served.gaps,
    }))
}

/// A document's time as the fold renders it (`""`: none).
fn time(rendered: &str) -> Result<Option<DateTime<Utc>>, StoredError> {
    if rendered.is_empty() {
        return Ok(None);
    }
    let at = DateTime::parse_from_rfc3339(rendered).map_err(|_| StoredError::Time(rendered.to_string()))?;
    Ok(Some(at.with_timezone(&Utc)))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use shared::{Facet, Participant, VideoObject};

    use super::super::folded::folded;
    use super::*;

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "[a-zA-Z0-9 \"\\\\é😀\\n-]{0,12}"]
    }

    fn at() -> impl Strategy<Value = Option<DateTime<Utc>>> {
        // Any time a chrono DateTime holds to the nanosecond, from the year 1 to 9999.
        prop::option::of((-62_135_596_800i64..253_402_300_799, 0u32..1_000_000_000))
            .prop_map(|at| at.and_then(|(s, ns)| DateTime::from_timestamp(s, ns)))
    }

    fn interview() -> impl Strategy<Value = InterviewState> {
        let participant =
            prop::option::of((text(), prop::option::of(text())).prop_map(|(id, name)| Participant { id, name }));
        let facets = prop::collection::vec(
            (text(), prop::collection::vec(text(), 0..3)).prop_map(|(label, values)| Facet { label, values }),
            0..3,
        );
        let video =
            prop::option::of((prop::option::of(text()), text()).prop_map(|(bucket, key)| VideoObject { bucket, key }));
        let gaps = prop::collection::vec((1u64..u64::MAX / 2, 0u64..1000).prop_map(|(a, n)| (a, a + n)), 0..3);
        (prop::option::of(text()), at(), at(), participant, facets, video, any::<[bool; 3]>(), gaps).prop_map(
            |(study_id, created_at, updated_at, participant, facets, video, [completed, hidden, deleted], gaps)| {
                InterviewState {
                    study_id,
                    created_at,
                    updated_at,
                    participant,
                    facets,
                    video,
                    completed,
                    hidden,
                    deleted,
                    gaps,
                }
            },
        )
    }

    proptest! {
        #[test]
        fn every_interview_state_stored_beside_its_document_reads_back_the_same(interview in interview()) {
            let state = State::Interview(interview);
            let folded = folded("i1", 7, state.clone(), String::new());
            for layout in [1, SERVED_FROM_LAYOUT] {
                let stored = encode(&state, folded.document.as_deref(), layout);
                let read = decode(Topic::Interview, &stored, folded.document.as_deref()).unwrap();
                prop_assert_eq!(&read, &state, "{}", stored);
            }
        }
    }

    #[test]
    fn a_served_interview_is_stored_without_what_its_document_holds_from_layout_two_only() {
        let state = State::Interview(InterviewState {
            study_id: Some("s1".into()),
            created_at: DateTime::from_timestamp(1_767_225_600, 123_456_789),
            participant: Some(Participant { id: "p1".into(), name: Some("Ada L.".into()) }),
            facets: vec![Facet { label: "Topics".into(), values: vec!["search".into()] }],
            completed: true,
            gaps: vec![(3, 3)],
            ..Default::default()
        });
        let document = folded("i1", 4, state.clone(), String::new()).document;
        assert_eq!(encode(&state, document.as_deref(), 2), r#"{"served":true,"gaps":[[3,3]]}"#);
        assert!(encode(&state, document.as_deref(), 1).contains(r#""participant":{"id":"p1""#), "layout 1: whole");
        let hidden = match state.clone() {
            State::Interview(i) => State::Interview(InterviewState { hidden: true, ..i }),
            _ => unreachable!(),
        };
        assert!(encode(&hidden, None, 2).contains(r#""hidden":true"#), "not served: whole");
        let stored = r#"{"served":true}"#;
        assert!(matches!(decode(Topic::Interview, stored, None), Err(StoredError::NoDocument)));
        assert!(matches!(
            decode(Topic::Interview, r#"{"served":false}"#, document.as_deref()),
            Err(StoredError::NotServed)
        ));
        assert!(
            decode(Topic::Interview, r#"{"served":true,"hidden":true}"#, document.as_deref()).is_err(),
            "nothing else"
        );
    }
}
