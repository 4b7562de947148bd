//! An instance on a Redis of the test's own, which the test cuts or pauses: when its push connection is
//! cut, a change is still served at once and keeping resumes; when Redis stalls, what was kept stops being
//! served within the documented half second, and each kept value asked for meanwhile is counted once, under
//! its own cache.

use std::time::{Duration, Instant};

use end_to_end::api::{config, spawn_app, TestApp};
use end_to_end::fixture::{self, ACME, ACME_KEY};
use end_to_end::own_redis::OwnRedis;
use end_to_end::{eventually, kafka, runner, unique};
use shared::Keyspace;

use super::{applied_on, everywhere, key_kept, keys_looked_up_in_redis, retitled, served_from_memory, title};

/// How long after its push connection is cut or stalls an instance stops serving what it kept (the
/// tracker's `TRUSTED_FOR`, and a margin for a loaded machine).
const UNTRUSTED_WITHIN: Duration = Duration::from_millis(700);

/// The ids of the clients of `redis` that have tracking on: the API's push connections.
fn tracking_clients(redis: &OwnRedis) -> Vec<String> {
    let list = redis.cli(&["CLIENT", "LIST"]);
    list.lines()
        .filter(|line| line.split(' ').any(|field| field.strip_prefix("flags=").is_some_and(|f| f.contains('t'))))
        .filter_map(|line| line.split(' ').find_map(|field| field.strip_prefix("id=")).map(String::from))
        .collect()
}

/// A projector and an API on a Redis of the test's own, which the test may cut or pause.
pub(super) async fn on_own_redis(redis: &OwnRedis) -> (kafka::Topics, String, runner::Running, TestApp) {
    let messages = fixture::dataset();
    let topics = kafka::Topics::holding(&messages).await;
    let prefix = unique("pushed");
    let mut projector = runner::config(&topics, &prefix, &unique("g"));
    projector.redis.url = redis.url().into();
    projector.redis.cluster = false;
    let projector = runner::spawn(projector).await;
    projector.wait_until_consumed(messages.len() as u64, Duration::from_secs(60)).await;
    let mut api = config(&prefix, &redis.url());
    api.redis.cluster = false;
    api.generation_refresh_ms = 60_000;
    let app = spawn_app(api).await;
    eventually(Duration::from_secs(30), "the study answered from memory", || async {
        let before = served_from_memory(&app).await;
        (app.get("/v1/studies/s_a", Some(ACME_KEY)).await.status() == 200 && served_from_memory(&app).await > before)
            .then_some(())
    })
    .await;
    (topics, prefix, projector, app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn when_the_push_connection_is_cut_a_change_is_still_served_at_once_and_keeping_resumes() {
    let redis = OwnRedis::start();
    let (topics, prefix, _projector, app) = on_own_redis(&redis).await;
    let keys = Keyspace::new(prefix, 1);
    let target = shared::redis_url::Target::Single(redis.url());
    let settings = shared::connection::Settings { timeout: Duration::from_secs(5), cluster_retries: 0 };
    let conn = shared::connection::Connection::connect(&target, settings).await.unwrap();
    let producer = kafka::producer();
    for round in 0..5u64 {
        let cut = tracking_clients(&redis);
        assert!(!cut.is_empty(), "the API has a push connection");
        for id in &cut {
            redis.cli(&["CLIENT", "KILL", "ID", id]);
        }
        // A change made while nothing can push it.
        let name = format!("after cut {round}");
        kafka::publish(&producer, &topics, &[retitled(ACME, "s_a", 4 + round, &name)]).await;
        let at = applied_on(conn.clone(), &keys, ACME, "s_a", &name).await;
        let name = &name;
        let delay = everywhere(&[&app], at, |app| async move { title(app, "s_a").await == *name }).await;
        assert!(delay < UNTRUSTED_WITHIN, "round {round}: the change was served {delay:?} after it was applied");
        // The instance connects again and keeps reads again.
        eventually(Duration::from_secs(10), "reads kept in memory again", || async {
            let before = served_from_memory(&app).await;
            title(&app, "s_a").await;
            (served_from_memory(&app).await > before && !tracking_clients(&redis).is_empty()).then_some(())
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_redis_stalls_what_was_kept_stops_being_served_within_half_a_second() {
    let redis = OwnRedis::start();
    let (_topics, _prefix, projector, app) = on_own_redis(&redis).await;
    projector.stop().await;
    let app = std::sync::Arc::new(app);
    const PAUSE: Duration = Duration::from_millis(2500);
    // Redis stalls at some moment between the asking and the reply: requests count as sent during the
    // stall from the reply on, and as answered during it until the asking's time plus the pause.
    let asking = Instant::now();
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", &PAUSE.as_millis().to_string(), "ALL"]), "OK");
    let paused = Instant::now();
    let mut asked = Vec::new();
    while paused.elapsed() < PAUSE - Duration::from_millis(300) {
        let app = app.clone();
        asked.push(tokio::spawn(async move {
            let sent = Instant::now();
            let status = app.get("/v1/studies/s_a", Some(ACME_KEY)).await.status().as_u16();
            (sent, Instant::now(), status)
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut answers = Vec::new();
    for one in asked {
        answers.push(one.await.unwrap());
    }
    let resumed = asking + PAUSE;
    let from_memory = |(_, answered, status): &(Instant, Instant, u16)| *status == 200 && *answered < resumed;
    let early: Vec<_> = answers.iter().filter(|(sent, ..)| *sent < paused + Duration::from_millis(200)).collect();
    assert!(early.iter().any(|a| from_memory(a)), "what was kept was served at first: {early:?}");
    let late: Vec<_> = answers.iter().filter(|(sent, ..)| *sent >= paused + UNTRUSTED_WITHIN).collect();
    assert!(late.len() > 20, "requests went on through the stall: {}", late.len());
    let served: Vec<_> = late.iter().filter(|a| from_memory(a)).collect();
    assert!(served.is_empty(), "kept data served while Redis stalled: {:?}", served.len());
}

/// `api_kept_unvouched_total` of `app` for `cache`.
async fn unvouched(app: &TestApp, cache: &str) -> f64 {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    end_to_end::metrics::sample(&text, "api_kept_unvouched_total", &[&format!("cache=\"{cache}\"")])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_redis_stalls_a_kept_key_asked_for_counts_one_unvouched_key_and_one_unvouched_key_index() {
    let redis = OwnRedis::start();
    let (_topics, _prefix, projector, app) = on_own_redis(&redis).await;
    projector.stop().await;
    // The key index's epoch is kept once a key found in no organization is refused: the next refusal of
    // that key looks nothing up in Redis.
    eventually(Duration::from_secs(30), "an invalid key refused from memory", || async {
        let before = keys_looked_up_in_redis(&app).await;
        assert_eq!(app.get("/v1/studies", Some("no-such-key-0001")).await.status(), 401);
        (keys_looked_up_in_redis(&app).await == before).then_some(())
    })
    .await;
    key_kept(&app, ACME_KEY).await;
    let before = (unvouched(&app, "keys").await, unvouched(&app, "key-index").await);
    let lookups = keys_looked_up_in_redis(&app).await;
    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "2000", "ALL"]), "OK");
    // Once no probe has vouched for what was kept, one request with the kept key: its entry is not
    // vouched for, nor is the key index's epoch it then asks whether the key is kept as invalid.
    tokio::time::sleep(UNTRUSTED_WITHIN).await;
    let status = app.get("/v1/studies", Some(ACME_KEY)).await.status();
    assert!(status == 200 || status == 503, "a kept key during a stall: {status}");
    let after = (unvouched(&app, "keys").await, unvouched(&app, "key-index").await);
    assert_eq!(keys_looked_up_in_redis(&app).await - lookups, 1.0, "the key was looked up in Redis once");
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1.0, 1.0),
        "one request counts its key once under `keys` and the key index's epoch once under `key-index`"
    );
}
