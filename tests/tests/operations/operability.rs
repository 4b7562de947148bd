//! What an operator relies on: metrics with the values the test provoked, readiness that turns on a
//! stalled projection, `status`, and dead letters listed and replayed through the same rules.

use std::time::Duration;

use end_to_end::events::{event, raw};
use end_to_end::kafka::{self, Topics};
use end_to_end::metrics::sample;
use end_to_end::own_redis::OwnRedis;
use end_to_end::{eventually, runner, unique};
use serde_json::{json, Value};
use shared::Topic;

/// How long a test waits for the projector, and for one of its commands to finish.
const WAIT: Duration = Duration::from_secs(60);

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("request");
    (response.status().as_u16(), response.text().await.unwrap())
}

fn study(id: &str, seq: u64, kind: &str, data: Value) -> end_to_end::events::Outgoing {
    event(Topic::Study, "org", id, seq, kind, "2026-05-01T10:00:00Z", data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_what_happened_and_readiness_turns_off_when_the_projection_stalls() {
    let mut redis = OwnRedis::start();
    let messages = vec![
        study("s1", 1, "study.created", json!({"internalTitle": "A"})),
        raw(Topic::Study, "s1", "{broken"),
        study("s1", 2, "study.archived", json!({})),
        study("s1", 3, "study.completed", json!({"completedAt": "2026-05-01T09:00:00Z"})),
        study("s1", 3, "study.completed", json!({"completedAt": "2026-05-01T09:00:00Z"})),
        raw(Topic::Study, "s1", r#"{"type":"study.retitled","data":{}}"#),
    ];
    let topics = Topics::holding(&messages).await;
    let mut config = runner::config(&topics, &unique("rm"), &unique("g"));
    config.redis.url = redis.url().into();
    config.redis.cluster = false;
    config.http_addr = "127.0.0.1:0".parse().unwrap();
    config.stall_after_secs = 1;
    let running = runner::spawn(config).await;
    let base = format!("http://{}", running.http.expect("an HTTP server"));
    running.wait_until_consumed(6, WAIT).await;

    let (status, metrics) = get(&format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    let topic = format!("topic=\"{}\"", topics.study);
    let events = "projector_events_total";
    assert_eq!(sample(&metrics, events, &[&topic, "type=\"study.created\"", "outcome=\"applied\""]), 1.0);
    assert_eq!(sample(&metrics, events, &[&topic, "type=\"study.completed\"", "outcome=\"gap\""]), 1.0, "{metrics}");
    assert_eq!(sample(&metrics, events, &[&topic, "type=\"study.completed\"", "outcome=\"duplicate\""]), 1.0);
    // An unknown type is labelled `other`: what a producer sends cannot grow the label set.
    assert_eq!(sample(&metrics, events, &[&topic, "type=\"other\"", "outcome=\"skipped\""]), 1.0);
    assert!(!metrics.contains("study.archived"), "{metrics}");
    assert_eq!(sample(&metrics, events, &[&topic, "outcome=\"dead_lettered\""]), 2.0);
    assert_eq!(sample(&metrics, events, &[&topic, "type=\"study.retitled\"", "outcome=\"dead_lettered\""]), 1.0);
    assert!(sample(&metrics, "projector_apply_seconds_count", &[]) >= 1.0);
    assert!(sample(&metrics, "projector_batch_size_messages_sum", &[]) >= 6.0);
    // Its version, to graph a rollout by, and its process, without another exporter.
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert_eq!(sample(&metrics, "projector_build_info", &[&version, "commit=\""]), 1.0, "{metrics}");
    assert!(sample(&metrics, "process_resident_memory_bytes", &[]) > 1e6, "{metrics}");
    assert!(sample(&metrics, "process_open_fds", &[]) >= 3.0, "{metrics}");
    assert_eq!(sample(&metrics, "projector_generation", &[]), 1.0);
    assert!(sample(&metrics, "projector_heartbeat_timestamp_seconds", &[]) > 1.7e9);
    let (status, ready) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{ready}");

    // Redis goes away while events keep coming: lag grows, no progress, so not ready.
    redis.stop();
    let more: Vec<_> =
        (0..5).map(|n| study(&format!("s{}", n + 2), 1, "study.created", json!({"internalTitle": "B"}))).collect();
    kafka::publish(&kafka::producer(), &topics, &more).await;
    let stalled = eventually(Duration::from_secs(30), "readiness to report the stall", || async {
        let (status, body) = get(&format!("{base}/readyz")).await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(stalled.contains("\"stuck\""), "{stalled}");
    // The batch that arrived meanwhile is taken and waits for Redis in hand (the stall can be reported
    // before it is taken: the lag comes from the broker's statistics).
    eventually(Duration::from_secs(30), "the batch to wait in hand", || async {
        let (_, metrics) = get(&format!("{base}/metrics")).await;
        (sample(&metrics, "projector_in_hand_messages", &[]) > 0.0).then_some(())
    })
    .await;
    eventually(Duration::from_secs(30), "the failed attempts to be counted", || async {
        let (_, metrics) = get(&format!("{base}/metrics")).await;
        (sample(&metrics, "projector_retries_total", &[]) > 0.0).then_some(())
    })
    .await;
    assert_eq!(get(&format!("{base}/livez")).await.0, 200, "alive, though not ready");
    assert_eq!(get(&format!("{base}/healthz")).await.0, 200, "also under its older name");

    redis.restart();
    eventually(Duration::from_secs(60), "recovery", || async {
        let (status, _) = get(&format!("{base}/readyz")).await;
        let (_, metrics) = get(&format!("{base}/metrics")).await;
        (status == 200 && running.consumed() >= 11 && sample(&metrics, "projector_lag_messages", &[]) == 0.0)
            .then_some(())
    })
    .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_and_dead_letters_are_replayed_through_the_same_rules() {
    let messages = vec![
        study("s1", 1, "study.created", json!({"internalTitle": "A"})),
        raw(Topic::Study, "s1", "{broken"),
        raw(Topic::Study, "s2", r#"{"type":"study.created"}"#),
    ];
    let topics = Topics::holding(&messages).await;
    let running = runner::spawn_caught_up(&topics, 3, WAIT).await;
    let (prefix, group) = (running.prefix(), running.group());
    let run = |args: &'static [&'static str]| runner::succeed(&topics, prefix, group, args, WAIT);

    let dlq = format!("{}.dlq: 2", topics.study);
    let status_of = |extra: &'static [&'static str]| runner::status_of(&topics, prefix, group, extra, WAIT);
    let status = eventually(Duration::from_secs(30), "status with the committed offsets", || async {
        let (code, status) = status_of(&[]).await;
        (status.contains(&dlq) && !status.contains("lag 1") && !status.contains("lag 2")).then_some((code, status))
    })
    .await;
    let (code, status) = status;
    assert_eq!(code, 2, "dead letters wait: {status}");
    assert!(status.ends_with("condition: dead letters or late aggregates wait for an operator (exit 2)\n"), "{status}");
    let layout = shared::layout::LAYOUT.to_string();
    assert!(status.contains(&format!("active generation: 1\nlayout: {layout}\n")), "{status}");
    assert!(status.contains("live projectors: 1"), "{status}");
    assert!(status.contains(&format!("lag of group {group}")), "{status}");

    let list = run(&["dlq", "list"]).await;
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "{list}");
    assert!(lines.iter().all(|l| l.contains("reason=invalid envelope")), "{list}");

    // The same, for automation.
    let json: serde_json::Value = serde_json::from_str(&status_of(&["-o", "json"]).await.1).expect("status is JSON");
    assert_eq!(json["condition"], "needsAttention", "{json}");
    assert_eq!(json["activeGeneration"], 1, "{json}");
    assert_eq!((&json["activeLayout"], &json["layoutRead"]), (&json!(layout), &json!(true)), "{json}");
    assert_eq!(json["liveProjectors"].as_object().map(|o| o.len()), Some(1), "{json}");
    assert_eq!(json["group"], group, "{json}");
    assert_eq!(json["deadLetters"][format!("{}.dlq", topics.study)], 2, "{json}");
    let partitions = json["partitions"].as_array().expect("partitions");
    assert!(partitions.iter().any(|p| p["topic"] == topics.study.as_str() && p["end"].as_i64() > Some(0)), "{json}");
    assert!(partitions.iter().all(|p| p["lag"] == 0), "{json}");

    // A healing entry (of a partition no projector here reads) outranks the dead letters; a live projector
    // of another group, behind and silent for an hour, outranks both; each gone, the code is back.
    let mut conn = end_to_end::redis().await;
    let healing = shared::Keyspace::new(prefix.to_string(), 1).healing();
    let mark = redis::cmd("HSET").arg(&healing).arg("elsewhere/0").arg("5 a-test-loss").to_owned();
    let _: () = mark.query_async(&mut conn).await.unwrap();
    assert_eq!(status_of(&[]).await.0, 3, "healing");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let stuck = json!({"group": unique("another"), "generation": 1, "paused": false, "heartbeat": now,
        "last_progress": now - 3600.0, "partitions": 3, "latest_event": 0.0, "caught_up": false});
    let projectors = shared::Keyspace::projectors(prefix);
    let report = redis::cmd("HSET").arg(&projectors).arg("stuck-instance").arg(stuck.to_string()).to_owned();
    let _: () = report.query_async(&mut conn).await.unwrap();
    let (code, text) = status_of(&[]).await;
    assert_eq!(code, 4, "stalled: {text}");
    let _: () = redis::cmd("HDEL").arg(&projectors).arg("stuck-instance").query_async(&mut conn).await.unwrap();
    let _: () = redis::cmd("HDEL").arg(&healing).arg("elsewhere/0").query_async(&mut conn).await.unwrap();
    assert_eq!(status_of(&[]).await.0, 2, "the dead letters wait still");
    let letters: serde_json::Value = serde_json::from_str(&run(&["dlq", "list", "-o", "json"]).await).expect("JSON");
    let letters = letters.as_array().expect("a list of dead letters");
    let mut keys: Vec<&str> = letters.iter().filter_map(|l| l["key"].as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["s1", "s2"], "{letters:?}");
    assert!(letters.iter().all(|l| l["originalTopic"] == topics.study.as_str()), "{letters:?}");
    assert!(
        letters.iter().all(|l| l["reason"].as_str().is_some_and(|r| r.contains("invalid envelope"))),
        "{letters:?}"
    );

    // A dry run lists what a replay would publish, and publishes and commits nothing: the replay that
    // follows still finds both letters.
    let dry = run(&["dlq", "replay", "--dry-run"]).await;
    let lines: Vec<&str> = dry.lines().collect();
    assert_eq!(lines.first(), Some(&"would replay 2 dead letters (nothing published):"), "{dry}");
    assert_eq!(lines.len(), 3, "{dry}");
    assert!(lines[1..].iter().all(|l| l.contains("reason=invalid envelope") && !l.contains("corrected")), "{dry}");
    let dry: Value = serde_json::from_str(&run(&["dlq", "replay", "--dry-run", "-o", "json"]).await).expect("JSON");
    let dry = dry.as_array().expect("a list of dead letters");
    assert!(dry.len() == 2 && dry.iter().all(|l| l["corrected"] == false), "{dry:?}");

    let replayed = run(&["dlq", "replay"]).await;
    assert_eq!(
        replayed.trim(),
        "replayed 2 dead letters: 0 applied in order, 0 repaired, 2 still poison, 0 skipped, 0 refused"
    );
    running.wait_until_consumed(5, WAIT).await;
    assert_eq!(running.snapshot().dead_lettered, 4, "still bad, so back in the dead-letter topic");
    let again = run(&["dlq", "replay"]).await;
    assert!(again.starts_with("replayed 2 dead letters:"), "only the new dead letters: {again}");
    running.stop().await;
}
