//! Transcripts as the projector stores them and the API serves them: one string per interview, appended
//! to as messages arrive (so a message costs its own size, not the transcript's), read whole by the
//! interview's route and by its study's page, on one Redis and on a Redis Cluster alike.

use end_to_end::api::World;
use end_to_end::fixture::{self, interview, ACME, ACME_KEY};
use end_to_end::redis;
use redis::AsyncCommands;
use serde_json::{json, Value};
use shared::Keyspace;

const STUDY: &str = "s_talk";

/// `interview` with the participant's messages `range` (message n is said from n to n + 0.5 seconds).
fn talking(id: &str, started: &str, range: std::ops::Range<u64>) -> fixture::Aggregate {
    range.fold(interview(ACME, id, STUDY, started), |a, n| {
        a.then(
            "interview.message_recorded",
            "2026-03-01T10:01:00Z",
            json!({"messageId": format!("m{n}"), "role": "participant", "text": format!("Answer {n} & more"),
                "startSeconds": n, "endSeconds": n as f64 + 0.5}),
        )
    })
}

/// The WebVTT the API must serve for messages `range` of [`talking`], written out independently.
fn webvtt(range: std::ops::Range<u64>) -> String {
    let cues: String = range
        .map(|n| {
            format!(
                "\n00:{:02}:{:02}.000 --> 00:{:02}:{:02}.500\nAnswer {n} &amp; more\n",
                n / 60,
                n % 60,
                n / 60,
                n % 60
            )
        })
        .collect();
    format!("WEBVTT\n{cues}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_is_one_string_appended_to_and_served_whole() {
    let setup = [
        fixture::completed_study(ACME, STUDY, "2026-03-02T09:00:00Z"),
        fixture::key(ACME, "k", ACME_KEY),
        fixture::completed(talking("short", "2026-03-01T09:00:00Z", 0..1)),
        fixture::completed(interview(ACME, "silent", STUDY, "2026-03-01T08:00:00Z")),
        fixture::completed(talking("gone", "2026-03-01T07:00:00Z", 0..3)).then(
            "interview.deleted",
            "2026-03-01T12:00:00Z",
            json!({}),
        ),
    ];
    let mut world = World::start(&setup.into_iter().flat_map(|a| a.messages).collect::<Vec<_>>()).await;
    // One interview of 90 messages, published in three rounds: the transcript is created by the first
    // round and appended to by the next two.
    let long = fixture::completed(talking("long", "2026-03-01T10:00:00Z", 0..90)).messages;
    for round in long.chunks(31) {
        world.publish(round).await;
    }

    let keys = Keyspace::new(world.prefix.clone(), 1);
    let mut conn = redis().await;
    let kind: String = redis::cmd("TYPE").arg(keys.transcript(ACME, "long")).query_async(&mut conn).await.unwrap();
    assert_eq!(kind, "string", "one string key per interview");
    let stored: String = conn.get(keys.transcript(ACME, "long")).await.unwrap();
    assert_eq!(stored, webvtt(0..90), "the header once, then every cue in order");
    let old_hash = format!("{}:g1:{{{ACME}}}:transcripts", world.prefix);
    assert!(!conn.exists::<_, bool>(&old_hash).await.unwrap(), "no per-organization transcript hash");
    assert!(!conn.exists::<_, bool>(keys.transcript(ACME, "gone")).await.unwrap(), "a deleted interview's is gone");

    let (status, one) = world.app.json("/v1/interviews/long", ACME_KEY).await;
    assert_eq!(status, 200);
    assert_eq!(one["transcriptAsWebVTT"].as_str(), Some(webvtt(0..90).as_str()));

    let (status, page) = world.app.json(&format!("/v1/studies/{STUDY}/interviews"), ACME_KEY).await;
    assert_eq!(status, 200, "{page}");
    let served: Vec<(&str, &Value)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["id"].as_str().unwrap(), &i["transcriptAsWebVTT"]))
        .collect();
    let (long, short) = (json!(webvtt(0..90)), json!(webvtt(0..1)));
    assert_eq!(served, [("long", &long), ("short", &short), ("silent", &Value::Null)], "each id its own transcript");
}
