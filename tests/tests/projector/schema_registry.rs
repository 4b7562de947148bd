//! Messages a schema registry's serializer wrote: Confluent's framing (a zero magic byte and a 4-byte
//! schema id) around the contract's JSON is read as the plain JSON is, and counted by schema id; around an
//! Avro or a Protobuf body it is poison, set aside with a reason that says so.

use std::time::Duration;

use end_to_end::events::{event, Outgoing};
use end_to_end::kafka::{self, Topics};
use end_to_end::{redis, runner};
use redis::AsyncCommands;
use serde_json::json;
use shared::codec::StoredDocument;
use shared::{Keyspace, Topic};

const WAIT: Duration = Duration::from_secs(60);

/// `message` as a schema registry's serializer frames it, around `body` (its own value by default).
fn framed(message: Outgoing, schema_id: u32, body: Option<&[u8]>) -> Outgoing {
    let body = body.map(<[u8]>::to_vec).unwrap_or_else(|| message.value.clone());
    let value = [&[0][..], &schema_id.to_be_bytes(), &body].concat();
    Outgoing { value, ..message }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_in_a_schema_registrys_framing_is_applied_and_counted_and_avro_or_protobuf_is_set_aside() {
    let at = "2026-05-01T10:00:00Z";
    let completed = json!({"completedAt": "2026-05-01T09:00:00Z"});
    let created = event(Topic::Study, "org", "s1", 1, "study.created", at, json!({"internalTitle": "Framed"}));
    let messages = vec![
        framed(created.clone(), 7, None),
        // Avro: the envelope's fields back to back, each string its zigzag length then its bytes.
        framed(created.clone(), 8, Some(b"\x04e1\x1astudy.launched\x06org\x04s1\x04")),
        // Protobuf: the message indexes (0: the schema's first message), then tagged fields.
        framed(created, 9, Some(b"\x00\x0a\x02e1\x12\x0estudy.launched")),
        framed(event(Topic::Study, "org", "s1", 2, "study.completed", at, completed), 7, None),
    ];
    let topics = Topics::holding(&messages).await;
    let running = runner::spawn_caught_up(&topics, 4, WAIT).await;

    let snapshot = running.snapshot();
    assert_eq!((snapshot.applied, snapshot.dead_lettered), (2, 2), "{snapshot:?}");
    let keys = Keyspace::new(running.prefix(), 1);
    let mut conn = redis().await;
    let studies: Vec<String> = conn.zrange(keys.studies("org"), 0, -1).await.unwrap();
    assert_eq!(studies, ["s1"], "the framed events were applied: the study is completed");
    let StoredDocument(document) = conn.hget(keys.study_documents("org"), "s1").await.unwrap();
    assert!(document.contains(r#""internalTitle":"Framed""#), "{document}");

    let metrics = running.metrics_text();
    let counted = format!("projector_schema_registry_messages_total{{topic=\"{}\",schema_id=\"7\"}} 2", topics.study);
    assert!(metrics.contains(&counted), "the framed messages counted by schema id:\n{metrics}");
    assert!(!metrics.contains("schema_id=\"8\"") && !metrics.contains("schema_id=\"9\""), "{metrics}");

    let letters = kafka::read(&format!("{}.dlq", topics.study), 2, WAIT).await;
    assert_eq!(letters.len(), 2);
    for (message, schema_id) in [(&messages[1], 8), (&messages[2], 9)] {
        let letter = letters.iter().find(|l| l.value.as_deref() == Some(&message.value[..])).expect("value kept");
        let reason = letter.header("dlq-reason").unwrap();
        assert!(reason.contains(&format!("schema id {schema_id}")) && reason.contains("Avro and Protobuf"), "{reason}");
    }
    running.stop().await;
}
