//! What the read model costs Redis: a served interview holds its data without room left to grow, its
//! state holds only what its document does not (layout 2), and owners are fields of shared hashes
//! (layout 3).

use std::time::Duration;

use end_to_end::events::event;
use end_to_end::kafka::{self, Topics};
use end_to_end::{fixture, read_model, redis, runner, unique};
use redis::AsyncCommands;
use serde_json::json;
use shared::codec::StoredDocument;
use shared::owners::Record;
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
        let stored = read_model::transcript(&mut conn, &key).await.unwrap();
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

/// An interview identified, given facets and a video, and completed; then hidden.
fn served_then_hidden(org: &str, id: &str) -> (Vec<end_to_end::events::Outgoing>, end_to_end::events::Outgoing) {
    let served = fixture::interview(org, id, "s1", "2026-04-01T10:00:00.123456789Z")
        .then(
            "interview.participant_identified",
            "2026-04-01T10:01:00Z",
            json!({"participantId": "p1", "firstName": "Zoë", "lastName": "Ångström"}),
        )
        .then(
            "interview.facets_updated",
            "2026-04-01T10:02:00Z",
            json!({"facets": [{"label": "Topics", "values": ["search", "\"quoted\""]}]}),
        )
        .then("interview.video_stored", "2026-04-01T10:03:00Z", json!({"bucket": "b", "key": "v/1.mp4"}))
        .then("interview.completed", "2026-04-01T10:04:00Z", json!({}));
    let hidden = event(Topic::Interview, org, id, 6, "interview.hidden", "2026-04-01T10:05:00Z", json!({}));
    (served.messages, hidden)
}

/// The stored `seq` and `state` of an interview, and its hash's encoding.
async fn stored_state(
    conn: &mut shared::connection::Connection,
    keys: &Keyspace,
    org: &str,
    id: &str,
) -> (u64, String, String) {
    let key = keys.aggregate(Topic::Interview, org, id);
    let (seq, state): (u64, String) =
        redis::cmd("HMGET").arg(&key).arg("seq").arg("state").query_async(conn).await.unwrap();
    let encoding = redis::Script::new("return redis.call('OBJECT', 'ENCODING', KEYS[1])");
    (seq, state, encoding.key(&key).invoke_async(conn).await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_interview_keeps_only_what_its_document_does_not_hold_and_its_next_event_reads_the_rest() {
    let org = unique("org");
    let (served, hidden) = served_then_hidden(&org, "iv-1");
    let topics = Topics::holding(&served[..1]).await;
    let running = runner::spawn_caught_up(&topics, 1, WAIT).await;
    let keys = Keyspace::new(running.prefix(), 1);
    let mut conn = redis().await;
    let (_, started, encoding) = stored_state(&mut conn, &keys, &org, "iv-1").await;
    assert!(started.contains(r#""completed":false"#) && encoding == "hashtable", "{started}: {encoding}");
    kafka::publish(&kafka::producer(), &topics, &served[1..]).await;
    running.wait_until_consumed(served.len() as u64, WAIT).await;
    let (seq, state, encoding) = stored_state(&mut conn, &keys, &org, "iv-1").await;
    assert_eq!((seq, state.as_str()), (5, r#"{"served":true}"#), "the rest is the document's");
    assert_eq!(encoding, "listpack", "a hash this small is kept compact, though it held a long state before");
    let document: Option<StoredDocument> = conn.hget(keys.interview_documents(&org), "iv-1").await.unwrap();
    assert!(document.unwrap().0.contains("Zoë"), "the document holds the participant");

    // Hidden, the interview is no longer served: its state is whole again, every field read back from the
    // document it had.
    kafka::publish(&kafka::producer(), &topics, std::slice::from_ref(&hidden)).await;
    running.wait_until_consumed(served.len() as u64 + 1, WAIT).await;
    let (seq, state, _) = stored_state(&mut conn, &keys, &org, "iv-1").await;
    assert_eq!(seq, 6);
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!(state["created_at"], "2026-04-01T10:00:00.123456789Z", "to the nanosecond");
    assert_eq!(state["participant"], json!({"id": "p1", "name": "Zoë Å."}));
    assert_eq!(state["facets"], json!([{"label": "Topics", "values": ["search", "\"quoted\""]}]));
    assert_eq!(state["video"], json!({"bucket": "b", "key": "v/1.mp4"}));
    assert_eq!((&state["completed"], &state["hidden"], &state["study_id"]), (&json!(true), &json!(true), &json!("s1")));
    let document: Option<StoredDocument> = conn.hget(keys.interview_documents(&org), "iv-1").await.unwrap();
    assert_eq!(document, None, "a hidden interview is not served");
    running.stop().await;
}

/// The owner recorded for an interview, as a key of its own and as a field of a shared hash.
async fn owner_records(conn: &mut shared::connection::Connection, keys: &Keyspace, id: &str) -> [Option<String>; 2] {
    let key: Option<String> = conn.get(keys.owner(Topic::Interview, id)).await.unwrap();
    let Record::Field { hash, id } = Record::of(keys, Topic::Interview, id, 3) else { unreachable!("layout 3") };
    let field: Option<String> = conn.hget(&hash, &id).await.unwrap();
    [key, field]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_of_layout_one_gets_whole_states_and_owner_keys_from_this_release_and_digests_alike() {
    let org = unique("org");
    let (served, _) = served_then_hidden(&org, "iv-1");
    let started = vec![served[0].clone()];
    let topics = Topics::holding(&started).await;
    let first = runner::spawn_caught_up(&topics, 1, WAIT).await;
    let (prefix, group) = (first.prefix().to_string(), first.group().to_string());
    first.stop().await;
    // As the last release wrote it: layout 1, the owner a key of its own.
    let keys = Keyspace::new(prefix.clone(), 1);
    let mut conn = redis().await;
    let _: () = conn.hset(keys.meta(), shared::layout::FIELD, "1").await.unwrap();
    let [_, owner] = owner_records(&mut conn, &keys, "iv-1").await;
    let Record::Field { hash, id } = Record::of(&keys, Topic::Interview, "iv-1", 3) else { unreachable!() };
    let _: () = conn.hdel(&hash, &id).await.unwrap();
    let _: () = conn.set(keys.owner(Topic::Interview, "iv-1"), owner.expect("recorded")).await.unwrap();
    let running = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    kafka::publish(&kafka::producer(), &topics, &served[1..]).await;
    running.wait_until_consumed(served.len() as u64 - 1, WAIT).await;
    let served_events = served.len() as u64;
    let (seq, state, _) = stored_state(&mut conn, &keys, &org, "iv-1").await;
    assert_eq!(seq, 5);
    assert!(state.contains(r#""participant":{"id":"p1""#), "a release that reads layout 1 only reads it: {state}");
    let served: u64 = conn.zcard(keys.interviews(&org, "s1")).await.unwrap();
    assert_eq!(served, 1);
    assert_eq!(owner_records(&mut conn, &keys, "iv-1").await, [Some(org.clone()), None], "an owner key, as before");
    running.stop().await;
    // The same events built in this layout store the state without what the document holds and the owner
    // as a field, and digest alike.
    let scratch = runner::build_from_scratch(&topics, served_events).await;
    let (_, compact, _) = stored_state(&mut conn, &scratch, &org, "iv-1").await;
    assert_eq!(compact, r#"{"served":true}"#);
    assert_eq!(owner_records(&mut conn, &scratch, "iv-1").await, [None, Some(org.clone())], "a field");
    assert_eq!(runner::digest(&keys).await, runner::digest(&scratch).await, "states and owners digested whole");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_are_fields_of_shared_hashes_that_redis_keeps_compact_and_still_refuse_another_organization() {
    let (org, other) = (unique("org"), unique("other"));
    let ids: Vec<String> = (0..64).map(|i| format!("iv-{i:02}")).collect();
    let at = "2026-04-01T10:00:00Z";
    let started: Vec<_> = ids
        .iter()
        .map(|id| event(Topic::Interview, &org, id, 1, "interview.started", at, json!({"studyId": "s1"})))
        .collect();
    let topics = Topics::holding(&started).await;
    let running = runner::spawn_caught_up(&topics, ids.len() as u64, WAIT).await;
    let keys = Keyspace::new(running.prefix(), 1);
    let mut conn = redis().await;
    let encoding = redis::Script::new("return redis.call('OBJECT', 'ENCODING', KEYS[1])");
    for id in &ids {
        assert_eq!(owner_records(&mut conn, &keys, id).await, [None, Some(org.clone())], "{id}");
        let Record::Field { hash, .. } = Record::of(&keys, Topic::Interview, id, 3) else { unreachable!() };
        let kept: String = encoding.key(&hash).invoke_async(&mut conn).await.unwrap();
        assert_eq!(kept, "listpack", "{hash}");
    }
    // An event of another organization for one of them is refused by the field, as it was by the key.
    let intruder = event(Topic::Interview, &other, &ids[0], 2, "interview.completed", at, json!({}));
    kafka::publish(&kafka::producer(), &topics, &[intruder]).await;
    running.wait_until_consumed(ids.len() as u64 + 1, WAIT).await;
    assert_eq!(running.snapshot().refused, 1);
    assert_eq!(owner_records(&mut conn, &keys, &ids[0]).await, [None, Some(org.clone())]);
    let (seq, _, _) = stored_state(&mut conn, &keys, &org, &ids[0]).await;
    assert_eq!(seq, 1, "the interview is as it was");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_that_finds_the_generations_layout_gone_still_reads_a_served_state_from_its_document() {
    let org = unique("org");
    let (served, hidden) = served_then_hidden(&org, "iv-1");
    let topics = Topics::holding(&served).await;
    let first = runner::spawn_caught_up(&topics, served.len() as u64, WAIT).await;
    let (prefix, group) = (first.prefix().to_string(), first.group().to_string());
    first.stop().await;
    let keys = Keyspace::new(prefix.clone(), 1);
    let mut conn = redis().await;
    assert_eq!(stored_state(&mut conn, &keys, &org, "iv-1").await.1, r#"{"served":true}"#);
    // Redis lost the meta (it reads as layout 1 now), not the interview's keys.
    let _: () = conn.hdel(keys.meta(), shared::layout::FIELD).await.unwrap();
    let running = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    kafka::publish(&kafka::producer(), &topics, std::slice::from_ref(&hidden)).await;
    running.wait_until_consumed(1, WAIT).await;
    let stats = running.snapshot();
    assert_eq!((stats.dead_lettered, stats.refused), (0, 0), "{stats:?}");
    let (seq, state, _) = stored_state(&mut conn, &keys, &org, "iv-1").await;
    assert_eq!(seq, 6, "the event was applied");
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert_eq!((&state["hidden"], &state["participant"]["id"]), (&json!(true), &json!("p1")), "{state}");
    running.stop().await;
}
