//! Transcripts as the projector stores them and the API serves them: one string per interview, appended
//! to as messages arrive (so a message costs its own size, not the transcript's), read whole by the
//! interview's route and by its study's page, on one Redis and on a Redis Cluster alike; a long one sent
//! a chunk at a time is never a mixture of two versions; one stored compressed is served as its WebVTT,
//! within the request's budget or beyond it.

use std::time::Duration;

use end_to_end::api::World;
use end_to_end::fixture::{self, interview, ACME, ACME_KEY};
use end_to_end::{read_model, redis, runner};
use redis::AsyncCommands;
use serde_json::{json, Value};
use shared::Keyspace;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    let stored = read_model::transcript(&mut conn, &keys.transcript(ACME, "long")).await.unwrap();
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

/// A transcript of many megabytes is sent a chunk at a time. A repair that swaps in another version of
/// it (of the same length: no shrink to notice) between two chunks must cut the response short, never
/// send the first chunks of one version and the rest of the other. The client reads slowly through a
/// small receive buffer, so the API has read only the first chunks when the repair swaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_rewritten_while_it_is_sent_in_chunks_is_cut_short_never_mixed() {
    // Twelve messages of 800,000 `z`: a transcript of about 9.6 MB, ten chunks beyond a budget of 1 MB,
    // more than the socket buffers and the server's queue hold (about 3 MB were sent before the swap).
    let text = "z".repeat(800_000);
    let long = (0..12u64).fold(interview(ACME, "i_long", STUDY, "2026-03-01T10:00:00Z"), |a, n| {
        a.then(
            "interview.message_recorded",
            "2026-03-01T10:01:00Z",
            json!({"messageId": format!("m{n}"), "role": "participant", "text": text,
                "startSeconds": n, "endSeconds": n as f64 + 0.5}),
        )
    });
    let setup = [
        fixture::completed_study(ACME, STUDY, "2026-03-02T09:00:00Z"),
        fixture::key(ACME, "k", ACME_KEY),
        fixture::completed(long),
    ];
    let messages: Vec<_> = setup.into_iter().flat_map(|a| a.messages).collect();
    let world = World::start_with(&messages, |api| api.max_page_mb = 1).await;
    // The live transcript drifted from the topics (every `z` an `x`, the length unchanged): what the
    // repair puts right while the response is being sent.
    let key = Keyspace::new(world.prefix.clone(), 1).transcript(ACME, "i_long");
    let mut conn = redis().await;
    let stored: String = conn.get(&key).await.unwrap();
    assert!(stored.len() > 9_000_000, "the transcript is {} bytes", stored.len());
    let _: () = conn.set(&key, stored.replace('z', "x")).await.unwrap();

    let address = world.app.address.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(address).await.unwrap();
    let request = format!(
        "GET /v1/interviews/i_long HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {ACME_KEY}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut received = vec![0; 64 * 1024];
    stream.read_exact(&mut received).await.unwrap();
    assert!(received.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&received[..200]));

    let args = ["repair", "--organization", ACME];
    runner::succeed(&world.topics, &world.prefix, world.projector.group(), &args, Duration::from_secs(120)).await;
    assert_eq!(conn.get::<_, String>(&key).await.unwrap(), stored, "the repair swapped the topics' version in");
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut received))
        .await
        .expect("the response ends")
        .ok();

    let marker = b"\"transcriptAsWebVTT\":\"";
    let at = received.windows(marker.len()).position(|w| w == marker).expect("the transcript started") + marker.len();
    let sent = &received[at..];
    let (olds, news) = (sent.iter().filter(|b| **b == b'x').count(), sent.iter().filter(|b| **b == b'z').count());
    assert!(olds > 0 && news == 0, "{olds} bytes of the drifted version were sent, then {news} of the repaired one");
    let ended = sent.windows(b"\",\"createdAt\"".len()).any(|w| w == b"\",\"createdAt\"");
    assert!(!ended, "the transcript was sent whole, {olds} bytes: the repair came too late to test anything");
}

/// WebVTT of about `bytes` bytes: cues of words drawn from a short list, which compress to about a quarter
/// as a served transcript's do.
fn wordy(seed: u64, bytes: usize) -> String {
    const WORDS: [&str; 16] = [
        "report",
        "search",
        "every",
        "Monday",
        "export",
        "the",
        "team",
        "slow",
        "filter",
        "dashboard",
        "when",
        "again",
        "numbers",
        "meeting",
        "we",
        "copy",
    ];
    let (mut state, mut out, mut cue) = (seed * 2 + 1, String::from("WEBVTT\n"), 0u64);
    while out.len() < bytes {
        out.push_str(&format!(
            "\n00:{:02}:{:02}.000 --> 00:{:02}:{:02}.500\n",
            cue / 60 % 60,
            cue % 60,
            cue / 60 % 60,
            cue % 60
        ));
        for _ in 0..12 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            out.push_str(WORDS[(state % 16) as usize]);
            out.push(' ');
        }
        out.push('\n');
        cue += 1;
    }
    out
}

/// Transcripts stored compressed (`shared::codec`, as the projector stores a served interview's) are
/// served as the WebVTT they hold, by the interview's route and by the page, whichever way the page's
/// byte budget (1 MB here) makes the API take them: decompressed with the page, decompressed while the
/// response is sent (they fit the budget compressed, not decompressed), or read as long ones, a frame in
/// one chunk (the budget spent on the frames before them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_transcripts_are_served_as_their_webvtt_within_and_beyond_the_page_budget() {
    let started = |n: usize| format!("2026-03-01T{:02}:00:00Z", 8 + n);
    const N: usize = 16;
    let ids: Vec<String> = (0..N).map(|n| format!("i_{n:02}")).collect();
    let setup = [fixture::completed_study(ACME, STUDY, "2026-03-02T09:00:00Z"), fixture::key(ACME, "k", ACME_KEY)]
        .into_iter()
        .chain(ids.iter().enumerate().map(|(n, id)| fixture::completed(interview(ACME, id, STUDY, &started(n)))));
    let world = World::start(&setup.flat_map(|a| a.messages).collect::<Vec<_>>()).await;
    // The newest (first on the page) 900 kB, the rest 400 kB: 6.9 MB of WebVTT in 1.3 MB of frames (74 kB
    // each, 166 kB the first), so the page's last frames come back as long ones.
    let texts: Vec<String> = (0..N).map(|n| wordy(n as u64, if n == N - 1 { 900_000 } else { 400_000 })).collect();
    let keys = Keyspace::new(world.prefix.clone(), 1);
    let mut conn = redis().await;
    for (id, text) in ids.iter().zip(&texts) {
        let frame = shared::codec::compress_transcript(text);
        assert!(frame.len() < text.len() / 3, "{} of {} bytes", frame.len(), text.len());
        let _: () = conn.set(keys.transcript(ACME, id), frame).await.unwrap();
    }
    let mut config = end_to_end::api::config(&world.prefix, &end_to_end::env("REDIS_URL"));
    config.max_page_mb = 1;
    let app = end_to_end::api::spawn_app(config).await;

    for (id, text) in ids.iter().zip(&texts) {
        let (status, one) = app.json(&format!("/v1/interviews/{id}"), ACME_KEY).await;
        assert_eq!(status, 200, "{id}");
        assert!(one["transcriptAsWebVTT"].as_str() == Some(text), "{id}: another transcript");
    }
    let (status, page) = app.json(&format!("/v1/studies/{STUDY}/interviews?pageSize=100"), ACME_KEY).await;
    assert_eq!(status, 200);
    let served: Vec<(&str, &str)> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["id"].as_str().unwrap(), i["transcriptAsWebVTT"].as_str().unwrap_or("null")))
        .collect();
    let expected: Vec<(&str, &str)> = ids.iter().zip(&texts).rev().map(|(id, t)| (id.as_str(), t.as_str())).collect();
    assert_eq!(served.len(), expected.len());
    for ((id, got), (_, want)) in served.iter().zip(&expected) {
        assert!(got == want, "{id}: {} bytes served where {} were stored", got.len(), want.len());
    }
    assert_eq!(served.iter().map(|s| s.0).collect::<Vec<_>>(), expected.iter().map(|e| e.0).collect::<Vec<_>>());
}
