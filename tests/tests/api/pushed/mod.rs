//! Changes pushed by Redis to every API instance (`CLIENT TRACKING`): a change is served, and a deleted key
//! refused, by two instances once the projector applies it, many times over, with no timer that could have
//! told them (how fast is measured by `scripts/bench-freshness`, not asserted here); an idle instance costs
//! Redis the same few commands a second whether it keeps a hundred organizations or thousands. What happens
//! when the push connection is cut or Redis stalls is in [`own_redis`].

mod own_redis;

use std::time::{Duration, Instant};

use end_to_end::api::{config, spawn_app, spawn_serving_app, TestApp, World};
use end_to_end::events::event;
use end_to_end::fixture::{self, ACME, ACME_KEY};
use end_to_end::own_redis::OwnRedis;
use end_to_end::{env, eventually, kafka, metrics, redis, runner, unique};
use redis::AsyncCommands;
use serde_json::json;
use shared::codec::StoredDocument;
use shared::{Keyspace, Topic};

use own_redis::on_own_redis;

fn retitled(org: &str, study: &str, sequence: u64, title: &str) -> end_to_end::events::Outgoing {
    let data = json!({"internalTitle": title});
    event(Topic::Study, org, study, sequence, "study.retitled", "2026-04-01T00:00:00Z", data)
}

/// An API instance that reads the generation once and then not for a minute: anything it learns sooner
/// is pushed.
fn without_timer(prefix: &str) -> query_api::Config {
    let mut api = config(prefix, &env("REDIS_URL"));
    api.generation_refresh_ms = 60_000;
    api
}

async fn served_from_memory(app: &TestApp) -> f64 {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    metrics::sample(&text, "api_reads_total", &["source=\"memory\""])
}

/// How many kept keys Redis has pushed a change of to `app`, and how many of its push connections were lost.
async fn pushes(app: &TestApp) -> (f64, f64) {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    (
        metrics::sample(&text, "api_invalidations_total", &[]),
        metrics::sample(&text, "api_tracking_connections_lost_total", &[]),
    )
}

/// Waits until Redis has pushed a change to every instance since `before` (their [`pushes`]), on the
/// connections that were up then: what was served came from a push, not from a connection made again.
async fn pushed_to(apps: &[&TestApp], before: &[(f64, f64)], what: &str) {
    for (app, (invalidations, lost)) in apps.iter().zip(before) {
        eventually(Duration::from_secs(5), what, || async {
            let (now, lost_now) = pushes(app).await;
            assert_eq!(lost_now, *lost, "a push connection was lost: {what}");
            (now > *invalidations).then_some(())
        })
        .await;
    }
}

/// Waits until `app` answers `secret` from memory: a request that looks nothing up in Redis. A 503 a
/// loaded machine causes (a Redis read over the API's 500 ms) is asked again; any other answer fails.
async fn key_kept(app: &TestApp, secret: &str) {
    eventually(Duration::from_secs(60), "the key kept in memory", || async {
        let before = keys_looked_up_in_redis(app).await;
        if !served(app, secret).await {
            return None;
        }
        (keys_looked_up_in_redis(app).await == before).then_some(())
    })
    .await;
}

/// Whether `/v1/studies` was 200 for `secret`; false after a 503 for load only, and a panic on anything
/// else.
async fn served(app: &TestApp, secret: &str) -> bool {
    let status = app.get("/v1/studies", Some(secret)).await.status();
    if status == 503 {
        app.assert_refused_only_for_load().await;
        return false;
    }
    assert_eq!(status, 200, "a valid key refused");
    true
}

async fn keys_looked_up_in_redis(app: &TestApp) -> f64 {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    metrics::sample(&text, "api_key_lookups_total", &["source=\"redis\""])
}

/// API keys kept by `app` but asked for while no recent probe vouched for them (a process short of CPU
/// stops trusting at once), each looked up in Redis although it was still kept.
async fn keys_not_vouched_for(app: &TestApp) -> f64 {
    let text = app.admin_get("/metrics").await.text().await.unwrap();
    metrics::sample(&text, "api_kept_unvouched_total", &["cache=\"keys\""])
}

async fn title(app: &TestApp, study: &str) -> String {
    let (status, body) = app.json(&format!("/v1/studies/{study}"), ACME_KEY).await;
    assert_eq!(status, 200, "{body}");
    body["internalTitle"].as_str().unwrap_or_default().to_string()
}

/// Waits until the stack's Redis holds `study`'s document with `title`, polling every millisecond: when it
/// was applied.
async fn applied(keys: &Keyspace, org: &str, study: &str, title: &str) -> Instant {
    applied_on(redis().await, keys, org, study, title).await
}

async fn applied_on(
    mut conn: shared::connection::Connection,
    keys: &Keyspace,
    org: &str,
    study: &str,
    title: &str,
) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let doc: Option<StoredDocument> = conn.hget(keys.study_documents(org), study).await.unwrap();
        if doc.is_some_and(|doc| doc.0.contains(title)) {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "the projector did not apply {title}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Polls every instance every millisecond until `done` holds on each; how long that took from `since`.
async fn everywhere<'a, F, Fut>(apps: &[&'a TestApp], since: Instant, done: F) -> Duration
where
    F: Fn(&'a TestApp) -> Fut,
    Fut: std::future::Future<Output = bool> + 'a,
{
    let mut latest = Duration::ZERO;
    for app in apps.iter().copied() {
        loop {
            if done(app).await {
                latest = latest.max(since.elapsed());
                break;
            }
            assert!(since.elapsed() < Duration::from_secs(10), "not seen on an instance within 10 s");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    latest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_is_pushed_to_two_instances_that_keep_the_study_and_served_by_both_every_time() {
    let world = World::start_with(&fixture::dataset(), |api| api.generation_refresh_ms = 60_000).await;
    let other = spawn_serving_app(without_timer(&world.prefix)).await;
    let keys = Keyspace::new(world.prefix.clone(), 1);
    let producer = kafka::producer();
    for app in [&world.app, &other] {
        title(app, "s_a").await;
        assert_eq!(app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);
    }
    let mut delays = Vec::new();
    for round in 0..20u64 {
        // Both instances keep the study, answering it from memory, before it changes.
        for app in [&world.app, &other] {
            let before = served_from_memory(app).await;
            eventually(Duration::from_secs(60), "the study answered from memory", || async {
                title(app, "s_a").await;
                (served_from_memory(app).await > before).then_some(())
            })
            .await;
        }
        let name = format!("round {round}");
        let before = [pushes(&world.app).await, pushes(&other).await];
        kafka::publish(&producer, &world.topics, &[retitled(ACME, "s_a", 4 + round, &name)]).await;
        let at = applied(&keys, ACME, "s_a", &name).await;
        let name = &name;
        let delay = everywhere(&[&world.app, &other], at, |app| async move { title(app, "s_a").await == *name }).await;
        pushed_to(&[&world.app, &other], &before, &format!("{name} pushed")).await;
        delays.push(delay);
    }
    // Every round was pushed and served: nothing else tells an instance that keeps the study (its timer is
    // a minute away, and a kept entry lives until it is pushed or idle for minutes). How fast is a
    // distribution the machine shapes; the freshness benchmark measures it.
    eprintln!("applied -> served by both instances: {delays:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_key_is_pushed_to_two_instances_that_keep_it_and_refused_by_both_every_time() {
    let keys: Vec<(String, String)> = (0..15).map(|i| (format!("k_push_{i}"), unique("pushed-key"))).collect();
    let mut messages = fixture::dataset();
    for (id, secret) in &keys {
        messages.extend(fixture::key(ACME, id, secret).messages);
    }
    let world = World::start_with(&messages, |api| api.generation_refresh_ms = 60_000).await;
    let other = spawn_serving_app(without_timer(&world.prefix)).await;
    let index = Keyspace::new(world.prefix.clone(), 1);
    let producer = kafka::producer();
    for app in [&world.app, &other] {
        key_kept(app, ACME_KEY).await;
    }
    let mut delays = Vec::new();
    for (id, secret) in &keys {
        // Kept by both, so that Redis pushes its deletion (on a busy machine, the read that keeps a key
        // may come after the requests that asked for it).
        for app in [&world.app, &other] {
            key_kept(app, secret).await;
            key_kept(app, ACME_KEY).await;
        }
        let before = [pushes(&world.app).await, pushes(&other).await];
        kafka::publish(&producer, &world.topics, &[fixture::key_deleted(ACME, id, 2)]).await;
        let entry = index.api_key_sha(&query_api::key_sha256(secret));
        let conn = redis().await;
        let at = eventually(Duration::from_secs(30), "the deletion to be applied", || async {
            (!conn.clone().exists::<_, bool>(&entry).await.unwrap()).then(Instant::now)
        })
        .await;
        let secret = secret.clone();
        let secret = &secret;
        let delay = everywhere(&[&world.app, &other], at, |app| async move {
            app.get("/v1/studies", Some(secret)).await.status() == 401
        })
        .await;
        pushed_to(&[&world.app, &other], &before, &format!("the deletion of {id} pushed")).await;
        delays.push(delay);
        // A key event drops that key only: the organization's other key is still kept, so a lookup in Redis
        // is one of a kept key that no probe vouched for at that moment, never one of a key forgotten.
        for app in [&world.app, &other] {
            eventually(Duration::from_secs(30), "the organization's other key served", || async {
                let (before, unvouched) = (keys_looked_up_in_redis(app).await, keys_not_vouched_for(app).await);
                if !served(app, ACME_KEY).await {
                    return None;
                }
                let looked_up = keys_looked_up_in_redis(app).await - before;
                let unvouched = keys_not_vouched_for(app).await - unvouched;
                assert_eq!(looked_up, unvouched, "the key deletion dropped another key");
                Some(())
            })
            .await;
        }
    }
    // Every deletion was pushed and refused: a kept key has no expiry, so nothing else refuses it.
    eprintln!("applied -> refused by both instances: {delays:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn while_another_organizations_slots_heal_an_organization_is_served_from_memory_without_reading_the_condition() {
    use shared::keys::slot;
    let redis = OwnRedis::start();
    let (_topics, prefix, projector, app) = on_own_redis(&redis).await;
    projector.stop().await;
    let keys = Keyspace::new(prefix, 1);
    let healing = slot(&keys.org_epoch(fixture::GLOBEX));
    assert!(![slot(&keys.org_epoch(ACME)), slot(&keys.api_key_epoch())].contains(&healing), "pick another prefix");
    // As a projector heals what one primary of a cluster lost: its slots, here GLOBEX's one.
    let flush = shared::loss::Loss::Flush {
        node: "test".into(),
        run_id: "r".into(),
        flushes: 1,
        slots: vec![(healing, healing)],
    };
    let loss = shared::loss::HealingEntry { target: Some(1), losses: shared::loss::Losses::one(flush) }.encode();
    assert_eq!(redis.cli(&["HSET", &keys.healing(), "test", &loss]), "1");
    eventually(Duration::from_secs(10), "GLOBEX waiting", || async {
        (app.get("/v1/studies", Some(fixture::GLOBEX_KEY)).await.status() == 503).then_some(())
    })
    .await;
    eventually(Duration::from_secs(10), "ACME answered from memory", || async {
        let before = served_from_memory(&app).await;
        title(&app, "s_a").await;
        (served_from_memory(&app).await > before).then_some(())
    })
    .await;
    assert_eq!(redis.cli(&["CONFIG", "RESETSTAT"]), "OK");
    let before = served_from_memory(&app).await;
    for _ in 0..50 {
        title(&app, "s_a").await;
        assert_eq!(app.get("/v1/studies", Some("not-a-key-of-anyone")).await.status(), 401);
    }
    let from_memory = served_from_memory(&app).await - before;
    let (conditions, generations) = (redis.calls("hgetall"), redis.calls("get"));
    assert_eq!(from_memory, 50.0, "ACME's reads while GLOBEX healed");
    assert!(
        conditions <= 2 && generations <= 2,
        "100 requests read the condition {conditions} times, the generation {generations}"
    );
    // The heal ends (its entry cleared, as the projector clears it): GLOBEX is served again, as soon as
    // Redis pushes the change.
    assert_eq!(redis.cli(&["HDEL", &keys.healing(), "test"]), "1");
    eventually(Duration::from_secs(10), "GLOBEX served", || async {
        (app.get("/v1/studies", Some(fixture::GLOBEX_KEY)).await.status() == 200).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_instance_costs_redis_as_few_commands_with_two_thousand_organizations_kept_as_with_a_hundred() {
    let redis = OwnRedis::start();
    const ORGS: usize = 2000;
    let secret = |i: usize| format!("idle-cost-secret-{i:04}");
    let messages: Vec<_> = (0..ORGS)
        .flat_map(|i| {
            let org = format!("org_idle_{i:04}");
            let key = fixture::key(&org, &format!("k_idle_{i}"), &secret(i)).messages;
            [key, fixture::completed_study(&org, &format!("s_idle_{i}"), "2026-03-01T00:00:00Z").messages].concat()
        })
        .collect();
    let topics = kafka::Topics::holding(&messages).await;
    let prefix = unique("idle");
    let mut projector = runner::config(&topics, &prefix, &unique("g"));
    projector.redis.url = redis.url().into();
    projector.redis.cluster = false;
    runner::build(projector, messages.len() as u64, Duration::from_secs(120)).await;
    // As deployed: the generation read four times a second.
    let mut api = config(&prefix, &redis.url());
    api.redis.cluster = false;
    api.generation_refresh_ms = 250;
    // What is counted is the commands of an idle instance, not how fast 4,000 first reads are answered: a
    // debug build beside other tests on two cores once took past the tests' 500 ms for one of them (a 503).
    api.redis.timeout_ms = 5_000;
    let app = spawn_app(api).await;
    let keep = |count: usize| {
        let app = &app;
        async move {
            for i in 0..count {
                for _ in 0..2 {
                    let status = app.get("/v1/studies", Some(&secret(i))).await.status();
                    assert_eq!(status, 200);
                }
            }
            // Every organization's reads are answered from memory once their epochs are pushed.
            eventually(Duration::from_secs(30), "every organization's reads kept", || async {
                let before = served_from_memory(app).await;
                for i in 0..count {
                    app.get("/v1/studies", Some(&secret(i))).await;
                }
                (served_from_memory(app).await - before >= count as f64).then_some(())
            })
            .await;
        }
    };
    let idle = || {
        assert_eq!(redis.cli(&["CONFIG", "RESETSTAT"]), "OK");
        std::thread::sleep(Duration::from_secs(3));
        let stats = redis.cli(&["INFO", "commandstats"]);
        let calls: u64 =
            stats.lines().filter_map(|line| line.split("calls=").nth(1)?.split(',').next()?.parse::<u64>().ok()).sum();
        (calls as f64 / 3.0, stats)
    };
    keep(100).await;
    let (hundred, _) = idle();
    keep(ORGS).await;
    let (thousands, stats) = idle();
    eprintln!("idle commands a second: {hundred:.1} with 100 organizations kept, {thousands:.1} with {ORGS}\n{stats}");
    assert!(thousands < 60.0, "{thousands:.1} commands a second with {ORGS} organizations kept, idle:\n{stats}");
    assert!(thousands <= hundred * 1.5 + 5.0, "{hundred:.1} a second with 100 kept, {thousands:.1} with {ORGS}");
}
