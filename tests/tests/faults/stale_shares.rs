//! Redis losing data just after instances joined and left: each surviving projector then holds fewer
//! partitions than it once recorded positions of. The read model must heal all the same, and events
//! published afterwards must land: a key deleted after the loss is refused within seconds, the positions
//! hash is opened again, no loss is counted again and again, and no healing entry is left.

use std::collections::HashMap;
use std::time::Duration;

use end_to_end::api;
use end_to_end::fixture;
use end_to_end::kafka::{self, Topics, PARTITIONS};
use end_to_end::own_redis::{OwnRedis, Persistence};
use end_to_end::runner::{self, Running};
use end_to_end::scenario::Scenario;
use end_to_end::{eventually, eventually_showing, metrics, unique};
use shared::connection::{Connection, Settings};
use shared::redis_url::Target;
use shared::Keyspace;

/// Every partition of the three event topics.
const ALL_PARTITIONS: usize = 3 * PARTITIONS as usize;

/// Waits until `count` instances report and hold every partition between them. Partitions go by
/// rendezvous hashing over random instance ids under the Redis membership, so an instance is sometimes
/// given none (about one start in thirteen of three): a share of none is taken for good once it lasted 2 s.
async fn wait_shared(conn: &Connection, prefix: &str, count: usize) {
    let what = format!("{count} projectors to hold every partition");
    let none_since = std::cell::Cell::new(None::<std::time::Instant>);
    eventually_showing(Duration::from_secs(60), &what, || async {
        let all = runner::instances(conn, prefix).await;
        let held: Vec<usize> = all.iter().map(|(_, partitions, _)| *partitions).collect();
        if held.len() != count || held.iter().sum::<usize>() != ALL_PARTITIONS {
            none_since.set(None);
            return Err(format!("held: {held:?}"));
        }
        if !held.contains(&0) {
            return Ok(());
        }
        let since = none_since.get().unwrap_or_else(std::time::Instant::now);
        none_since.set(Some(since));
        if since.elapsed() >= Duration::from_secs(2) {
            Ok(())
        } else {
            Err(format!("held: {held:?}"))
        }
    })
    .await;
}

fn losses(projectors: &[&Running]) -> f64 {
    projectors.iter().map(|p| metrics::sample(&p.metrics_text(), "projector_redis_losses_total", &[])).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flush_after_an_instance_joined_and_left_heals_and_a_key_deleted_afterwards_is_refused_within_seconds() {
    let redis = OwnRedis::with(Persistence::AofAlways);
    let scenario = Scenario::generate(0x5eed_1162, 3, 10, 4);
    let org = scenario.organizations()[0].clone();
    let (key_id, secret) = ("stale-share-key", "stale-share-secret-0001");
    let created = fixture::key(&org, key_id, secret).messages;
    let topics = Topics::holding(&[scenario.messages.clone(), created].concat()).await;
    let total = scenario.messages.len() as u64 + 1;

    let (prefix, group) = (unique("heal"), unique("g"));
    let mut config = runner::config(&topics, &prefix, &group);
    config.redis.url = redis.url().into();
    // One Redis of the test's own, whatever the leg's Redis is.
    config.redis.cluster = false;
    config.redis.timeout_ms = 1000;
    let target = Target::new(&redis.url(), false);
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
    let conn = Connection::connect(&target, settings).await.expect("own redis reachable");
    let app = {
        let mut api = api::config(&prefix, &redis.url());
        api.redis.cluster = false;
        api::spawn_app(api).await
    };

    // The first projects the stream alone, recording every partition; a second joins and takes some of
    // them; a third joins, takes some of each, and leaves.
    let one = runner::spawn(config.clone()).await;
    one.wait_until_consumed(total, Duration::from_secs(60)).await;
    app.wait_serving(Duration::from_secs(60)).await;
    let two = runner::spawn(config.clone()).await;
    wait_shared(&conn, &prefix, 2).await;
    let three = runner::spawn(config.clone()).await;
    wait_shared(&conn, &prefix, 3).await;
    three.stop().await;
    wait_shared(&conn, &prefix, 2).await;
    assert_eq!(app.get("/v1/studies", Some(secret)).await.status(), 200, "the key is live");

    assert_eq!(redis.cli(&["FLUSHALL"]), "OK");
    eventually(Duration::from_secs(10), "the loss to be counted", || async {
        (losses(&[&one, &two]) > 0.0).then_some(())
    })
    .await;
    kafka::publish(&kafka::producer(), &topics, &[fixture::key_deleted(&org, key_id, 2)]).await;

    // 503 while the truth is unknown, 200 until the deletion is projected, then refused: within seconds.
    eventually_showing(Duration::from_secs(30), "the key deleted after the loss to be refused", || async {
        match app.get("/v1/studies", Some(secret)).await.status().as_u16() {
            401 => Ok(()),
            status @ (200 | 503) => Err(status.to_string()),
            status => panic!("the key was answered {status} after the loss"),
        }
    })
    .await;
    let keys = Keyspace::new(prefix.clone(), 1);
    let mut redis_conn = conn.clone();
    let positions: HashMap<String, String> =
        redis::cmd("HGETALL").arg(keys.positions_on(&[(0, 16383)])).query_async(&mut redis_conn).await.unwrap();
    assert_eq!(positions.get("opened").map(String::as_str), Some("1"), "the positions hash opened again");
    eventually_showing(Duration::from_secs(30), "the heal to end", || async {
        let mut redis_conn = conn.clone();
        let healing: HashMap<String, String> =
            redis::cmd("HGETALL").arg(keys.healing()).query_async(&mut redis_conn).await.unwrap();
        let entries: Vec<&String> = healing.keys().filter(|field| *field != shared::keys::HEALING_OPENED).collect();
        if entries.is_empty() {
            Ok(())
        } else {
            Err(format!("{healing:?}"))
        }
    })
    .await;
    // The loss was answered once: not counted again and again while events flow.
    let counted = losses(&[&one, &two]);
    let more = fixture::key(&org, "after-the-loss", "after-the-loss-secret-01").messages;
    kafka::publish(&kafka::producer(), &topics, &more).await;
    eventually(Duration::from_secs(30), "a key created after the heal to be served", || async {
        (app.get("/v1/studies", Some("after-the-loss-secret-01")).await.status() == 200).then_some(())
    })
    .await;
    assert_eq!(losses(&[&one, &two]), counted, "no loss counted after the heal");
    one.stop().await;
    two.stop().await;
}
