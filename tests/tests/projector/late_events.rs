//! An event that arrives after a gap its sequence lies in: not applied (the contract's rule 1), but
//! counted as late, remembered in the generation's late hash, and listed by `projector status` with the
//! repair that redoes its aggregate.

use std::time::Duration;

use end_to_end::events::event;
use end_to_end::kafka::{self, Topics};
use end_to_end::metrics::sample;
use end_to_end::runner::{self, Outcome};
use end_to_end::{redis, unique};
use serde_json::json;
use shared::{Keyspace, Topic};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_late_for_a_gap_is_counted_remembered_and_listed_with_its_repair() {
    let (org, id) = (unique("org"), unique("i"));
    let at = "2026-05-01T10:00:00Z";
    let interview = |seq: u64, kind: &str, data| event(Topic::Interview, &org, &id, seq, kind, at, data);
    let topics = Topics::create().await;
    let producer = kafka::producer();
    let first = [
        interview(1, "interview.started", json!({"studyId": "s1"})),
        interview(2, "interview.facets_updated", json!({"facets": []})),
        interview(4, "interview.completed", json!({})),
    ];
    kafka::publish(&producer, &topics, &first).await;
    let mut config = runner::config(&topics, &unique("rm"), &unique("g"));
    config.http_addr = "127.0.0.1:0".parse().unwrap();
    let running = runner::spawn(config).await;
    running.wait_until_consumed(3, WAIT).await;
    assert_eq!((running.snapshot().gaps, running.counts().of(Outcome::Late)), (1, 0));

    // 3, which the gap skipped, arrives late; 2 again is a plain duplicate.
    let late =
        [interview(3, "interview.hidden", json!({})), interview(2, "interview.facets_updated", json!({"facets": []}))];
    kafka::publish(&producer, &topics, &late).await;
    running.wait_until_consumed(5, WAIT).await;

    let counts = running.counts();
    assert_eq!((counts.of(Outcome::Late), counts.of(Outcome::Duplicate)), (1, 1), "{counts:?}");
    let metrics =
        reqwest::get(format!("http://{}/metrics", running.http.unwrap())).await.unwrap().text().await.unwrap();
    let labels = [&format!("topic=\"{}\"", topics.interview)[..], "type=\"interview.hidden\"", "outcome=\"late\""];
    assert_eq!(sample(&metrics, "projector_events_total", &labels), 1.0, "{metrics}");

    // Not applied: the interview stays completed and visible at sequence 4, its gap still remembered.
    let keys = Keyspace::new(running.prefix(), 1);
    let mut conn = redis().await;
    let (seq, state): (u64, String) = ::redis::cmd("HMGET")
        .arg(keys.aggregate(Topic::Interview, &org, &id))
        .arg("seq")
        .arg("state")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(seq, 4);
    // Served, its state holds only what its document does not: the gap.
    assert_eq!(state, r#"{"served":true,"gaps":[[3,3]]}"#);
    let recorded: Option<String> = ::redis::cmd("HGET")
        .arg(keys.late())
        .arg(Keyspace::late_field(Topic::Interview, &id))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(recorded.as_deref(), Some(org.as_str()), "the late hash names the aggregate's organization");

    let (prefix, group) = (running.prefix(), running.group());
    let repair = format!("projector repair --aggregate {}:{id}", topics.interview);
    let (code, status) = runner::status_of(&topics, prefix, group, &["-o", "json"], WAIT).await;
    assert_eq!(code, 2, "an aggregate waits for its repair: {status}");
    let status: serde_json::Value = serde_json::from_str(&status).expect("status is JSON");
    assert_eq!(
        status["lateForAGap"],
        json!([{"topic": topics.interview, "aggregateId": id, "organizationId": org, "repair": repair}]),
        "{status}"
    );
    let (_, text) = runner::status_of(&topics, prefix, group, &[], WAIT).await;
    assert!(text.contains("late for a gap: 1 aggregates"), "{text}");
    assert!(text.contains(&format!("  interview:{id} (organization {org}): {repair}")), "{text}");
    running.stop().await;
}
