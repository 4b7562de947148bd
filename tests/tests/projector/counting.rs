//! One counting path: what became of every message of a mixed batch, as the metrics report it and as
//! the projector's own totals read it, agrees with what the batch held.

use std::time::Duration;

use end_to_end::events::{event, raw};
use end_to_end::kafka::Topics;
use end_to_end::metrics::sample;
use end_to_end::runner::{self, Outcome};
use end_to_end::unique;
use serde_json::json;
use shared::Topic;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_and_the_totals_agree_on_every_outcome_of_a_mixed_batch() {
    let at = "2026-05-01T10:00:00Z";
    let study = |org: &str, seq: u64, kind: &str, data| event(Topic::Study, org, "s1", seq, kind, at, data);
    let title = json!({"internalTitle": "T"});
    let messages = vec![
        study("org_a", 1, "study.created", title.clone()),
        study("org_a", 2, "study.retitled", title.clone()),
        study("org_a", 4, "study.launched", json!({})),
        study("org_a", 2, "study.retitled", title.clone()),
        study("org_b", 5, "study.launched", json!({})),
        study("org_a", 6, "study.archived", json!({})),
        raw(Topic::Study, "s1", "{not json"),
    ];
    let topics = Topics::holding(&messages).await;
    let mut config = runner::config(&topics, &unique("rm"), &unique("g"));
    config.http_addr = "127.0.0.1:0".parse().unwrap();
    let running = runner::spawn(config).await;
    running.wait_until_consumed(messages.len() as u64, Duration::from_secs(60)).await;

    let metrics =
        reqwest::get(format!("http://{}/metrics", running.http.unwrap())).await.unwrap().text().await.unwrap();
    let counts = running.counts();
    let expected = [
        (Outcome::Applied, 2),
        (Outcome::Gap, 1),
        (Outcome::Duplicate, 1),
        (Outcome::Refused, 1),
        (Outcome::Skipped, 1),
        (Outcome::DeadLettered, 1),
    ];
    for (outcome, n) in expected {
        let label = format!("outcome=\"{}\"", outcome.label());
        assert_eq!(sample(&metrics, "projector_events_total", &[&label]), n as f64, "{outcome:?} in {metrics}");
        assert_eq!(counts.of(outcome), n, "{outcome:?} in {counts:?}");
    }
    assert_eq!(counts.consumed(), messages.len() as u64);
    running.stop().await;
}
