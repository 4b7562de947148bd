//! The projector against the real broker and Redis: the read model it builds, and what it does with
//! duplicates, poison messages, unknown types and events of another organization.

use std::time::Duration;

use end_to_end::events::{event, raw};
use end_to_end::kafka::{self, Topics};
use end_to_end::scenario;
use end_to_end::{eventually, read_model, redis, runner, unique};
use redis::AsyncCommands;
use serde_json::json;
use shared::codec::StoredDocument;
use shared::{Keyspace, Topic};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_stream_with_duplicates_and_interleaving_yields_exactly_the_model_state() {
    let (topics, scenario) = scenario::published(0x5eed_0001, 3, 8, 6).await;
    let running = runner::spawn_caught_up(&topics, scenario.messages.len() as u64, WAIT).await;

    let stats = running.snapshot();
    assert!(stats.duplicates > 0, "the stream redelivers events: {stats:?}");
    assert_eq!((stats.refused, stats.dead_lettered, stats.skipped), (0, 0, 0));
    let keys = Keyspace::new(running.prefix(), 1);
    let mut conn = redis().await;
    for org in scenario.organizations() {
        let expected = scenario.expected(&org);
        assert!(!expected.studies.is_empty() && !expected.interviews.is_empty(), "the scenario covers lists");
        let actual = read_model::read(&mut conn, &keys, &scenario, &org).await;
        assert_eq!(actual, expected, "read model of {org}");
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_messages_go_to_the_dead_letter_topic_and_the_partition_goes_on() {
    let at = "2026-05-01T10:00:00Z";
    let messages = vec![
        event(Topic::Study, "org", "s1", 1, "study.created", at, json!({"internalTitle": "Before"})),
        raw(Topic::Study, "s1", "{not json"),
        event(Topic::Study, "org", "s1", 2, "study.completed", at, json!({"completedAt": 17})),
        raw(
            Topic::Study,
            "s1",
            r#"{"eventId":"x","type":"study.launched","organizationId":"org","aggregateId":"s1","sequence":2,"data":{}}"#,
        ),
        event(Topic::Study, "org", "s1", 2, "study.completed", at, json!({"completedAt": "2026-05-01T09:00:00Z"})),
    ];
    let topics = Topics::holding(&messages).await;
    let running = runner::spawn_caught_up(&topics, 5, WAIT).await;

    let keys = Keyspace::new(running.prefix(), 1);
    let studies: Vec<String> = redis().await.zrange(keys.studies("org"), 0, -1).await.unwrap();
    assert_eq!(studies, ["s1"], "the events after the poison messages were applied");
    assert_eq!(running.snapshot().dead_lettered, 3);

    let letters = kafka::read(&format!("{}.dlq", topics.study), 3, WAIT).await;
    assert_eq!(letters.len(), 3);
    for letter in &letters {
        assert_eq!(letter.key.as_deref(), Some(&b"s1"[..]), "the original key is kept");
        assert_eq!(letter.header("dlq-topic"), Some(topics.study.as_str()));
        assert!(letter.header("dlq-offset").is_some());
    }
    let reason_of = |value: &[u8]| {
        let letter = letters.iter().find(|l| l.value.as_deref() == Some(value)).expect("the original value is kept");
        letter.header("dlq-reason").unwrap().to_string()
    };
    assert!(reason_of(b"{not json").starts_with("invalid envelope"));
    assert!(reason_of(&messages[2].value).starts_with("invalid data for study.completed"));
    assert!(reason_of(&messages[3].value).contains("occurredAt"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_of_another_organization_changes_nothing() {
    let at = "2026-05-01T10:00:00Z";
    let completed = json!({"completedAt": "2026-05-01T09:00:00Z"});
    let messages = vec![
        event(Topic::Study, "org_a", "s1", 1, "study.created", at, json!({"internalTitle": "Mine"})),
        event(Topic::Study, "org_a", "s1", 2, "study.completed", at, completed.clone()),
        event(
            Topic::Study,
            "org_b",
            "s1",
            3,
            "study.retitled",
            "2026-06-01T00:00:00Z",
            json!({"internalTitle": "Stolen"}),
        ),
        event(Topic::Study, "org_b", "s1", 4, "study.completed", "2026-06-01T00:00:00Z", completed),
        // A key of org_a, then a deletion claimed by org_b: the key stays live.
        event(
            Topic::ApiKey,
            "org_a",
            "k1",
            1,
            "api_key.created",
            at,
            json!({"name": "crm", "keySha256": "ab".repeat(32)}),
        ),
        event(Topic::ApiKey, "org_b", "k1", 2, "api_key.deleted", at, json!({})),
    ];
    let topics = Topics::holding(&messages).await;
    let running = runner::spawn_caught_up(&topics, 6, WAIT).await;

    assert_eq!(running.snapshot().refused, 3);
    let keys = Keyspace::new(running.prefix(), 1);
    let mut conn = redis().await;
    let StoredDocument(doc) = conn.hget(keys.study_documents("org_a"), "s1").await.unwrap();
    assert!(
        doc.contains(r#""internalTitle":"Mine""#) && doc.contains(r#""updatedAt":"2026-05-01T10:00:00Z""#),
        "{doc}"
    );
    let seq: u64 = conn.hget(keys.aggregate(Topic::Study, "org_a", "s1"), "seq").await.unwrap();
    assert_eq!(seq, 2);
    let other: Vec<String> = conn.zrange(keys.studies("org_b"), 0, -1).await.unwrap();
    assert!(other.is_empty());
    let exists: bool = conn.exists(keys.aggregate(Topic::Study, "org_b", "s1")).await.unwrap();
    assert!(!exists);
    let owner: Option<String> = conn.hget(keys.api_key_sha(&"ab".repeat(32)), "org").await.unwrap();
    assert_eq!(owner.as_deref(), Some("org_a"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_event_type_is_skipped_and_counted_and_later_events_still_apply() {
    let at = "2026-05-01T10:00:00Z";
    let messages = vec![
        event(Topic::Interview, "org", "i1", 1, "interview.started", at, json!({"studyId": "s1"})),
        event(Topic::Interview, "org", "i1", 2, "interview.sentiment_scored", at, json!({"score": 0.9})),
        event(Topic::Interview, "org", "i1", 3, "interview.completed", "2026-05-01T11:00:00Z", json!({})),
    ];
    let topics = Topics::holding(&messages).await;
    let running = runner::spawn_caught_up(&topics, 3, WAIT).await;

    let stats = running.snapshot();
    assert_eq!((stats.skipped, stats.applied, stats.gaps, stats.dead_lettered), (1, 2, 1, 0));
    let keys = Keyspace::new(running.prefix(), 1);
    let listed: Vec<String> = redis().await.zrange(keys.interviews("org", "s1"), 0, -1).await.unwrap();
    assert_eq!(listed, ["i1"]);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_nothing_but_poison_messages_does_not_block_the_partition() {
    let topics = Topics::holding(&[raw(Topic::Study, "s1", "{"), raw(Topic::Study, "s1", "[]")]).await;
    let running = runner::spawn(runner::config(&topics, &unique("rm"), &unique("g"))).await;
    eventually(WAIT, "the poison messages set aside", || async {
        (running.snapshot().dead_lettered == 2).then_some(())
    })
    .await;
    let created =
        event(Topic::Study, "org", "s1", 1, "study.created", "2026-05-01T10:00:00Z", json!({"internalTitle": "T"}));
    kafka::publish(&kafka::producer(), &topics, &[created]).await;
    eventually(WAIT, "the next event applied", || async { (running.snapshot().applied == 1).then_some(()) }).await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_with_an_empty_organization_is_set_aside_and_the_partition_goes_on() {
    // On a Redis Cluster the keys of an empty organization land in different slots, so no write of it
    // could ever succeed; it must not be retried for ever.
    let at = "2026-05-01T10:00:00Z";
    let messages = [
        event(Topic::Study, "", "s1", 1, "study.created", at, json!({"internalTitle": "T"})),
        event(Topic::Study, "org", "s2", 1, "study.created", at, json!({"internalTitle": "T"})),
    ];
    let topics = Topics::holding(&messages).await;
    let running = runner::spawn_caught_up(&topics, 2, WAIT).await;
    let snapshot = running.snapshot();
    assert_eq!((snapshot.dead_lettered, snapshot.applied), (1, 1), "{snapshot:?}");
    let letters = kafka::read(&format!("{}.dlq", topics.study), 1, WAIT).await;
    assert!(letters[0].header("dlq-reason").unwrap().contains("organizationId is empty"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_larger_than_a_megabyte_is_set_aside_and_the_partition_goes_on() {
    // librdkafka's producers default to at most 1,000,000 bytes a message: a dead-letter producer left at
    // that would retry such a poison message for ever.
    let huge = format!("{{\"type\": \"study.created\", \"padding\": \"{}\"", "x".repeat(1_500_000));
    let at = "2026-05-01T10:00:00Z";
    let messages = [
        raw(Topic::Study, "s1", &huge),
        event(Topic::Study, "org", "s1", 1, "study.created", at, json!({"internalTitle": "T"})),
    ];
    let topics = Topics::holding(&messages).await;
    let running = runner::spawn_caught_up(&topics, 2, WAIT).await;
    let snapshot = running.snapshot();
    assert_eq!((snapshot.dead_lettered, snapshot.applied), (1, 1), "{snapshot:?}");
    let letter = &kafka::read(&format!("{}.dlq", topics.study), 1, WAIT).await[0];
    assert_eq!(letter.key.as_deref(), Some(&b"s1"[..]));
    assert!(letter.header("dlq-reason").unwrap().starts_with("invalid envelope"));
    match letter.header("dlq-value-dropped") {
        // The broker took it whole, or refused it and the letter went without its value.
        None => assert_eq!(letter.value.as_ref().map(Vec::len), Some(huge.len())),
        Some(dropped) => assert_eq!((dropped, letter.value.as_ref()), (format!("{} bytes", huge.len()).as_str(), None)),
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_whose_reason_quotes_megabytes_is_set_aside_with_a_short_reason() {
    // The decoder's reason quotes the offending value; quoted in full, 1.5 MB of it in a header makes a
    // letter that no dead-letter topic takes, and the partition would stall for ever.
    let at = "2026-05-01T10:00:00Z";
    let mut poison = end_to_end::events::envelope(
        &end_to_end::events::Envelope {
            event_id: "e-1",
            kind: "study.created",
            org: "org",
            aggregate: "s1",
            sequence: 1,
            at,
        },
        json!({"internalTitle": "T"}),
    );
    poison["sequence"] = json!("9".repeat(1_500_000));
    let messages = [
        raw(Topic::Study, "s1", &poison.to_string()),
        event(Topic::Study, "org", "s2", 1, "study.created", at, json!({"internalTitle": "T"})),
    ];
    let topics = Topics::with_partitions(1).await;
    kafka::publish(&kafka::producer(), &topics, &messages).await;
    let running = runner::spawn_caught_up(&topics, 2, WAIT).await;
    let snapshot = running.snapshot();
    assert_eq!((snapshot.dead_lettered, snapshot.applied), (1, 1), "{snapshot:?}");
    let letter = &kafka::read(&format!("{}.dlq", topics.study), 1, WAIT).await[0];
    let reason = letter.header("dlq-reason").unwrap();
    assert!(reason.len() <= 1024, "the reason is capped: {} bytes", reason.len());
    assert!(reason.contains("sequence") || reason.contains("invalid"), "the reason still says why: {reason}");
    running.stop().await;
}

/// A release or a Redis that refuses every event of a partition for good (here: a key every write of the
/// organization touches holds another type, so the write script refuses each one) would set the whole
/// partition aside as poison, and the read model would fall silently behind. The dead-letter limit halts
/// the partition instead: nothing is set aside, readiness and a gauge say so, and once the cause is fixed
/// the partition goes on from where it stopped, every event applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_every_event_redis_refuses_halts_sets_nothing_aside_and_goes_on_once_fixed() {
    let org = unique("refused");
    let at = "2026-05-01T10:00:00Z";
    let messages: Vec<_> = (0..40)
        .flat_map(|i| {
            let id = format!("{org}-s{i:02}");
            [
                event(Topic::Study, &org, &id, 1, "study.created", at, json!({"internalTitle": "T"})),
                event(Topic::Study, &org, &id, 2, "study.launched", at, json!({})),
                event(Topic::Study, &org, &id, 3, "study.completed", at, json!({"completedAt": at})),
            ]
        })
        .collect();
    let topics = Topics::with_partitions(1).await;
    let prefix = unique("halt");
    let keys = Keyspace::new(prefix.clone(), 1);
    let _: () = redis().await.hset(keys.org_epoch(&org), "not", "a string").await.unwrap();
    kafka::publish(&kafka::producer(), &topics, &messages).await;
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    config.dead_letter_limit_retry_secs = 1;
    config.http_addr = "127.0.0.1:0".parse().unwrap();
    let running = runner::spawn(config).await;

    let halted = || end_to_end::metrics::sample(&running.metrics_text(), "projector_partitions_halted", &[]);
    eventually(WAIT, "the partition halted by the dead-letter limit", || async { (halted() == 1.0).then_some(()) })
        .await;
    let ready = reqwest::get(format!("http://{}/readyz", running.http.expect("an HTTP server"))).await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "halted by the dead-letter limit", "{body}");
    let line = body["partitions"][0].as_str().unwrap();
    assert!(line.contains("/0 at 0: redis refused the write: ") && line.contains("WRONGTYPE"), "{body}");
    assert_eq!(running.snapshot().dead_lettered, 0, "nothing set aside: {:?}", running.snapshot());

    let _: () = redis().await.del(keys.org_epoch(&org)).await.unwrap();
    running.wait_until_consumed(messages.len() as u64, WAIT).await;
    eventually(WAIT, "the partition to go on", || async { (halted() == 0.0).then_some(()) }).await;
    let snapshot = running.snapshot();
    assert_eq!((snapshot.dead_lettered, snapshot.applied), (0, 120), "{snapshot:?}");
    let completed: u64 = redis().await.zcard(keys.studies(&org)).await.unwrap();
    assert_eq!(completed, 40, "every study applied once the write went through");
    running.stop().await;
}
