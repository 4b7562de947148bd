//! A projector that is behind and cannot make progress says so, in order: `/readyz` 503 `stuck` with what
//! holds it, `projector_stuck` 1, and past `PROJECTOR_RESTART_STUCK_AFTER_SECS` `/livez` 503, so that
//! Kubernetes restarts it. Once it can apply again, the three clear.

use std::time::Duration;

use end_to_end::events::event;
use end_to_end::kafka::Topics;
use end_to_end::metrics::sample;
use end_to_end::own_redis::OwnRedis;
use end_to_end::{eventually, eventually_showing, runner, unique};
use serde_json::json;
use shared::Topic;

async fn get(url: &str) -> (u16, String) {
    let response = reqwest::get(url).await.expect("the projector's HTTP server answers");
    (response.status().as_u16(), response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_held_stuck_says_so_then_fails_its_liveness_and_clears_all_three_once_it_applies() {
    let own = OwnRedis::start();
    // A user that may not ZADD: no completed study can be listed, every write of one is refused (NOPERM)
    // and retried.
    let user = ["ACL", "SETUSER", "held", "on", ">held-0123456789", "~*", "&*", "+@all", "-zadd"];
    assert_eq!(own.cli(&user), "OK");
    let (org, at) = ("org", "2026-05-01T10:00:00Z");
    let study = |seq, kind, data| event(Topic::Study, org, "s1", seq, kind, at, data);
    let messages = vec![
        study(1, "study.created", json!({"internalTitle": "T"})),
        study(2, "study.launched", json!({})),
        study(3, "study.completed", json!({"completedAt": at})),
    ];
    let topics = Topics::holding(&messages).await;
    let prefix = unique("stuck");
    let mut config = runner::config(&topics, &prefix, &unique("g"));
    config.redis.url = format!("redis://held:held-0123456789@127.0.0.1:{}", own.port()).into();
    config.redis.cluster = false;
    config.http_addr = "127.0.0.1:0".parse().unwrap();
    config.stall_after_secs = 1;
    config.restart_stuck_after_secs = 20;
    let running = runner::spawn(config).await;
    let base = format!("http://{}", running.http.expect("an HTTP server"));

    // First: not ready, stuck, saying why (once a write was refused: joining its group, a member can be
    // stuck on nothing applied for a moment); still alive.
    let (ready, live) = eventually(Duration::from_secs(60), "readiness to say stuck on the refusal", || async {
        let (status, body) = get(&format!("{base}/readyz")).await;
        let live = get(&format!("{base}/livez")).await.0;
        let named = body.contains("\"stuck\"") && body.to_lowercase().contains("noperm");
        (status == 503 && named).then_some((body, live))
    })
    .await;
    assert_eq!(live, 200, "alive before the restart bound: {ready}");
    let metrics = get(&format!("{base}/metrics")).await.1;
    assert_eq!(sample(&metrics, "projector_stuck", &[]), 1.0, "{metrics}");

    // Then, past the bound: not alive either, for Kubernetes to restart it.
    let dead = eventually(Duration::from_secs(60), "liveness to fail", || async {
        let (status, body) = get(&format!("{base}/livez")).await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(dead.contains("\"stuck\"") && dead.to_lowercase().contains("noperm"), "{dead}");
    assert_eq!(running.consumed(), 0, "nothing applied meanwhile");
    // Held for all that time, it went on with its housekeeping between two attempts: its report in Redis
    // is fresh (held inside the write, it would report nothing, and its report would lapse).
    let mut conn = redis::Client::open(own.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let live = projector::live_instances(&mut conn, &prefix).await.unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
    let ages: Vec<f64> = live.values().map(|report| now - report.heartbeat).collect();
    assert_eq!(ages.len(), 1, "its report live (under 5 s old), seconds old: {ages:?}");

    // Allowed again: it applies, and all three clear.
    assert_eq!(own.cli(&["ACL", "SETUSER", "held", "+zadd"]), "OK");
    running.wait_until_consumed(messages.len() as u64, Duration::from_secs(60)).await;
    eventually_showing(Duration::from_secs(30), "readiness, liveness and the gauge to clear", || async {
        let ready = get(&format!("{base}/readyz")).await;
        let live = get(&format!("{base}/livez")).await.0;
        let stuck = sample(&get(&format!("{base}/metrics")).await.1, "projector_stuck", &[]);
        if ready.0 == 200 && live == 200 && stuck == 0.0 {
            Ok(())
        } else {
            Err(format!("ready {ready:?}, live {live}, stuck {stuck}"))
        }
    })
    .await;
    running.stop().await;
}
