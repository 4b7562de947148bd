//! Revocation that always revokes: a key created again with a new secret, deleted later, leaves no secret
//! it ever had valid, whatever the batching; and a secret claimed by a second key id never opens that
//! key's organization; and a key deleted while API instances are busy answering it (from memory) is
//! refused by every one of them within a second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use end_to_end::api::{config, spawn_serving_app, TestApp, World, REVOCATION};
use end_to_end::fixture::{self, key_created, key_deleted};
use end_to_end::{env, eventually, kafka, metrics, redis};
use redis::AsyncCommands;
use serde_json::json;
use shared::Keyspace;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_created_again_keeps_only_its_new_secret_and_deleting_it_revokes_every_secret_it_had() {
    let study = fixture::completed_study("org_re", "s", "2026-03-01T00:00:00Z").messages;
    let mut world = World::start(&[vec![key_created("org_re", "k1", 1, "recreated-secret-a")], study].concat()).await;
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-a").await.0, 200);
    // Created again in a later batch, after the first secret was indexed.
    world.publish(&[key_created("org_re", "k1", 2, "recreated-secret-b")]).await;
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-b").await.0, 200);
    // The replaced secret is retired.
    world.app.refused_within_a_second("recreated-secret-a").await;
    world.publish(&[key_deleted("org_re", "k1", 3)]).await;
    for secret in ["recreated-secret-a", "recreated-secret-b"] {
        world.app.refused_within_a_second(secret).await;
    }

    // Both creations in one publish (so, as a rule, one batch), then the deletion: the same end.
    world
        .publish(&[
            key_created("org_re", "k2", 1, "recreated-secret-c"),
            key_created("org_re", "k2", 2, "recreated-secret-d"),
        ])
        .await;
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-c").await.0, 401);
    assert_eq!(world.app.json("/v1/studies", "recreated-secret-d").await.0, 200);
    world.publish(&[key_deleted("org_re", "k2", 3)]).await;
    world.app.refused_within_a_second("recreated-secret-d").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_claimed_by_a_second_key_id_stays_with_the_first_and_the_claim_is_counted() {
    let studies = [
        fixture::completed_study("org_first", "s_first", "2026-03-01T00:00:00Z").messages,
        fixture::completed_study("org_second", "s_second", "2026-03-01T00:00:00Z").messages,
    ]
    .concat();
    let mut world = World::start(&[vec![key_created("org_first", "k1", 1, "shared-secret-s")], studies].concat()).await;
    world.publish(&[key_created("org_second", "k2", 1, "shared-secret-s")]).await;
    let only_first = |body: &serde_json::Value| {
        let items = body["items"].as_array().cloned().unwrap_or_default();
        items.len() == 1 && items[0]["id"] == "s_first"
    };
    let (status, body) = world.app.json("/v1/studies", "shared-secret-s").await;
    assert!(status == 200 && only_first(&body), "the secret opens only the first key's organization: {body}");
    assert_eq!(world.projector.snapshot().refused, 1, "the second claim is refused and counted");
    // Deleting the second key id leaves the first key's entry alone.
    world.publish(&[key_deleted("org_second", "k2", 2)]).await;
    let (status, body) = world.app.json("/v1/studies", "shared-secret-s").await;
    assert!(status == 200 && only_first(&body), "{body}");
}

/// Two API instances under load keep the key in memory; the key is deleted while they are busy. Every
/// request sent from a second after the projector applied the deletion is refused by both, none of them
/// fails otherwise, and until the deletion the key was mostly answered from memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_under_load_is_refused_by_every_api_instance_within_a_second() {
    const SECRET: &str = "deleted-under-load-key-1";
    let key = fixture::key("org_load", "k_load", SECRET);
    let study = fixture::completed_study("org_load", "s", "2026-03-01T00:00:00Z").messages;
    let world = World::start(&[key.messages.clone(), study].concat()).await;
    let other = spawn_serving_app(config(&world.prefix, &env("REDIS_URL"))).await;
    assert_eq!(world.app.json("/v1/studies", SECRET).await.0, 200);

    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for app in [&world.app, &other] {
        for _ in 0..6 {
            let (url, client, stop) = (format!("{}/v1/studies", app.address), app.client.clone(), stop.clone());
            clients.push(tokio::spawn(async move {
                let mut seen = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let status = client.get(&url).bearer_auth(SECRET).send().await.map(|r| r.status().as_u16());
                    if let Err(e) = &status {
                        eprintln!("a request sent {:?} ago failed: {e:?}", sent.elapsed());
                    }
                    seen.push((sent, status.unwrap_or(0)));
                }
                seen
            }));
        }
    }
    let lookups = |app: &TestApp, source: &'static str| {
        let admin = app.admin.clone();
        let client = app.client.clone();
        async move {
            let text = client.get(format!("{admin}/metrics")).send().await.unwrap().text().await.unwrap();
            metrics::sample(&text, "api_key_lookups_total", &[&format!("source=\"{source}\"")])
        }
    };
    // A setup wait, sized for a busy machine (the whole suite at four threads on two cores, in a debug
    // build): how fast the clients go says nothing about the promise checked below.
    for app in [&world.app, &other] {
        eventually(Duration::from_secs(60), "requests answered from keys kept in memory", || async {
            (lookups(app, "memory").await > 500.0).then_some(())
        })
        .await;
    }

    // Until the deletion, the key is found in memory far more often than in Redis.
    for app in [&world.app, &other] {
        let (memory, redis) = (lookups(app, "memory").await, lookups(app, "redis").await);
        assert!(memory > 5.0 * redis, "lookups from memory {memory}, from Redis {redis}");
    }

    // The deletion, and the moment Redis has it applied.
    let mut conn = redis().await;
    let generation: u64 = conn.get(Keyspace::active_generation(&world.prefix)).await.unwrap();
    let entry = Keyspace::new(world.prefix.clone(), generation).api_key_sha(&query_api::key_sha256(SECRET));
    assert!(conn.exists::<_, bool>(&entry).await.unwrap());
    let deletion = key.then("api_key.deleted", "2026-06-01T00:00:00Z", json!({})).messages[1..].to_vec();
    kafka::publish(&kafka::producer(), &world.topics, &deletion).await;
    let applied = eventually(Duration::from_secs(30), "the deletion to be applied", || async {
        let mut conn = redis().await;
        (!conn.exists::<_, bool>(&entry).await.unwrap()).then(Instant::now)
    })
    .await;
    tokio::time::sleep_until((applied + REVOCATION + Duration::from_millis(500)).into()).await;
    stop.store(true, Ordering::Relaxed);

    let mut seen = Vec::new();
    for client in clients {
        seen.extend(client.await.unwrap());
    }
    let late: Vec<_> = seen.iter().filter(|(sent, _)| *sent >= applied + REVOCATION).collect();
    assert!(late.len() > 20, "the load went on past the promise: {} requests", late.len());
    assert!(late.iter().all(|(_, status)| *status == 401), "a request sent a second after the deletion was served");
    let other_statuses: Vec<_> = seen.iter().filter(|(_, status)| !matches!(status, 200 | 401)).collect();
    assert!(other_statuses.is_empty(), "no request fails otherwise: {other_statuses:?}");
    let before: Vec<u16> = seen.iter().filter(|(sent, _)| *sent < applied).map(|(_, status)| *status).collect();
    let served = before.iter().filter(|status| **status == 200).count();
    assert!(served > 0, "until the deletion the key was served: {served} of {} requests", before.len());
}
