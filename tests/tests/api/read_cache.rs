//! Reads kept in memory (`READ_CACHE_MB`, on by default): a page that has not changed is answered without Redis, a change
//! is served within a second, and a generation switch is followed within a second.

use std::time::Duration;

use end_to_end::api::{unsigned, TestApp, World};
use end_to_end::fixture::{self, completed, completed_study, interview, ACME, ACME_KEY};
use end_to_end::{eventually_showing, metrics};
use serde_json::Value;

/// How long after the projector applied a change every API instance serves it, reads kept or not.
const CHANGE: Duration = Duration::from_secs(1);

const PATHS: [&str; 6] = [
    "/v1/studies",
    "/v1/studies?page=2&pageSize=1",
    "/v1/studies/s_b",
    "/v1/studies/s_b/interviews",
    "/v1/interviews/i1",
    "/v1/interviews/i_new",
];

async fn answers(app: &TestApp) -> Vec<(u16, Value)> {
    let mut all = Vec::new();
    for path in PATHS {
        let (status, body) = app.json(path, ACME_KEY).await;
        all.push((status, unsigned(body)));
    }
    all
}

/// A round's answers if every one shows the new study and the new interview, else what it showed instead,
/// with the API's refusals by cause so far (every 503 has the same body).
async fn showing_the_change(app: &TestApp) -> Result<Vec<(u16, Value)>, String> {
    let now = answers(app).await;
    let first = |i: usize| &now[i].1["items"][0]["id"];
    if first(0) == "s_new" && first(3) == "i_new" && now[5].0 == 200 {
        return Ok(now);
    }
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    let refused: Vec<&str> = text.lines().filter(|line| line.starts_with("api_refused_total{")).collect();
    Err(format!(
        "statuses {:?}, first study {}, first interview of s_b {}, refused so far {refused:?}",
        now.iter().map(|(status, _)| status).collect::<Vec<_>>(),
        first(0),
        first(3)
    ))
}

async fn reads(app: &TestApp, source: &str) -> f64 {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    metrics::sample(&text, "api_reads_total", &[&format!("source=\"{source}\"")])
}

/// Reads whose organization's epoch was kept but not vouched for by a recent probe when asked for.
async fn epochs_not_vouched_for(app: &TestApp) -> f64 {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    metrics::sample(&text, "api_kept_unvouched_total", &["cache=\"reads\""])
}

async fn keeping_reads() -> World {
    World::start_with(&fixture::dataset(), |config| config.read_cache_mb = 16).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_kept_in_memory_are_answered_without_redis_and_a_change_is_served_within_a_second() {
    let mut world = keeping_reads().await;
    let first = answers(&world.app).await;
    assert_eq!(first[0].0, 200);
    assert_eq!(first[5].0, 404, "no i_new yet");
    // The same reads again do not reach Redis. A process short of CPU stops trusting what it keeps at once
    // (its probes are late), counted apart: such a round, and the one after it (the epoch is read again),
    // say nothing, and the next is asked.
    let (mut settling, mut checked) = (false, false);
    for _ in 0..20 {
        let (from_redis, unvouched) = (reads(&world.app, "redis").await, epochs_not_vouched_for(&world.app).await);
        assert_eq!(answers(&world.app).await, first);
        if epochs_not_vouched_for(&world.app).await > unvouched {
            settling = true;
            continue;
        }
        if std::mem::take(&mut settling) {
            continue;
        }
        assert_eq!(reads(&world.app, "redis").await, from_redis, "the same reads again did not reach Redis");
        checked = true;
        break;
    }
    assert!(checked, "every round had a kept epoch not vouched for");
    assert!(reads(&world.app, "memory").await >= PATHS.len() as f64);

    // A new completed study, and a new interview of a listed study (whose 404 was kept).
    let change = [
        completed_study(ACME, "s_new", "2026-04-01T00:00:00Z").messages,
        completed(interview(ACME, "i_new", "s_b", "2026-03-05T00:00:00Z")).messages,
    ]
    .concat();
    world.publish(&change).await;
    // Every answer of one round must show the change (a round's requests are not one view: an
    // organization's kept reads may be dropped between two of them).
    let now = eventually_showing(CHANGE, "the change to be served", || showing_the_change(&world.app)).await;
    assert_eq!(now[0].1["pagination"]["total"], first[0].1["pagination"]["total"].as_u64().unwrap() + 1);
    assert_eq!(now[2], first[2], "what did not change is served as before");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_reads_kept_in_memory_a_generation_switch_is_followed_within_a_second() {
    let mut world = keeping_reads().await;
    let before = answers(&world.app).await;
    // Generation 1's reads are kept: asked again, some are answered from memory (a round whose kept epoch
    // was not vouched for by a late probe, on a process short of CPU, goes to Redis; the next is asked).
    eventually_showing(Duration::from_secs(10), "a read answered from memory", || async {
        assert_eq!(answers(&world.app).await, before);
        let (memory, unvouched) = (reads(&world.app, "memory").await, epochs_not_vouched_for(&world.app).await);
        (memory > 0.0).then_some(()).ok_or(format!("{unvouched} reads with an epoch not vouched for"))
    })
    .await;
    assert_eq!(before[5].0, 404, "no i_new in generation 1");

    // Generation 2 holds what generation 1 does and more: a new completed study, listed first, and a
    // new interview of a listed study. An answer kept from generation 1 would miss them.
    let generation_2 = [
        fixture::dataset(),
        completed_study(ACME, "s_new", "2026-04-01T00:00:00Z").messages,
        completed(interview(ACME, "i_new", "s_b", "2026-03-05T00:00:00Z")).messages,
    ]
    .concat();
    world.switch_to_a_second_generation_of(&generation_2).await;
    let now = eventually_showing(CHANGE, "generation 2 to be served", || showing_the_change(&world.app)).await;
    assert_eq!(now[0].1["pagination"]["total"], before[0].1["pagination"]["total"].as_u64().unwrap() + 1);
    assert_eq!(now[2], before[2], "what generation 2 holds as generation 1 did is served as before");
    assert_eq!(now[4], before[4]);
}
