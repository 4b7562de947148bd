//! What only a real client can check: the video link downloads the stored object from the real S3
//! server, and the transcript reads back through an independent, spec-following WebVTT parser.

use std::time::Duration;

use end_to_end::api::{config, spawn_serving_app, World};
use end_to_end::fixture::{self, interview, ACME, ACME_KEY};
use end_to_end::metrics::sample;
use end_to_end::{env, eventually, s3, unique};
use fasrt::vtt::cue::{CueText, Node};
use fasrt::vtt::{Block, Parser};
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webvtt_transcript_reads_back_as_the_original_texts_and_times() {
    let world = World::start(&fixture::dataset()).await;
    let (_, body) = world.app.json("/v1/interviews/i1", ACME_KEY).await;
    let transcript = body["transcriptAsWebVTT"].as_str().expect("a transcript");
    let mut cues = Vec::new();
    for block in Parser::new(transcript) {
        match block.expect("valid WebVTT") {
            Block::Cue(cue) => {
                let header = cue.header_ref();
                let text = CueText::parse(cue.body_ref());
                let mut plain = String::new();
                for node in text.children_slice() {
                    match node {
                        Node::Text(t) => plain.push_str(t.normalize()),
                        other => panic!("unexpected markup {other:?}"),
                    }
                }
                cues.push((header.start().to_duration(), header.end().to_duration(), plain));
            }
            other => panic!("unexpected block {other:?}"),
        }
    }
    let ms = Duration::from_millis;
    assert_eq!(
        cues,
        [
            // A blank line inside a message becomes a single line break; everything else is the original text.
            (ms(3_723_004), ms(3_725_500), "Fish & chips <3 --> great\nReally.".to_string()),
            (ms(0), ms(0), "No timing here".to_string()),
        ]
    );
}

fn videos(world_key: &str, object: &str) -> Vec<end_to_end::events::Outgoing> {
    let bucket = env("S3_BUCKET");
    [
        fixture::completed(interview(ACME, "v_default", "s_b", "2026-03-02T10:00:00Z").then(
            "interview.video_stored",
            "2026-03-02T10:00:01Z",
            json!({"key": object}),
        )),
        fixture::completed(interview(ACME, "v_bucket", "s_b", "2026-03-02T10:00:00Z").then(
            "interview.video_stored",
            "2026-03-02T10:00:01Z",
            json!({"bucket": bucket, "key": object}),
        )),
        fixture::completed(
            interview(ACME, "v_deleted", "s_b", "2026-03-02T10:00:00Z")
                .then("interview.video_stored", "2026-03-02T10:00:01Z", json!({"key": object}))
                .then("interview.video_deleted", "2026-03-02T10:00:02Z", json!({})),
        ),
        fixture::key(ACME, "k", world_key),
    ]
    .into_iter()
    .flat_map(|a| a.messages)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_video_link_downloads_the_stored_object_and_is_fresh_on_every_request() {
    let object = format!("interviews/{}.mp4", unique("video"));
    let bytes: Vec<u8> = (0..50_000u32).map(|n| (n % 251) as u8).collect();
    s3::put(&object, bytes.clone()).await;
    let world = World::start(&[fixture::dataset(), videos(ACME_KEY, &object)].concat()).await;

    for id in ["v_default", "v_bucket"] {
        let (_, body) = world.app.json(&format!("/v1/interviews/{id}"), ACME_KEY).await;
        let url = body["videoDownloadURL"].as_str().expect("a link").to_string();
        assert!(url.contains("X-Amz-Expires=900"), "valid 15 minutes: {url}");
        let download = reqwest::get(&url).await.unwrap();
        assert_eq!(download.status(), 200, "{id}");
        assert_eq!(download.bytes().await.unwrap().to_vec(), bytes, "{id}: the stored bytes");
        let mut tampered = url.replace("X-Amz-Expires=900", "X-Amz-Expires=901");
        assert_ne!(reqwest::get(&tampered).await.unwrap().status(), 200, "the server checks the signature");
        tampered = url.replace(&object, "interviews/other.mp4");
        assert_ne!(reqwest::get(&tampered).await.unwrap().status(), 200);
    }
    let (_, deleted) = world.app.json("/v1/interviews/v_deleted", ACME_KEY).await;
    assert_eq!(deleted["videoDownloadURL"], Value::Null, "a deleted video has no link");

    let first = world.app.json("/v1/interviews/v_default", ACME_KEY).await.1["videoDownloadURL"].clone();
    let second = eventually(Duration::from_secs(5), "a link signed a second later", || async {
        let url = world.app.json("/v1/interviews/v_default", ACME_KEY).await.1["videoDownloadURL"].clone();
        (url != first).then_some(url)
    })
    .await;
    let (first, second) = (first.as_str().unwrap(), second.as_str().unwrap());
    assert_eq!(reqwest::get(first).await.unwrap().status(), 200, "an earlier link stays valid");
    assert_eq!(reqwest::get(second).await.unwrap().status(), 200);
    let (_, page) = world.app.json("/v1/studies/s_b/interviews", ACME_KEY).await;
    let listed = page["items"].as_array().unwrap().iter().find(|i| i["id"] == "v_default").unwrap();
    assert_eq!(reqwest::get(listed["videoDownloadURL"].as_str().unwrap()).await.unwrap().status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_video_gets_no_link_without_storage_details() {
    let object = format!("interviews/{}.mp4", unique("video"));
    let world = World::start(&[fixture::dataset(), videos(ACME_KEY, &object)].concat()).await;
    let mut without_bucket = config(&world.prefix, &env("REDIS_URL"));
    without_bucket.s3_bucket = None;
    let app = spawn_serving_app(without_bucket).await;
    let (status, body) = app.json("/v1/interviews/v_default", ACME_KEY).await;
    assert_eq!((status, &body["videoDownloadURL"]), (200, &Value::Null), "no bucket for it");
    assert!(app.json("/v1/interviews/v_bucket", ACME_KEY).await.1["videoDownloadURL"].is_string());
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    assert_eq!(sample(&metrics, "api_presign_failures_total", &[]), 1.0, "{metrics}");

    let mut disabled = config(&world.prefix, &env("REDIS_URL"));
    disabled.s3_disabled = true;
    let app = spawn_serving_app(disabled).await;
    assert_eq!(app.json("/v1/interviews/v_bucket", ACME_KEY).await.1["videoDownloadURL"], Value::Null);
}
