//! `projector generations`: a generation left behind (a switch whose old generation a rebuild could not
//! delete) is listed, shown by `status`, and deleted on an operator's word; the active one never is.

use std::time::Duration;

use end_to_end::{eventually, redis, runner, unique};
use redis::AsyncCommands;
use serde_json::{json, Value};
use shared::Keyspace;

const DEADLINE: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_left_behind_is_listed_and_deleted_on_request_and_an_active_rebuilding_or_written_one_is_refused()
{
    let runner::Built { topics, prefix, group, total, .. } = runner::dataset_built("left").await;

    // Generation 2 built beside it and switched to, as a rebuild does; generation 1 stays, as when the
    // rebuild could not delete it.
    let mut conn = redis().await;
    let _: () = conn.set(Keyspace::generation_counter(&prefix), 2).await.unwrap();
    let mut second = runner::config(&topics, &prefix, &unique("g"));
    second.generation = Some(2);
    runner::build(second, total, DEADLINE).await;
    let _: () = conn.set(Keyspace::active_generation(&prefix), 2).await.unwrap();
    let (first, active) = (Keyspace::new(prefix.clone(), 1), Keyspace::new(prefix.clone(), 2));
    let digest = runner::digest(&active).await;

    let listed = |extra: &'static [&'static str]| {
        let (topics, prefix, group) = (topics.clone(), prefix.clone(), group.clone());
        async move { runner::succeed(&topics, &prefix, &group, extra, DEADLINE).await }
    };
    let list: Value = serde_json::from_str(&listed(&["generations", "-o", "json"]).await).unwrap();
    let expected = json!([{"generation": 1, "role": "leftBehind"}, {"generation": 2, "role": "active"}]);
    assert_eq!(list, expected);
    let (_, status) = runner::status_of(&topics, &prefix, &group, &["-o", "json"], DEADLINE).await;
    assert_eq!(serde_json::from_str::<Value>(&status).unwrap()["leftBehind"], json!([1]));

    // The active generation is refused, and keeps every key.
    let refusal =
        runner::output_within(runner::command(&topics, &prefix, &group, &["generations", "--delete", "2"]), DEADLINE);
    let said = String::from_utf8_lossy(&refusal.stderr);
    assert!(!refusal.status.success() && said.contains("generation 2 is active"), "{said}");
    assert_eq!(runner::digest(&active).await, digest);

    // Nor is one an interrupted rebuild would resume.
    let _: () = conn.hset(Keyspace::rebuild(&prefix), "generation", 1).await.unwrap();
    let refusal =
        runner::output_within(runner::command(&topics, &prefix, &group, &["generations", "--delete", "1"]), DEADLINE);
    let said = String::from_utf8_lossy(&refusal.stderr);
    assert!(!refusal.status.success() && said.contains("generation 1 is being rebuilt"), "{said}");
    let _: () = conn.del(Keyspace::rebuild(&prefix)).await.unwrap();

    // Nor one a live projector still writes (one that has not followed the switch yet; here, pinned to it).
    let mut pinned = runner::config(&topics, &prefix, &unique("g"));
    pinned.generation = Some(1);
    let writer = runner::spawn(pinned).await;
    let writes_first = || async { runner::instances(&conn, &prefix).await.iter().any(|(_, _, g)| *g == 1) };
    eventually(DEADLINE, "the pinned projector to report itself", || async { writes_first().await.then_some(()) })
        .await;
    let list: Value = serde_json::from_str(&listed(&["generations", "-o", "json"]).await).unwrap();
    let expected = json!([{"generation": 1, "role": "written"}, {"generation": 2, "role": "active"}]);
    assert_eq!(list, expected);
    let refusal =
        runner::output_within(runner::command(&topics, &prefix, &group, &["generations", "--delete", "1"]), DEADLINE);
    let said = String::from_utf8_lossy(&refusal.stderr);
    assert!(!refusal.status.success() && said.contains("generation 1 is written by a live projector"), "{said}");
    writer.stop().await;
    eventually(DEADLINE, "the pinned projector to leave", || async { (!writes_first().await).then_some(()) }).await;

    // With the active pointer lost (its primary flushed), the served generation reads as left behind: no
    // generation is deleted until a projector's start puts the pointer back.
    let _: () = conn.del(Keyspace::active_generation(&prefix)).await.unwrap();
    let refusal =
        runner::output_within(runner::command(&topics, &prefix, &group, &["generations", "--delete", "2"]), DEADLINE);
    let said = String::from_utf8_lossy(&refusal.stderr);
    assert!(!refusal.status.success() && said.contains("pointer"), "{said}");
    assert_eq!(runner::digest(&active).await, digest, "the served generation keeps every key");
    let _: () = conn.set(Keyspace::active_generation(&prefix), 2).await.unwrap();

    // The one left behind goes, its meta included, and the active one is as it was.
    let deleted = listed(&["generations", "--delete", "1"]).await;
    assert!(deleted.starts_with("deleted generation 1 ("), "{deleted}");
    assert_eq!(runner::generation_keys(&mut conn, &first).await, Vec::<String>::new());
    assert_eq!(listed(&["generations"]).await, "generation 2: active\n");
    assert_eq!(runner::digest(&active).await, digest);
    let (_, status) = runner::status_of(&topics, &prefix, &group, &[], DEADLINE).await;
    assert!(status.contains("generations left behind: none"), "{status}");
}

/// A rebuild builds generation 2 and its state (`P:rebuild`) is lost, as a flush of its primary loses it:
/// the generation then reads as left behind, but the rebuild's lock says one runs, and the deletion is
/// refused. Without a running rebuild, it goes once no rebuild could have taken the lock again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generation_whose_rebuild_lost_its_state_is_not_deleted_while_the_rebuild_runs() {
    let runner::Built { topics, prefix, group, config, .. } = runner::dataset_built("left").await;
    // A rebuild that never hands over: it builds generation 2, then waits.
    let rebuild = tokio::spawn(runner::rebuild_handing_over_at(config, -1));
    let (second, mut conn) = (Keyspace::new(prefix.clone(), 2), redis().await);
    eventually(DEADLINE, "the rebuild to write generation 2", || async {
        (!runner::generation_keys(&mut conn.clone(), &second).await.is_empty()).then_some(())
    })
    .await;
    let _: () = conn.del(Keyspace::rebuild(&prefix)).await.unwrap();

    let refusal =
        runner::output_within(runner::command(&topics, &prefix, &group, &["generations", "--delete", "2"]), DEADLINE);
    let said = String::from_utf8_lossy(&refusal.stderr);
    assert!(!refusal.status.success() && said.contains("may be the one a running rebuild writes"), "{said}");
    assert!(!runner::generation_keys(&mut conn, &second).await.is_empty(), "generation 2 keeps its keys");

    rebuild.abort();
    eventually(DEADLINE, "the dead rebuild's lock to expire", || async {
        (!conn.clone().exists::<_, bool>(Keyspace::rebuild_lock(&prefix)).await.ok()?).then_some(())
    })
    .await;
    let deleted = runner::succeed(&topics, &prefix, &group, &["generations", "--delete", "2"], DEADLINE).await;
    assert!(deleted.starts_with("deleted generation 2 ("), "{deleted}");
}
