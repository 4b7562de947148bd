//! A projector's look at its Redis (`projector::Watch`): the positions it records on each primary, and how
//! a lost positions hash is told and opened again, with `INFO` and without it.

use std::time::Duration;

use end_to_end::own_redis::OwnRedis;
use end_to_end::{runner, unique};
use redis::AsyncCommands;
use shared::connection::{Connection, Settings};
use shared::redis_url::Target;
use shared::Keyspace;

/// A connection to a Redis of the test's own, as the projector makes one.
async fn connect(own: &OwnRedis) -> Connection {
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
    Connection::connect(&Target::new(&own.url(), false), settings).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_are_not_recorded_onto_a_redis_found_flushed() {
    use end_to_end::own_redis::Persistence;
    use projector::{Metrics, Watch};
    let own = OwnRedis::with(Persistence::AofAlways);
    let conn = connect(&own).await;
    let keys = Keyspace::new(unique("recorded"), 1);
    let metrics = std::sync::Arc::new(Metrics::new(["s".into(), "i".into(), "k".into()]));
    let mut watch = Watch::new(conn.clone(), metrics);
    let (a, b) = (projector::Partition::new("s", 0), projector::Partition::new("s", 1));
    let first = watch.losses(&keys, &[(a.clone(), 10)].into()).await.unwrap();
    assert!(first.is_empty(), "{first:?}");

    // Partition b had nothing applied at the last record: nothing is expected of it on this primary.
    assert_eq!(own.cli(&["FLUSHALL"]), "OK");
    let losses = watch.losses(&keys, &[(a, 12), (b, 20)].into()).await.unwrap();
    assert!(!losses.is_empty(), "the flush is a loss");
    let held = runner::generation_keys(&mut conn.clone(), &keys).await;
    assert!(held.is_empty(), "no position was written onto the flushed Redis: {held:?}");
}

/// A Redis of the test's own, a connection to it as a user that may not run `INFO` (the positions alone
/// then tell a loss), and a projector's look on that connection.
async fn watched_without_info() -> (OwnRedis, Connection, projector::Watch) {
    let own = OwnRedis::with(end_to_end::own_redis::Persistence::AofAlways);
    let user = ["ACL", "SETUSER", "no-info", "on", ">no-info-password", "~*", "&*", "+@all", "-info"];
    assert_eq!(own.cli(&user), "OK");
    let url = own.url().replace("redis://", "redis://no-info:no-info-password@");
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
    let conn = Connection::connect(&Target::new(&url, false), settings).await.unwrap();
    let metrics = std::sync::Arc::new(projector::Metrics::new(["s".into(), "i".into(), "k".into()]));
    let watch = projector::Watch::new(conn.clone(), metrics);
    (own, conn, watch)
}

/// Where the look at `INFO` did not see a flush (a user without `INFO`, or a flush between the look and
/// the record), the record itself tells the loss; and it writes no position at all then, not even of a
/// partition it had recorded nothing of before: that position would vouch for data the flush took, and
/// reading again would start there, skipping it for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_finds_positions_lost_writes_none_even_of_partitions_new_to_it() {
    use projector::Partition;
    let (own, conn, mut watch) = watched_without_info().await;
    let keys = Keyspace::new(unique("unseen"), 1);
    let (a, b) = (Partition::new("s", 0), Partition::new("s", 1));
    let first = watch.losses(&keys, &[(a.clone(), 10)].into()).await.unwrap();
    assert!(first.is_empty(), "{first:?}");

    // Partition b's first messages were applied after that record; then Redis loses everything.
    assert_eq!(own.cli(&["FLUSHALL"]), "OK");
    let losses = watch.losses(&keys, &[(a.clone(), 12), (b.clone(), 20)].into()).await.unwrap();
    assert!(!losses.is_empty(), "the positions lost are a loss");
    // Asked again before the loss is answered, of partitions it expects nothing of: the hash it made is
    // gone, and that is the loss still.
    let again = watch.losses(&keys, &[(b.clone(), 21), (Partition::new("s", 2), 5)].into()).await.unwrap();
    assert!(!again.is_empty(), "its hash gone is a loss whatever partitions it names");
    let held = runner::generation_keys(&mut conn.clone(), &keys).await;
    assert!(held.is_empty(), "no position was written onto the flushed Redis: {held:?}");

    // Answered (the one partition it expected anything of is read again from what Redis holds), the
    // next record makes the hash again, as at a start: the loss answered is not found again.
    watch.forget(std::slice::from_ref(&a), &[a.clone(), b.clone()].into());
    let answered = watch.losses(&keys, &[(a, 0), (b, 0)].into()).await.unwrap();
    assert!(answered.is_empty(), "the loss answered is found again: {answered:?}");
}

/// A projector that recorded partitions it has since lost to another instance (one joined, or a rebalance
/// after a member's session ended) expects nothing of them any more once it answers a loss: it forgets
/// them with the partitions it reads again, and the next record opens the flushed primary's hash again.
/// Kept, they would keep the hash from ever being opened: every later record refused, no batch written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_that_lost_a_partition_to_another_opens_a_flushed_primary_again_once_it_answered_the_loss() {
    use projector::Partition;
    use std::collections::{BTreeSet, HashMap};
    let (own, conn, mut watch) = watched_without_info().await;
    let keys = Keyspace::new(unique("moved"), 1);
    let (p0, p1) = (Partition::new("s", 0), Partition::new("s", 1));
    let recorded = watch.losses(&keys, &[(p0.clone(), 10), (p1.clone(), 7)].into()).await.unwrap();
    assert!(recorded.is_empty(), "{recorded:?}");

    // Partition 1 goes to another instance; then Redis loses everything.
    assert_eq!(own.cli(&["FLUSHALL"]), "OK");
    let refused = watch.losses(&keys, &[(p0.clone(), 12)].into()).await.unwrap();
    assert!(!refused.is_empty(), "the positions lost are a loss");

    // Answered as the healing protocol answers it: partition 0 read again, and 0 alone held.
    let held: BTreeSet<Partition> = [p0.clone()].into();
    watch.forget(std::slice::from_ref(&p0), &held);
    let opened = watch.losses(&keys, &[(p0.clone(), 0)].into()).await.unwrap();
    assert!(opened.is_empty(), "the loss answered is found again: {opened:?}");
    let hash: HashMap<String, String> = conn.clone().hgetall(keys.positions_on(&[(0, 16383)])).await.unwrap();
    assert_eq!(hash.get("opened").map(String::as_str), Some("1"), "the hash made again: {hash:?}");
    assert_eq!(hash.get("s/0").map(String::as_str), Some("0"), "the partition's position recorded: {hash:?}");
}

/// A projector makes its position hash on a primary at its first look, before it has applied anything
/// (so before it writes any data there): the API takes a primary without it for one that lost its data.
/// After a flush the hash is not made again until the loss is answered (the projector forgets what it
/// wrote), so that it never vouches for data the primary no longer holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_makes_its_position_hash_before_it_applies_anything_and_not_again_after_a_flush() {
    use end_to_end::own_redis::Persistence;
    use projector::{Metrics, Watch};
    use std::collections::HashMap;
    let own = OwnRedis::with(Persistence::AofAlways);
    let conn = connect(&own).await;
    let keys = Keyspace::new(unique("opened"), 1);
    let metrics = std::sync::Arc::new(Metrics::new(["s".into(), "i".into(), "k".into()]));
    let mut watch = Watch::new(conn.clone(), metrics);
    let hash = keys.positions_on(&[(0, 16383)]);
    let held = |conn: &Connection| {
        let (mut conn, hash) = (conn.clone(), hash.clone());
        async move { conn.hgetall::<_, HashMap<String, String>>(&hash).await.unwrap() }
    };
    let first = watch.losses(&keys, &HashMap::new()).await.unwrap();
    assert!(first.is_empty(), "{first:?}");
    assert_eq!(held(&conn).await, HashMap::from([("opened".to_string(), "1".to_string())]), "made before any batch");

    assert_eq!(own.cli(&["FLUSHALL"]), "OK");
    let losses = watch.losses(&keys, &HashMap::new()).await.unwrap();
    assert!(!losses.is_empty(), "the flush is a loss");
    let again = watch.losses(&keys, &HashMap::new()).await.unwrap();
    assert!(again.is_empty(), "{again:?}");
    assert!(held(&conn).await.is_empty(), "not made again on the flushed primary before the loss is answered");
    watch.forget_all();
    watch.losses(&keys, &HashMap::new()).await.unwrap();
    assert_eq!(held(&conn).await.get("opened").map(String::as_str), Some("1"), "made again once answered");
}
