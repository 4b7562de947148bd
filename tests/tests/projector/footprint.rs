//! What the read model costs Redis: a served interview holds its data without room left to grow.

use std::time::Duration;

use end_to_end::events::event;
use end_to_end::kafka::{self, Topics};
use end_to_end::{redis, runner, unique};
use redis::AsyncCommands;
use serde_json::json;
use shared::{Keyspace, Topic};

const WAIT: Duration = Duration::from_secs(60);
const INTERVIEWS: usize = 16;
const MESSAGES: u64 = 12;

/// `MEMORY USAGE` of a key, every byte Redis allocated for it (in a script, so that a cluster routes it
/// by its key).
async fn memory_usage(conn: &mut shared::connection::Connection, key: &str) -> u64 {
    let usage = redis::Script::new("return redis.call('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', '0')");
    usage.key(key).invoke_async(conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transcript_appended_message_by_message_is_kept_at_its_exact_size_once_its_interview_is_served() {
    let org = unique("org");
    let at = "2026-04-01T10:00:00Z";
    let ids: Vec<String> = (0..INTERVIEWS).map(|i| format!("iv-{i:02}")).collect();
    let started: Vec<_> = ids
        .iter()
        .map(|id| event(Topic::Interview, &org, id, 1, "interview.started", at, json!({"studyId": "s1"})))
        .collect();
    let topics = Topics::holding(&started).await;
    let running = runner::spawn_caught_up(&topics, INTERVIEWS as u64, WAIT).await;
    let producer = kafka::producer();
    // One message of each interview per batch, so that each is appended to the stored transcript (APPEND
    // grows a string with room to spare) rather than written whole with the interview's first cues.
    let mut published = INTERVIEWS as u64;
    for sequence in 2..2 + MESSAGES {
        let wave: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| {
                let text =
                    format!("{} {i}", "the checkout was confusing but search found it quickly".repeat(1 + i % 3));
                let data = json!({"messageId": format!("m{sequence}"), "role": "participant", "text": text,
                    "startSeconds": sequence, "endSeconds": sequence + 1});
                event(Topic::Interview, &org, id, sequence, "interview.message_recorded", at, data)
            })
            .collect();
        kafka::publish(&producer, &topics, &wave).await;
        published += INTERVIEWS as u64;
        running.wait_until_consumed(published, WAIT).await;
    }
    let completed: Vec<_> = ids
        .iter()
        .map(|id| event(Topic::Interview, &org, id, 2 + MESSAGES, "interview.completed", at, json!({})))
        .collect();
    kafka::publish(&producer, &topics, &completed).await;
    running.wait_until_consumed(published + INTERVIEWS as u64, WAIT).await;

    let keys = Keyspace::new(running.prefix(), 1);
    let mut conn = redis().await;
    let served: u64 = conn.zcard(keys.interviews(&org, "s1")).await.unwrap();
    assert_eq!(served, INTERVIEWS as u64, "every interview is served");
    let (mut length, mut used, mut names) = (0, 0, 0);
    for id in &ids {
        let key = keys.transcript(&org, id);
        let stored: String = conn.get(&key).await.unwrap();
        assert_eq!(stored.matches("-->").count(), MESSAGES as usize, "every message is kept");
        length += stored.len() as u64;
        used += memory_usage(&mut conn, &key).await;
        names += key.len() as u64;
    }
    // Beside its name and its value, a string key costs Redis about 50 bytes (its entry, object and
    // headers), and the allocator rounds a block of these sizes up by at most a quarter.
    let most = (length + names) * 5 / 4 + 64 * INTERVIEWS as u64;
    assert!(used <= most, "{used} bytes used for {length} bytes of transcripts under {names} bytes of names");
    running.stop().await;
}
