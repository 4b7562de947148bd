//! The key index lost before a projector sees the loss: between a flush (or an empty restart) of the key
//! index's primary and the moment a projector marks the loss, a lookup finds no key. A valid key is then
//! answered 503 (retry), never 401 (a client told its key is invalid may drop it) nor 429 (the throttle
//! of unknown keys taking the index's absence for a client's guessing).

use std::time::Duration;

use end_to_end::api::World;
use end_to_end::fixture::{self, ACME_KEY, GLOBEX_KEY};
use end_to_end::redis;
use shared::Keyspace;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_index_lost_before_any_projector_marks_it_answers_valid_keys_503_never_401_or_429() {
    let world = World::start_with(&fixture::dataset(), |api| {
        // Every key looked up in Redis, and a throttle that two unknown keys would trip.
        (api.api_key_cache_size, api.unknown_keys_per_second) = (0, 1);
    })
    .await;
    assert_eq!(world.app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);
    let World { projector, app, prefix, .. } = world;
    // No projector to see the loss: the window before one does, held open.
    projector.stop().await;
    let mut conn = redis().await;
    let active: u64 = redis::cmd("GET").arg(Keyspace::active_generation(&prefix)).query_async(&mut conn).await.unwrap();
    let keys = Keyspace::new(prefix.clone(), active);
    let index: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}*", keys.api_key_epoch().trim_end_matches("epoch")))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(index.contains(&keys.api_key_epoch()) && index.len() > 2, "the key index: {index:?}");
    let mut dumps = Vec::new();
    for key in &index {
        let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query_async(&mut conn).await.unwrap();
        dumps.push((key.clone(), dump));
    }
    // The index's slot loses its data (what a flush of its primary does), the active generation stays.
    let _: () = redis::cmd("DEL").arg(&index).query_async(&mut conn).await.unwrap();

    for _ in 0..10 {
        for key in [ACME_KEY, GLOBEX_KEY, "a-key-that-never-was"] {
            let answer = app.get("/v1/studies", Some(key)).await;
            let retry = answer.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
            assert_eq!((answer.status().as_u16(), retry.as_deref()), (503, Some("1")), "{key} while the index is lost");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The index back as it was: every valid key is served again, nothing of the loss kept.
    for (key, dump) in &dumps {
        let _: () = redis::cmd("RESTORE").arg(key).arg(0).arg(dump).query_async(&mut conn).await.unwrap();
    }
    assert_eq!(app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);
    assert_eq!(app.get("/v1/studies", Some(GLOBEX_KEY)).await.status(), 200);
    assert_eq!(app.get("/v1/studies", Some("a-key-that-never-was")).await.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_read_model_whose_key_index_never_held_a_key_an_unknown_key_is_401() {
    let world =
        World::start_with(&fixture::completed_study("org_nokeys", "s", "2026-03-01T00:00:00Z").messages, |api| {
            api.api_key_cache_size = 0;
        })
        .await;
    for _ in 0..3 {
        let answer = world.app.get("/v1/studies", Some("a-key-that-never-was")).await;
        assert_eq!(answer.status(), 401, "no epoch, and none ever seen: the key is unknown");
    }
}
