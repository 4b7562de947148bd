//! The read model's store at its limits: sequences past what a double holds, hashes too large to be
//! read in one reply, and writes racing a Redis that loses data.

use std::time::Duration;

use end_to_end::own_redis::OwnRedis;
use end_to_end::{eventually, redis, runner, unique};
use redis::AsyncCommands;
use shared::connection::{Connection, Settings};
use shared::lease::{Lease, OnLapse};
use shared::redis_url::Target;
use shared::Keyspace;

/// The projector's write script, run as the projector runs it, for an outcome folded from `expected`.
async fn write(conn: &mut Connection, state_key: &str, expected: &str) -> redis::Value {
    let script = redis::Script::new(include_str!("../../../projector/src/store/write.lua"));
    let mut invocation = script.prepare_invoke();
    let hold = format!("{}:hold", state_key.rsplit_once(":study:").expect("a study's state key").0);
    invocation.key(state_key).key(state_key).key(state_key).key(state_key).key(hold).arg(expected).arg("9");
    for arg in ["{}", "s1", "none", "", "none", "", "keep", "", "WEBVTT\n"] {
        invocation.arg(arg);
    }
    invocation.invoke_async(conn).await.expect("the script runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_script_tells_apart_sequences_that_a_double_cannot() {
    let mut conn = redis().await;
    let key = format!("{}:{{org}}:study:s1", unique("seq"));
    // 2^53 + 1 is stored; an outcome folded from 2^53 must not be applied over it (as doubles they are equal).
    let _: () = conn.hset(&key, "seq", "9007199254740993").await.unwrap();
    let reply = write(&mut conn, &key, "9007199254740992").await;
    assert_eq!(reply, redis::Value::BulkString(b"9007199254740993".to_vec()), "a conflict, with the stored sequence");
    let stored: String = conn.hget(&key, "seq").await.unwrap();
    assert_eq!(stored, "9007199254740993", "nothing was written");
    let applied = write(&mut conn, &key, "9007199254740993").await;
    assert_eq!(applied, redis::Value::SimpleString("APPLIED".into()));
    let _: () = conn.del(&key).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_digest_reads_a_hash_larger_than_one_reply_may_be() {
    let redis = OwnRedis::start();
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 0 };
    let target = Target::Single(redis.url());
    let mut conn = end_to_end::eventually(Duration::from_secs(10), "redis to answer", || async {
        Connection::connect(&target, settings).await.ok()
    })
    .await;
    // A client whose reply would pass 1 MB is disconnected: one HGETALL of the hash below would be 2.1 MB.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("client-output-buffer-limit")
        .arg("normal 1mb 1mb 0")
        .query_async(&mut conn)
        .await
        .unwrap();
    let keys = Keyspace::new(unique("big"), 1);
    let documents = keys.interview_documents("org");
    let value = "x".repeat(700);
    for chunk in (0..3000).collect::<Vec<_>>().chunks(500) {
        let fields: Vec<(String, &str)> = chunk.iter().map(|i| (format!("i{i:04}"), value.as_str())).collect();
        let _: () = conn.hset_multiple(&documents, &fields).await.unwrap();
    }
    let digest = runner::digest_of(&mut conn, &keys).await.expect("the digest reads the hash a page at a time");
    assert_eq!(digest.keys, 1);
    // The same content written in another order digests alike.
    let again = Keyspace::new(unique("big"), 1);
    for chunk in (0..3000).rev().collect::<Vec<_>>().chunks(700) {
        let fields: Vec<(String, &str)> = chunk.iter().map(|i| (format!("i{i:04}"), value.as_str())).collect();
        let _: () = conn.hset_multiple(again.interview_documents("org"), &fields).await.unwrap();
    }
    let other = runner::digest_of(&mut conn, &again).await.unwrap();
    assert_eq!(other.sha256, digest.sha256);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_script_writes_nothing_when_an_epoch_the_projector_wrote_is_gone() {
    let mut conn = redis().await;
    let base = format!("{}:{{org}}", unique("lost"));
    let (state, epoch, hold) = (format!("{base}:study:s1"), format!("{base}:epoch"), format!("{base}:hold"));
    let script = redis::Script::new(include_str!("../../../projector/src/store/write.lua"));
    let write = |written: &'static str, from: &'static str, as_of: &'static str| {
        let mut invocation = script.prepare_invoke();
        invocation.key(&state).key(&state).key(&state).key(&state).key(&hold).key(&epoch).arg(from).arg("1");
        for arg in ["{}", "s1", "none", "", "none", "", "keep", "", "WEBVTT\n", "token", written, "", as_of] {
            invocation.arg(arg);
        }
        invocation
    };
    // Written before by this projector, and gone now (a flush between the projector's check and this
    // write): nothing is written, and the reply says so.
    let reply: redis::Value = write("1", "0", "1700000000000000").invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, redis::Value::SimpleString("LOST".into()));
    let exists: bool = conn.exists(&state).await.unwrap();
    assert!(!exists, "nothing was written onto the loss");
    // An organization this projector never wrote: a first write.
    let reply: redis::Value = write("0", "0", "1700000000000000").invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, redis::Value::SimpleString("APPLIED".into()));
    let written: Option<String> = conn.get(&epoch).await.unwrap();
    assert_eq!(
        written.as_deref(),
        Some("token:1700000000000000"),
        "the write set the epoch it will check next time, with the latest occurredAt applied"
    );
    // A write of events older than what the organization holds keeps the latest occurredAt.
    let reply: redis::Value = write("1", "1", "1600000000000000").invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, redis::Value::SimpleString("APPLIED".into()));
    let written: Option<String> = conn.get(&epoch).await.unwrap();
    assert_eq!(written.as_deref(), Some("token:1700000000000000"));
}

/// A connection to a Redis of the test's own, as the projector makes one.
async fn connect(own: &OwnRedis) -> Connection {
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
    Connection::connect(&Target::new(&own.url(), false), settings).await.unwrap()
}

/// A guard that finds nothing the first time it looks and then loses Redis's data (a flush right after
/// the look that let a batch be written, before its states are read); afterwards it looks for real.
struct FlushedAfterTheFirstLook<'a> {
    watch: projector::Watch,
    redis: &'a OwnRedis,
    looks: usize,
}

impl projector::batch::Guard for FlushedAfterTheFirstLook<'_> {
    async fn check(&mut self, keys: &Keyspace) -> Result<(), projector::batch::Doubt> {
        self.looks += 1;
        let seen = projector::batch::Guard::check(&mut self.watch, keys).await;
        if self.looks == 1 {
            assert_eq!(self.redis.cli(&["FLUSHALL"]), "OK");
        }
        seen
    }
}

/// Applies `messages` as one batch, with `guard`.
async fn project(
    store: &mut projector::Store,
    messages: &[end_to_end::events::Outgoing],
    guard: &mut impl projector::batch::Guard,
) -> Result<(), projector::batch::Interrupted> {
    let records: Vec<projector::batch::Record<'_>> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| projector::batch::Record {
            topic: m.topic,
            topic_name: m.topic.default_name(),
            partition: 0,
            offset: i as i64,
            key: Some(m.key.as_bytes()),
            value: Some(&m.value),
            timestamp_ms: None,
        })
        .collect();
    let metrics = projector::Metrics::new(shared::Topic::ALL.map(|t| t.default_name().to_string()));
    let (_running, mut stopped) = tokio::sync::watch::channel(false);
    projector::batch::project(&records, &mut (), store, &metrics, guard, &mut stopped).await.map(|_halts| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_with_a_gap_is_not_written_onto_states_read_from_a_redis_that_lost_them_after_the_look() {
    use end_to_end::events::event;
    use end_to_end::own_redis::Persistence;
    use serde_json::json;
    use shared::Topic;
    let own = OwnRedis::with(Persistence::AofAlways);
    let conn = connect(&own).await;
    let keys = Keyspace::new(unique("gap"), 1);
    let metrics = std::sync::Arc::new(projector::Metrics::new(["s".into(), "i".into(), "k".into()]));
    let at = "2026-01-01T00:00:00Z";
    let retitled =
        |seq| event(Topic::Study, "o1", "s1", seq, "study.retitled", at, json!({"internalTitle": format!("t{seq}")}));
    let created = event(Topic::Study, "o1", "s1", 1, "study.created", at, json!({"internalTitle": "t1"}));

    // Sequences 1 to 3 applied by a projector that then stopped.
    let mut earlier = projector::Store::new(conn.clone(), keys.clone());
    let mut watch = projector::Watch::new(conn.clone(), metrics.clone());
    project(&mut earlier, &[created, retitled(2), retitled(3)], &mut watch).await.expect("applied");

    // A projector started since: sequence 5 arrives (4 is late). Redis loses everything right after the
    // look that lets the batch be written: the state read is absent, and 5 folded onto it skips 1 to 4.
    let mut store = projector::Store::new(conn.clone(), keys.clone());
    let mut guard =
        FlushedAfterTheFirstLook { watch: projector::Watch::new(conn.clone(), metrics), redis: &own, looks: 0 };
    // What this projector saw at its start, before the flush.
    let _ = projector::batch::Guard::check(&mut guard.watch, &keys).await;
    guard.looks = 0;
    let result = project(&mut store, &[retitled(5)], &mut guard).await;
    assert!(matches!(result, Err(projector::batch::Interrupted::Lost(_))), "the loss is found first: {result:?}");
    let state: Option<String> = conn.clone().hget(keys.aggregate(Topic::Study, "o1", "s1"), "seq").await.unwrap();
    assert_eq!(state, None, "nothing folded onto the lost state was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_script_writes_nothing_while_a_repair_holds_the_organization_except_for_that_repair() {
    let mut conn = redis().await;
    let base = format!("{}:{{org}}", unique("held"));
    let (state, epoch, hold) = (format!("{base}:study:s1"), format!("{base}:epoch"), format!("{base}:hold"));
    let script = redis::Script::new(include_str!("../../../projector/src/store/write.lua"));
    let write = |token: &'static str| {
        let mut invocation = script.prepare_invoke();
        invocation.key(&state).key(&state).key(&state).key(&state).key(&hold).key(&epoch).arg("0").arg("1");
        for arg in ["{}", "s1", "none", "", "none", "", "keep", "", "WEBVTT\n", "token", "0", token] {
            invocation.arg(arg);
        }
        invocation
    };
    let _: () = conn.set(&hold, "repair-1").await.unwrap();
    let reply: redis::Value = write("").invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, redis::Value::SimpleString("HELD".into()), "the live path waits for the repair");
    let exists: bool = conn.exists(&state).await.unwrap();
    assert!(!exists, "nothing was written while held");
    let reply: redis::Value = write("repair-2").invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, redis::Value::SimpleString("HELD".into()), "another repair's token opens nothing");
    let reply: redis::Value = write("repair-1").invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, redis::Value::SimpleString("APPLIED".into()), "the holder writes");
    let _: () = conn.del(&hold).await.unwrap();
    let _: () = conn.del(&state).await.unwrap();
    let reply: redis::Value = write("").invoke_async(&mut conn).await.unwrap();
    assert_eq!(reply, redis::Value::SimpleString("APPLIED".into()), "released, the live path writes again");
}

#[tokio::test]
async fn a_lease_found_lapsed_is_lost_for_good_unless_it_may_be_taken_again() {
    let mut conn = redis().await;
    for (on_lapse, taken_again) in [(OnLapse::Lost, false), (OnLapse::TakeAgain, true)] {
        let key = format!("{}:lease", unique("lease"));
        // Long enough for a renewal to come in time on a loaded machine (400 ms lapsed once in CI).
        let ttl = Duration::from_secs(3);
        let lease = Lease::try_take(&mut conn, &key, "mine", ttl, on_lapse).await.unwrap().expect("free");
        assert!(Lease::try_take(&mut conn, &key, "other", ttl, on_lapse).await.unwrap().is_none(), "held");
        // Renewed past its TTL while held.
        tokio::time::sleep(ttl * 2).await;
        assert!(lease.check(&mut conn).await.unwrap(), "{on_lapse:?}: the renewal kept it");
        // Gone, as when its holder stalled past the TTL or Redis lost it.
        let _: () = conn.del(&key).await.unwrap();
        let holder = eventually(Duration::from_secs(10), "a renewal to find it gone", || async {
            let holder: Option<String> = redis().await.get(&key).await.unwrap();
            (lease.is_lost() || holder.is_some()).then_some(holder)
        })
        .await;
        assert_eq!(holder.as_deref() == Some("mine"), taken_again, "{on_lapse:?}");
        assert_eq!(lease.check(&mut conn).await.unwrap(), taken_again, "{on_lapse:?}");
        lease.release(&mut conn).await.unwrap();
        assert!(!conn.exists::<_, bool>(&key).await.unwrap(), "released");
    }
}

/// A repair run tried again under a token of its own takes over what its failed run left, and nobody else
/// can: the failed run's token no longer holds it, so a late call of that run (its swap) finds it lost.
#[tokio::test]
async fn a_run_tried_again_takes_over_the_lease_its_failed_run_left_and_that_run_holds_it_no_more() {
    let mut conn = redis().await;
    let key = format!("{}:lease", unique("lease"));
    let ttl = Duration::from_secs(20);
    let failed = Lease::take_over(&mut conn, &key, "run-1", None, ttl, OnLapse::Lost).await.unwrap().expect("free");
    drop(failed);
    assert!(Lease::try_take(&mut conn, &key, "run-2", ttl, OnLapse::Lost).await.unwrap().is_none(), "left held");
    let stranger = Lease::take_over(&mut conn, &key, "other", Some("run-0"), ttl, OnLapse::Lost).await.unwrap();
    assert!(stranger.is_none(), "only the run that left it takes it over");
    let next = Lease::take_over(&mut conn, &key, "run-2", Some("run-1"), ttl, OnLapse::Lost).await.unwrap();
    let next = next.expect("taken over");
    assert_eq!(conn.get::<_, String>(&key).await.unwrap(), "run-2");
    let late = Lease::try_take(&mut conn, &key, "run-1", ttl, OnLapse::Lost).await.unwrap();
    assert!(late.is_none(), "the failed run's token holds it no more");
    assert!(next.check(&mut conn).await.unwrap());
    next.release(&mut conn).await.unwrap();
}

/// Two losses, the later one marked while a partition still heals from the earlier: the entry names both,
/// so the API goes on answering 503 for the earlier loss's slots (a replaced entry narrowed it to the later
/// loss's, and the organizations of the earlier one were served half healed: 401s and short lists).
#[tokio::test]
async fn a_later_loss_marked_on_a_partition_still_healing_keeps_the_earlier_losses_slots() {
    use shared::loss::Losses;
    let keys = Keyspace::new(unique("mark"), 1);
    let mut conn = redis().await;
    let partition = projector::Partition::new("t-study", 0);
    let earlier = Losses::parse("flush of 127.0.0.1:7001 (aaa 1) slots=0-5460");
    let later = Losses::parse("failover to 127.0.0.1:7002 (bbb) slots=10923-16383");
    for (target, losses) in [(10, &earlier), (20, &later), (30, &later)] {
        let healing = projector::Healing { target, losses: losses.clone() };
        let entries = std::collections::HashMap::from([(partition.clone(), healing)]);
        projector::mark_healing(&mut conn, &keys, projector::Opened::Never, &entries).await.unwrap();
    }
    let entry = &projector::healing_entries(&mut conn, &keys).await.unwrap()[&partition];
    assert_eq!(entry.target, 30, "the latest target");
    let scope = entry.losses.scope();
    assert!(scope.contains(100) && scope.contains(16000) && !scope.contains(6000), "{}", entry.losses);
    assert_eq!(entry.losses.0.len(), 2, "each loss named once: {}", entry.losses);
}

/// From layout 4 a healing hash keeps the field `opened` from its generation's start on: a mark that finds
/// it gone (its primary lost the hash, and with it the losses still healing) adds the loss of the healing
/// state, which names every slot, to what it marks, and writes the field again; the next mark adds nothing.
#[tokio::test]
async fn a_mark_that_finds_the_healing_state_lost_marks_every_slot_and_opens_it_again() {
    use shared::loss::{Loss, Losses};
    let keys = Keyspace::new(unique("mark"), 3);
    let mut conn = redis().await;
    let partition = projector::Partition::new("t-study", 0);
    let later = Losses::parse("failover to 127.0.0.1:7002 (bbb) slots=10923-16383");
    let mark = |target| {
        let healing = projector::Healing { target, losses: later.clone() };
        std::collections::HashMap::from([(partition.clone(), healing)])
    };
    projector::mark_healing(&mut conn, &keys, projector::Opened::Kept, &mark(10)).await.unwrap();
    let entry = &projector::healing_entries(&mut conn, &keys).await.unwrap()[&partition];
    assert!(entry.losses.0.contains(&Loss::HealingLost { generation: 3 }), "{}", entry.losses);
    assert!(entry.losses.scope().is_everything(), "{}", entry.losses);
    let opened: Option<String> =
        redis::cmd("HGET").arg(keys.healing()).arg(shared::keys::HEALING_OPENED).query_async(&mut conn).await.unwrap();
    assert_eq!(opened.as_deref(), Some("1"), "the field is written again");

    // Cleared, and marked again with the field in place: only the later loss.
    let _: () = redis::cmd("HDEL").arg(keys.healing()).arg(partition.to_string()).query_async(&mut conn).await.unwrap();
    projector::mark_healing(&mut conn, &keys, projector::Opened::Kept, &mark(20)).await.unwrap();
    let entry = &projector::healing_entries(&mut conn, &keys).await.unwrap()[&partition];
    assert_eq!(entry.losses, later, "nothing added while the field is there");
    // A generation of an earlier layout never gets the field.
    let old = Keyspace::new(unique("mark"), 1);
    projector::mark_healing(&mut conn, &old, projector::Opened::Never, &mark(10)).await.unwrap();
    let fields: Vec<String> = redis::cmd("HKEYS").arg(old.healing()).query_async(&mut conn).await.unwrap();
    assert_eq!(fields, vec![partition.to_string()], "an old API would read the field as an entry");
}

/// Two projectors mark losses at once (a soak found it: the healing state's primary flushed while one
/// partition's heal was still running). The first marks the whole generation incomplete with the loss of
/// the healing state, which names every slot, and is still asking the broker for the partitions' ends; the
/// second marks its own loss on every partition and ends the whole generation's entry. The first one's loss
/// must stay on every partition: dropped, the organizations it was healing are served short.
#[tokio::test]
async fn a_loss_another_projector_marked_on_the_whole_generation_stays_when_this_one_ends_that_entry() {
    use shared::loss::{Loss, Losses};
    let keys = Keyspace::new(unique("mark"), 4);
    let mut conn = redis().await;
    let partitions = [projector::Partition::new("t-study", 0), projector::Partition::new("t-interview", 1)];
    let first = Losses::one(Loss::HealingLost { generation: 4 });
    let second = Losses::parse("flush of 127.0.0.1:7001 (aaa 3) slots=0-5460");
    let opened = projector::Opened::Kept;
    projector::mark_incomplete(&mut conn, &keys, opened, &first).await.unwrap();
    projector::mark_incomplete(&mut conn, &keys, opened, &second).await.unwrap();
    let entries =
        partitions.iter().map(|p| (p.clone(), projector::Healing { target: 10, losses: second.clone() })).collect();
    projector::mark_healing(&mut conn, &keys, opened, &entries).await.unwrap();
    projector::end_incomplete(&mut conn, &keys).await.unwrap();

    let held = projector::healing_entries(&mut conn, &keys).await.unwrap();
    for partition in &partitions {
        let entry = &held[partition];
        assert!(entry.losses.scope().is_everything(), "{partition} heals only {}", entry.losses);
        assert_eq!(entry.target, 10, "{partition}'s target");
    }
    let fields: usize = redis::cmd("HLEN").arg(keys.healing()).query_async(&mut conn).await.unwrap();
    assert_eq!(fields, partitions.len() + 1, "the partitions' entries and `opened`: the whole one ended");
}
