use super::*;
use serde_json::json;

fn message(kind: &str, aggregate: &str, data: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "eventId": "e1", "type": kind, "organizationId": "org_1", "aggregateId": aggregate,
        "sequence": 4, "occurredAt": "2026-11-02T16:20:05.120+01:00", "data": data
    }))
    .unwrap()
}

fn event(topic: Topic, kind: &str, data: Value) -> Event {
    match decode(topic, Some(b"agg"), &message(kind, "agg", data)) {
        Ok(Decoded::Event(event)) => event,
        other => panic!("{kind} did not decode: {other:?}"),
    }
}

fn poison(topic: Topic, value: &[u8]) -> String {
    match decode(topic, None, value) {
        Err(Poison(reason)) => reason,
        other => panic!("expected poison, got {other:?}"),
    }
}

#[test]
fn the_envelope_is_decoded_with_occurred_at_in_utc() {
    let e = event(Topic::Study, "study.completed", json!({"completedAt": "2026-11-02T15:20:00Z"}));
    assert_eq!(e.envelope.event_id, "e1");
    assert_eq!(e.envelope.organization_id, "org_1");
    assert_eq!(e.envelope.aggregate_id, "agg");
    assert_eq!(e.envelope.sequence, 4);
    assert_eq!(e.envelope.occurred_at.to_rfc3339(), "2026-11-02T15:20:05.120+00:00");
    assert_eq!(e.body, Body::StudyCompleted { completed_at: "2026-11-02T15:20:00Z".parse().unwrap() });
}

#[test]
fn every_study_event_type_decodes() {
    let t = Topic::Study;
    assert_eq!(
        event(t, "study.created", json!({"internalTitle": "T"})).body,
        Body::StudyCreated { internal_title: "T".into() }
    );
    assert_eq!(
        event(t, "study.retitled", json!({"internalTitle": "U"})).body,
        Body::StudyRetitled { internal_title: "U".into() }
    );
    assert_eq!(event(t, "study.launched", json!({})).body, Body::StudyLaunched);
    assert_eq!(event(t, "study.reopened", json!({})).body, Body::StudyReopened);
    assert_eq!(event(t, "study.deleted", json!({})).body, Body::StudyDeleted);
}

#[test]
fn every_interview_event_type_decodes() {
    let t = Topic::Interview;
    assert_eq!(
        event(t, "interview.started", json!({"studyId": "s1"})).body,
        Body::InterviewStarted { study_id: "s1".into() }
    );
    assert_eq!(
        event(
            t,
            "interview.participant_identified",
            json!({"participantId": "p", "firstName": "Ada", "lastName": null})
        )
        .body,
        Body::ParticipantIdentified(ParticipantIdentified {
            participant_id: "p".into(),
            first_name: Some("Ada".into()),
            last_name: None
        })
    );
    let full = json!({"messageId": "m", "role": "participant", "text": "hi", "translatedText": "salut",
        "startSeconds": 1.5, "endSeconds": null});
    assert_eq!(
        event(t, "interview.message_recorded", full).body,
        Body::MessageRecorded(MessageRecorded {
            message_id: "m".into(),
            role: Role::Participant,
            text: "hi".into(),
            translated_text: Some("salut".into()),
            start_seconds: Some(1.5),
            end_seconds: None
        })
    );
    let bare = json!({"messageId": "m", "role": "interviewer", "text": "q"});
    match event(t, "interview.message_recorded", bare).body {
        Body::MessageRecorded(m) => {
            assert!(m.role == Role::Interviewer && m.start_seconds.is_none())
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        event(t, "interview.facets_updated", json!({"facets": [{"label": "L", "values": ["a", "b"]}]})).body,
        Body::FacetsUpdated { facets: vec![crate::Facet { label: "L".into(), values: vec!["a".into(), "b".into()] }] }
    );
    assert_eq!(
        event(t, "interview.video_stored", json!({"key": "v.mp4"})).body,
        Body::VideoStored { bucket: None, key: "v.mp4".into() }
    );
    assert_eq!(
        event(t, "interview.video_stored", json!({"bucket": "b", "key": "v.mp4"})).body,
        Body::VideoStored { bucket: Some("b".into()), key: "v.mp4".into() }
    );
    assert_eq!(event(t, "interview.video_deleted", json!({})).body, Body::VideoDeleted);
    assert_eq!(event(t, "interview.completed", json!({})).body, Body::InterviewCompleted);
    assert_eq!(event(t, "interview.hidden", json!({})).body, Body::InterviewHidden);
    assert_eq!(event(t, "interview.unhidden", json!({})).body, Body::InterviewUnhidden);
    assert_eq!(event(t, "interview.deleted", json!({})).body, Body::InterviewDeleted);
}

#[test]
fn every_api_key_event_type_decodes() {
    let sha = "a".repeat(64);
    assert_eq!(
        event(Topic::ApiKey, "api_key.created", json!({"name": "crm", "keySha256": sha})).body,
        Body::ApiKeyCreated { name: "crm".into(), key_sha256: sha }
    );
    assert_eq!(event(Topic::ApiKey, "api_key.deleted", json!({})).body, Body::ApiKeyDeleted);
}

#[test]
fn an_unknown_type_with_a_valid_envelope_is_skipped_not_poison() {
    match decode(Topic::Study, None, &message("study.archived", "agg", json!({"x": 1}))) {
        Ok(Decoded::Unknown { envelope }) => assert_eq!(envelope.kind, "study.archived"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn malformed_messages_are_poison_with_a_reason() {
    assert!(poison(Topic::Study, b"not json").starts_with("invalid envelope"));
    assert!(poison(Topic::Study, b"[1,2]").starts_with("invalid envelope"));
    let missing =
        br#"{"eventId":"e","type":"study.launched","organizationId":"o","aggregateId":"a","sequence":1,"data":{}}"#;
    assert!(poison(Topic::Study, missing).contains("occurredAt"));
    let zero = br#"{"eventId":"e","type":"study.launched","organizationId":"o","aggregateId":"a","sequence":0,"occurredAt":"2026-01-01T00:00:00Z","data":{}}"#;
    assert!(poison(Topic::Study, zero).contains("sequence"));
    let wrong_type = br#"{"eventId":"e","type":"study.launched","organizationId":"o","aggregateId":"a","sequence":"1","occurredAt":"2026-01-01T00:00:00Z","data":{}}"#;
    assert!(poison(Topic::Study, wrong_type).starts_with("invalid envelope"));
    let bad_date = br#"{"eventId":"e","type":"study.launched","organizationId":"o","aggregateId":"a","sequence":1,"occurredAt":"yesterday","data":{}}"#;
    assert!(poison(Topic::Study, bad_date).starts_with("invalid envelope"));
    let not_utf8 = b"{\"eventId\":\"\xff\"}";
    assert!(poison(Topic::Study, not_utf8).starts_with("invalid envelope"));
}

#[test]
fn a_known_type_with_bad_data_is_poison() {
    let reason = poison(Topic::Study, &message("study.created", "agg", json!({"internalTitle": 3})));
    assert!(reason.starts_with("invalid data for study.created"), "{reason}");
    let reason = poison(Topic::Study, &message("study.completed", "agg", json!({})));
    assert!(reason.contains("completedAt"), "{reason}");
    let role = json!({"messageId": "m", "role": "moderator", "text": "q"});
    poison(Topic::Interview, &message("interview.message_recorded", "agg", role));
    let facets = json!({"facets": [{"label": "L"}]});
    poison(Topic::Interview, &message("interview.facets_updated", "agg", facets));
    let sha = json!({"name": "n", "keySha256": "ABC"});
    poison(Topic::ApiKey, &message("api_key.created", "agg", sha));
}

#[test]
fn an_event_on_the_wrong_topic_or_under_the_wrong_key_is_poison() {
    let reason = poison(Topic::Interview, &message("study.launched", "agg", json!({})));
    assert!(reason.contains("belongs on study-events"), "{reason}");
    let under_other_key = decode(Topic::Study, Some(b"other"), &message("study.launched", "agg", json!({})));
    assert_eq!(under_other_key, Err(Poison("message key does not equal aggregateId".into())));
}

#[test]
fn every_listed_type_is_known_and_every_other_type_is_labelled_other() {
    for kind in TYPES {
        // Known: with data it does not accept, a known type is poison, never skipped as unknown.
        let decoded = Topic::ALL.map(|topic| decode(topic, None, &message(kind, "agg", json!({"x": [1]}))));
        assert!(decoded.iter().all(|d| !matches!(d, Ok(Decoded::Unknown { .. }))), "{kind}: {decoded:?}");
        assert_eq!(type_label(kind), kind);
    }
    for kind in ["study.archived", "", "x".repeat(2000).as_str()] {
        assert!(matches!(decode(Topic::Study, None, &message(kind, "agg", json!({}))), Ok(Decoded::Unknown { .. })));
        assert_eq!(type_label(kind), "other");
    }
}

#[test]
fn a_participant_without_first_or_last_name_is_poison_and_null_is_null() {
    let t = Topic::Interview;
    for data in [json!({"participantId": "p", "firstName": "Ada"}), json!({"participantId": "p", "lastName": null})] {
        let reason = poison(t, &message("interview.participant_identified", "agg", data));
        assert!(reason.contains("missing field"), "{reason}");
    }
    let nulls = json!({"participantId": "p", "firstName": null, "lastName": null});
    let body = event(t, "interview.participant_identified", nulls).body;
    let expected = ParticipantIdentified { participant_id: "p".into(), first_name: None, last_name: None };
    assert_eq!(body, Body::ParticipantIdentified(expected));
}

mod properties {
    use proptest::prelude::*;
    use serde_json::json;

    use crate::events::{decode, Decoded, Topic};

    proptest! {
        /// No value, however broken, makes decoding panic: it is an event, an unknown type, or poison.
        #[test]
        fn any_bytes_decode_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            for topic in Topic::ALL {
                let _ = decode(topic, None, &bytes);
            }
        }

        /// Envelopes with fields of any JSON type: decoding never panics, and whatever is not poison keeps
        /// the envelope's own ids.
        #[test]
        fn any_envelope_decodes_without_panicking(
            kind in prop_oneof![Just(json!("study.created")), Just(json!("interview.message_recorded")), Just(json!("x")), Just(json!(7))],
            id in prop_oneof![Just(json!("a")), Just(json!("")), Just(json!(null)), Just(json!([1]))],
            sequence in prop_oneof![Just(json!(1)), Just(json!(0)), Just(json!(-1)), Just(json!(u64::MAX)), Just(json!(1.5)), Just(json!("2"))],
            at in prop_oneof![Just(json!("2026-11-02T16:20:05.120+01:00")), Just(json!("yesterday")), Just(json!(0))],
            data in prop_oneof![Just(json!({})), Just(json!({"internalTitle": "t"})), Just(json!({"text": 1})), Just(json!([]))],
        ) {
            let value = json!({"eventId": "e", "type": kind, "organizationId": "o", "aggregateId": id,
                "sequence": sequence, "occurredAt": at, "data": data});
            for topic in Topic::ALL {
                match decode(topic, None, value.to_string().as_bytes()) {
                    Ok(Decoded::Event(event)) => prop_assert_eq!(Some(event.envelope.aggregate_id.as_str()), id.as_str()),
                    Ok(Decoded::Unknown { envelope }) => prop_assert_eq!(Some(envelope.aggregate_id.as_str()), id.as_str()),
                    Err(_) => {}
                }
            }
        }
    }
}

#[test]
fn an_empty_id_is_poison() {
    let envelope = |org: &str, aggregate: &str, event: &str| {
        serde_json::to_vec(&json!({"eventId": event, "type": "study.launched", "organizationId": org,
            "aggregateId": aggregate, "sequence": 1, "occurredAt": "2026-11-02T16:20:05Z", "data": {}}))
        .unwrap()
    };
    for (value, field) in [
        (envelope("", "s", "e"), "organizationId"),
        (envelope("o", "", "e"), "aggregateId"),
        (envelope("o", "s", ""), "eventId"),
    ] {
        let reason = poison(Topic::Study, &value);
        assert!(reason.contains(field) && reason.contains("empty"), "{reason}");
    }
    let t = Topic::Interview;
    for (kind, data, field) in [
        ("interview.started", json!({"studyId": ""}), "studyId"),
        (
            "interview.participant_identified",
            json!({"participantId": "", "firstName": null, "lastName": null}),
            "participantId",
        ),
        ("interview.message_recorded", json!({"messageId": "", "role": "participant", "text": "x"}), "messageId"),
    ] {
        let reason = poison(t, &message(kind, "agg", data));
        assert!(reason.contains(field), "{kind}: {reason}");
    }
}

#[test]
fn ids_longer_than_the_key_layouts_bound_are_poison_and_ids_at_it_decode() {
    let at = "a".repeat(crate::keys::MAX_ID_BYTES);
    let over = "a".repeat(crate::keys::MAX_ID_BYTES + 1);
    let started = |aggregate: &str, study: &str| message("interview.started", aggregate, json!({"studyId": study}));
    assert!(matches!(decode(Topic::Interview, None, &started(&at, &at)), Ok(Decoded::Event(_))));
    assert!(poison(Topic::Interview, &started(&over, "s1")).contains("aggregateId is longer than 256 bytes"));
    assert!(poison(Topic::Interview, &started("i1", &over)).contains("studyId is longer than 256 bytes"));
    for field in ["eventId", "organizationId"] {
        let mut value: Value = serde_json::from_slice(&started("i1", "s1")).unwrap();
        value[field] = json!(over);
        let reason = poison(Topic::Interview, &serde_json::to_vec(&value).unwrap());
        assert!(reason.contains(&format!("{field} is longer than 256 bytes")), "{reason}");
    }
}

#[test]
fn an_envelope_in_a_schema_registrys_json_framing_decodes_as_the_plain_one() {
    let plain = message("study.created", "agg", json!({"internalTitle": "T"}));
    let framed = [&[0, 0, 0, 1, 44][..], &plain].concat();
    assert_eq!(decode(Topic::Study, Some(b"agg"), &framed), decode(Topic::Study, Some(b"agg"), &plain));
    assert!(matches!(decode(Topic::Study, Some(b"agg"), &framed), Ok(Decoded::Event(_))));
    let reason = poison(Topic::Study, &[&[0, 0, 0, 1, 44][..], b"{\"eventId\":"].concat());
    assert!(reason.starts_with("invalid envelope"), "{reason}");
    let reason = poison(Topic::Study, &[&[0, 0, 0, 1, 44][..], b"\x02e1"].concat());
    assert!(reason.contains("schema id 300"), "{reason}");
}
