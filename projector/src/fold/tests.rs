use chrono::{DateTime, Utc};
use serde_json::json;
use shared::time::score;
use shared::{decode, Decoded, InterviewDocument, Topic};

use super::*;

/// How many events a fold applied (gaps included), found duplicate, and applied after a gap.
#[derive(Debug, PartialEq, Eq)]
struct Tally {
    applied: usize,
    duplicates: usize,
    gaps: usize,
}

fn tally(verdicts: &[Verdict]) -> Tally {
    let count = |v: Verdict| verdicts.iter().filter(|x| **x == v).count();
    let gaps = count(Verdict::Gap);
    Tally { applied: count(Verdict::Applied) + gaps, duplicates: count(Verdict::Duplicate), gaps }
}

fn ev(topic: Topic, seq: u64, kind: &str, at: &str, data: serde_json::Value) -> Event {
    let value = json!({"eventId": format!("e{seq}"), "type": kind, "organizationId": "org", "aggregateId": "a1",
        "sequence": seq, "occurredAt": at, "data": data});
    match decode(topic, None, value.to_string().as_bytes()).unwrap() {
        Decoded::Event(e) => e,
        other => panic!("{other:?}"),
    }
}

fn run(topic: Topic, events: &[Event]) -> (Folded, Tally) {
    let refs: Vec<&Event> = events.iter().collect();
    let (outcome, verdicts) = fold("a1", 0, State::new(topic), &refs);
    (outcome, tally(&verdicts))
}

fn study_events() -> Vec<Event> {
    let s = Topic::Study;
    vec![
        ev(s, 1, "study.created", "2026-01-01T10:00:00+02:00", json!({"internalTitle": "Draft title"})),
        ev(s, 2, "study.retitled", "2026-01-02T00:00:00Z", json!({"internalTitle": "Final title"})),
        ev(s, 3, "study.launched", "2026-01-03T00:00:00Z", json!({})),
        ev(s, 4, "study.completed", "2026-01-04T00:00:00Z", json!({"completedAt": "2026-01-03T23:30:00-01:00"})),
    ]
}

#[test]
fn a_completed_study_gets_a_document_and_a_place_in_the_completed_list() {
    let (outcome, tally) = run(Topic::Study, &study_events());
    assert_eq!(tally, Tally { applied: 4, duplicates: 0, gaps: 0 });
    let doc: serde_json::Value = serde_json::from_str(outcome.document.as_deref().unwrap()).unwrap();
    assert_eq!(
        doc,
        json!({"id": "a1", "internalTitle": "Final title", "completedOn": "2026-01-04",
            "createdAt": "2026-01-01T08:00:00Z", "updatedAt": "2026-01-04T00:00:00Z"})
    );
    let completed_at: DateTime<Utc> = "2026-01-04T00:30:00Z".parse().unwrap();
    assert_eq!(outcome.index, IndexChange::Add(score(&completed_at)));
    assert_eq!(outcome.sequence, 4);
}

#[test]
fn a_study_that_is_not_completed_has_no_document() {
    let mut events = study_events();
    events.truncate(3);
    let (outcome, _) = run(Topic::Study, &events);
    assert_eq!((outcome.document, outcome.index), (None, IndexChange::Remove));
    events = study_events();
    events.push(ev(Topic::Study, 5, "study.reopened", "2026-01-05T00:00:00Z", json!({})));
    let (outcome, _) = run(Topic::Study, &events);
    assert_eq!((outcome.document, outcome.index), (None, IndexChange::Remove));
    events = study_events();
    events.push(ev(Topic::Study, 5, "study.deleted", "2026-01-05T00:00:00Z", json!({})));
    events.push(ev(
        Topic::Study,
        6,
        "study.completed",
        "2026-01-06T00:00:00Z",
        json!({"completedAt": "2026-01-06T00:00:00Z"}),
    ));
    let (outcome, _) = run(Topic::Study, &events);
    assert_eq!((outcome.document, outcome.index), (None, IndexChange::Remove), "deleted is final");
}

#[test]
fn duplicates_change_nothing_and_gaps_are_applied_and_counted() {
    let all = study_events();
    let with_duplicates = vec![all[0].clone(), all[0].clone(), all[1].clone(), all[0].clone(), all[3].clone()];
    let (outcome, tally) = run(Topic::Study, &with_duplicates);
    assert_eq!(tally, Tally { applied: 3, duplicates: 2, gaps: 1 });
    assert!(outcome.document.is_some(), "the gap did not block completion");
    // Resuming from stored state: everything at or below the stored sequence changes nothing; 3, which
    // the gap skipped, is late rather than a duplicate.
    let refs: Vec<&Event> = all.iter().collect();
    let (again, verdicts) = fold("a1", 4, outcome.state.clone(), &refs);
    assert_eq!(verdicts, [Verdict::Duplicate, Verdict::Duplicate, Verdict::Late, Verdict::Duplicate]);
    assert_eq!(again.document, outcome.document);
}

#[test]
fn updated_at_is_the_latest_applied_event_time() {
    let mut events = study_events();
    events.push(ev(Topic::Study, 5, "study.retitled", "2026-02-01T12:00:00.250+00:00", json!({"internalTitle": "X"})));
    let (outcome, _) = run(Topic::Study, &events);
    assert!(outcome.document.unwrap().contains(r#""updatedAt":"2026-02-01T12:00:00.250Z""#));
}

fn interview(kind: &str, seq: u64, data: serde_json::Value) -> Event {
    ev(Topic::Interview, seq, kind, &format!("2026-03-01T00:00:{seq:02}Z"), data)
}

fn completed_interview() -> Vec<Event> {
    vec![
        interview("interview.started", 1, json!({"studyId": "s1"})),
        interview(
            "interview.participant_identified",
            2,
            json!({"participantId": "p1", "firstName": "Ada", "lastName": "Lovelace"}),
        ),
        interview("interview.message_recorded", 3, json!({"messageId": "m1", "role": "interviewer", "text": "Q?"})),
        interview(
            "interview.message_recorded",
            4,
            json!({"messageId": "m2", "role": "participant", "text": "A & B", "translatedText": "T", "startSeconds": 1, "endSeconds": 2}),
        ),
        interview("interview.facets_updated", 5, json!({"facets": [{"label": "L", "values": ["v"]}]})),
        interview("interview.video_stored", 6, json!({"key": "videos/i.mp4"})),
        interview("interview.completed", 7, json!({})),
    ]
}

#[test]
fn a_completed_interview_has_its_document_transcript_and_place_in_its_study() {
    let (outcome, tally) = run(Topic::Interview, &completed_interview());
    assert_eq!(tally.applied, 7);
    let doc: serde_json::Value = serde_json::from_str(outcome.document.as_deref().unwrap()).unwrap();
    assert_eq!(
        doc,
        json!({"id": "a1", "studyId": "s1", "participant": {"id": "p1", "name": "Ada L."},
            "facets": [{"label": "L", "values": ["v"]}], "video": {"key": "videos/i.mp4"},
            "createdAt": "2026-03-01T00:00:01Z", "updatedAt": "2026-03-01T00:00:07Z"})
    );
    let created: DateTime<Utc> = "2026-03-01T00:00:01Z".parse().unwrap();
    assert_eq!(outcome.index, IndexChange::Add(score(&created)));
    assert_eq!(outcome.transcript, TranscriptChange::Append("\n00:00:01.000 --> 00:00:02.000\nA &amp; B\n".into()));
}

#[test]
fn hidden_deleted_and_incomplete_interviews_have_no_document() {
    let mut events = completed_interview();
    events.pop();
    let (outcome, _) = run(Topic::Interview, &events);
    assert_eq!((outcome.document.is_none(), &outcome.index), (true, &IndexChange::Remove));

    let mut events = completed_interview();
    events.push(interview("interview.hidden", 8, json!({})));
    let (hidden, _) = run(Topic::Interview, &events);
    assert_eq!((hidden.document.is_none(), &hidden.index), (true, &IndexChange::Remove));

    events.push(interview("interview.unhidden", 9, json!({})));
    let (unhidden, _) = run(Topic::Interview, &events);
    assert!(unhidden.document.is_some() && matches!(unhidden.index, IndexChange::Add(_)));

    events.push(interview("interview.deleted", 10, json!({})));
    events.push(interview(
        "interview.message_recorded",
        11,
        json!({"messageId": "m9", "role": "participant", "text": "late"}),
    ));
    let (deleted, _) = run(Topic::Interview, &events);
    assert_eq!((deleted.document.is_none(), &deleted.index), (true, &IndexChange::Remove));
    assert_eq!(deleted.transcript, TranscriptChange::Delete);
}

#[test]
fn a_later_participant_replaces_the_earlier_and_a_deleted_video_is_gone() {
    let mut events = completed_interview();
    events.push(interview(
        "interview.participant_identified",
        8,
        json!({"participantId": "p2", "firstName": null, "lastName": "X"}),
    ));
    events.push(interview("interview.video_deleted", 9, json!({})));
    let (outcome, _) = run(Topic::Interview, &events);
    let doc: InterviewDocument = serde_json::from_str(outcome.document.as_deref().unwrap()).unwrap();
    assert_eq!(doc.participant, Some(Participant { id: "p2".into(), name: None }));
    assert_eq!(doc.video, None);
}

#[test]
fn an_interview_without_its_started_event_is_served_but_listed_nowhere() {
    let events = vec![interview("interview.completed", 3, json!({}))];
    let (outcome, tally) = run(Topic::Interview, &events);
    assert_eq!(tally.gaps, 1);
    assert!(outcome.document.is_some());
    assert_eq!(outcome.index, IndexChange::None);
}

#[test]
fn an_api_key_is_live_until_deleted() {
    let sha = "0".repeat(64);
    let created =
        ev(Topic::ApiKey, 1, "api_key.created", "2026-01-01T00:00:00Z", json!({"name": "crm", "keySha256": sha}));
    let (live, _) = run(Topic::ApiKey, std::slice::from_ref(&created));
    assert_eq!(live.index, IndexChange::KeyLive { retired: vec![] });
    let deleted = ev(Topic::ApiKey, 2, "api_key.deleted", "2026-01-02T00:00:00Z", json!({}));
    let (revoked, _) = run(Topic::ApiKey, &[created, deleted]);
    assert_eq!(revoked.index, IndexChange::KeyRevoked { retired: vec![] });
    assert_eq!(revoked.document, None);
}

#[test]
fn a_key_created_again_retires_its_old_secret_and_deletion_revokes_every_secret_it_had() {
    let (a, b, c) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
    let created = |seq, sha: &str| {
        ev(Topic::ApiKey, seq, "api_key.created", "2026-01-01T00:00:00Z", json!({"name": "crm", "keySha256": sha}))
    };
    let events = [created(1, &a), created(2, &b), created(3, &b), created(4, &c)];
    let (live, _) = run(Topic::ApiKey, &events);
    assert_eq!(live.index, IndexChange::KeyLive { retired: vec![a.clone(), b.clone()] });
    // Back to an old secret: it is live again, no longer retired.
    let (again, _) = run(Topic::ApiKey, &[created(1, &a), created(2, &b), created(3, &a)]);
    assert_eq!(again.index, IndexChange::KeyLive { retired: vec![b.clone()] });
    // Whatever the batching, the outcome is the same: folding in two runs gives what one run gives.
    let (first, _) = run(Topic::ApiKey, &events[..2]);
    let rest: Vec<&Event> = events[2..].iter().collect();
    let (second, _) = fold("a1", 2, first.state, &rest);
    assert_eq!(second, live);
    let deleted = ev(Topic::ApiKey, 5, "api_key.deleted", "2026-01-02T00:00:00Z", json!({}));
    let (revoked, _) = run(Topic::ApiKey, &[created(1, &a), created(2, &b), created(3, &c), deleted]);
    assert_eq!(revoked.index, IndexChange::KeyRevoked { retired: vec![a, b] });
}

#[test]
fn stored_state_round_trips() {
    let (outcome, _) = run(Topic::Interview, &completed_interview());
    let json = serde_json::to_string(&outcome.state).unwrap();
    assert_eq!(State::decode(Topic::Interview, &json).unwrap(), outcome.state);
}

#[test]
fn an_interviews_study_never_changes() {
    let mut events = completed_interview();
    events.push(interview("interview.started", 8, json!({"studyId": "other-study"})));
    events.push(interview("interview.completed", 9, json!({})));
    let (outcome, _) = run(Topic::Interview, &events);
    let doc: InterviewDocument = serde_json::from_str(outcome.document.as_deref().unwrap()).unwrap();
    assert_eq!(doc.study_id.as_deref(), Some("s1"));
}

#[test]
fn a_later_started_event_makes_the_interview_not_completed_and_visible_again() {
    let mut events = completed_interview();
    let n = events.len() as u64;
    events.push(interview("interview.hidden", n + 1, json!({})));
    events.push(interview("interview.started", n + 2, json!({"studyId": "other"})));
    let (outcome, _) = run(Topic::Interview, &events);
    let State::Interview(state) = &outcome.state else { panic!("an interview") };
    assert!(!state.completed && !state.hidden, "{state:?}");
    assert_eq!(state.study_id.as_deref(), Some("s1"), "the study never changes");
    assert_eq!(state.created_at, Some(events.last().unwrap().envelope.occurred_at));
    assert_eq!((outcome.document, outcome.index), (None, IndexChange::Remove), "not completed: listed nowhere");
}

fn seqs(topic: Topic, sequences: &[u64]) -> Vec<Event> {
    let at = |seq: u64| format!("2026-01-01T00:00:{:02}Z", seq % 60);
    match topic {
        Topic::Study => sequences
            .iter()
            .map(|&seq| ev(topic, seq, "study.retitled", &at(seq), json!({"internalTitle": format!("t{seq}")})))
            .collect(),
        _ => sequences.iter().map(|&seq| interview("interview.hidden", seq, json!({}))).collect(),
    }
}

#[test]
fn a_gap_is_recorded_as_the_range_of_sequences_it_skipped() {
    let (outcome, tally) = run(Topic::Interview, &seqs(Topic::Interview, &[1, 2, 5, 6, 8]));
    assert_eq!(tally.gaps, 2);
    assert_eq!(outcome.state.gaps(), &[(3, 4), (7, 7)]);
    // From stored state too: the gap starts one past the stored sequence.
    let later = seqs(Topic::Interview, &[11]);
    let (again, _) = fold("a1", 8, outcome.state, &later.iter().collect::<Vec<_>>());
    assert_eq!(again.state.gaps(), &[(3, 4), (7, 7), (9, 10)]);
}

#[test]
fn an_event_inside_a_recorded_gap_is_late_and_one_outside_is_a_duplicate() {
    let (outcome, _) = run(Topic::Study, &seqs(Topic::Study, &[1, 2, 4]));
    let arriving = seqs(Topic::Study, &[3, 2, 4, 3]);
    let (again, verdicts) = fold("a1", 4, outcome.state.clone(), &arriving.iter().collect::<Vec<_>>());
    assert_eq!(verdicts, [Verdict::Late, Verdict::Duplicate, Verdict::Duplicate, Verdict::Late]);
    assert_eq!(again, outcome, "a late event changes nothing, its gap included");
    // Within one run of events as well: 3 after 4 in the same batch.
    let (_, verdicts) =
        fold("a1", 0, State::new(Topic::Study), &seqs(Topic::Study, &[1, 2, 4, 3]).iter().collect::<Vec<_>>());
    assert_eq!(verdicts, [Verdict::Applied, Verdict::Applied, Verdict::Gap, Verdict::Late]);
    assert_eq!(crate::observe::Outcome::from(Verdict::Late).label(), "late");
}

#[test]
fn a_state_without_gaps_is_stored_as_before_and_one_with_gaps_round_trips() {
    for topic in Topic::ALL {
        let json = serde_json::to_string(&State::new(topic)).unwrap();
        assert!(!json.contains("gaps"), "{json}");
    }
    let (outcome, _) = run(Topic::Interview, &completed_interview());
    assert!(!serde_json::to_string(&outcome.state).unwrap().contains("gaps"));
    let (gapped, _) = run(Topic::Interview, &seqs(Topic::Interview, &[2, 4]));
    let json = serde_json::to_string(&gapped.state).unwrap();
    assert!(json.contains(r#""gaps":[[1,1],[3,3]]"#), "{json}");
    assert_eq!(State::decode(Topic::Interview, &json).unwrap(), gapped.state);
}

#[test]
fn the_gaps_kept_are_capped_by_merging_the_oldest() {
    let every_other: Vec<u64> = (1..=200).map(|n| n * 2).collect();
    let (outcome, tally) = run(Topic::Study, &seqs(Topic::Study, &every_other));
    assert_eq!(tally.gaps, 200);
    let gaps = outcome.state.gaps();
    assert_eq!(gaps.len(), super::state::MAX_GAPS);
    // The oldest ranges became one that covers them all (and the sequences applied between them).
    assert_eq!(gaps[0], (1, 2 * (200 - super::state::MAX_GAPS as u64 + 1) - 1));
    assert_eq!(gaps[gaps.len() - 1], (399, 399));
    assert!(outcome.state.in_gap(1) && outcome.state.in_gap(50) && !outcome.state.in_gap(400));
}
