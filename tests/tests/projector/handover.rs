//! A rebuild's handover when the live projectors' commits never reached the broker: the rebuild catches
//! up with what they applied to the read model, not only with what their group committed, so that the
//! generation it switches to never holds less than the one they leave.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use end_to_end::kafka::Topics;
use end_to_end::mock_kafka::MockKafka;
use end_to_end::scenario::Scenario;
use end_to_end::{eventually, kafka, metrics, runner, unique};
use redis::AsyncCommands;
use shared::connection::Connection;
use shared::task::AbortOnDrop;
use shared::Keyspace;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rebuild_catches_up_with_what_the_live_projectors_applied_even_when_the_broker_refused_their_commits() {
    let kafka = MockKafka::start();
    let topics = kafka.topics();
    let scenario = Scenario::generate(0x5eed_0a11, 4, 20, 8);
    let total = scenario.messages.len() as u64;
    let (first, second) = scenario.messages.split_at(scenario.messages.len() / 2);
    let producer = kafka::producer_on(kafka.client());
    kafka::publish(&producer, &topics, first).await;
    let (prefix, group) = (unique("rm"), unique("g"));

    // The broker refuses every commit: the live group's committed offsets stay at nothing, while the live
    // projector applies every event.
    kafka.refuse_commits(1_000_000);
    let live = runner::spawn(kafka.config(&topics, &prefix, &group, &[])).await;
    live.wait_until_consumed(first.len() as u64, Duration::from_secs(120)).await;

    // A rebuild that hands over as soon as it starts, while the second half arrives in small parts: the
    // live projector applies batches until the moment it pauses, and what it applied is all the rebuild
    // has to go by.
    let publishing = {
        let (producer, topics, second) = (producer.clone(), topics.clone(), second.to_vec());
        tokio::spawn(async move {
            for part in second.chunks(40) {
                kafka::publish(&producer, &topics, part).await;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let started = Instant::now();
    let config = kafka.config(&topics, &prefix, &group, &[]);
    let (switched, notices) = runner::rebuild_handing_over_at(config, i64::MAX).await;
    assert_eq!(switched.expect("the rebuild switches"), Some(2), "{notices:#?}");
    println!("{total} events; switched {:?} after the rebuild started", started.elapsed());
    let conn = end_to_end::redis().await;
    eventually(Duration::from_secs(10), "the live projector to follow the switch", || async {
        (runner::instances(&conn, &prefix).await.iter().all(|(_, _, generation)| *generation == 2)).then_some(())
    })
    .await;
    let losses = metrics::sample(&live.metrics_text(), "projector_redis_losses_total", &[]);
    assert_eq!(losses, 0.0, "the live projector found generation 2 holding less than it had applied");
    publishing.await.expect("published");
    live.wait_until_consumed(total, Duration::from_secs(120)).await;
    let digest = runner::digest(&Keyspace::new(prefix.clone(), 2)).await;
    live.stop().await;

    let scratch = Keyspace::new(unique("scratch"), 1);
    runner::build(kafka.config(&topics, scratch.prefix(), &unique("g"), &[]), total, Duration::from_secs(120)).await;
    assert_eq!(digest, runner::digest(&scratch).await, "generation 2 is every event's read model when switched to");
}

/// A live projector asked to pause while events keep coming records what it applied, its last batch
/// included, as its generation's positions before it reports itself paused: those positions are what a
/// rebuild catches up with when the group's commits fall short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_projector_records_all_it_applied_before_it_reports_itself_paused() {
    let scenario = Scenario::generate(0x5eed_0a12, 4, 20, 8);
    let topics = Topics::create().await;
    let (prefix, group) = (unique("rm"), unique("g"));
    let live = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    let publishing = {
        let (topics, messages) = (topics.clone(), scenario.messages.clone());
        AbortOnDrop::spawn(async move {
            let producer = kafka::producer();
            for part in messages.chunks(10) {
                kafka::publish(&producer, &topics, part).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    live.wait_until_consumed(500, Duration::from_secs(60)).await;

    // A rebuild of generation 2 enters its handover, as a rebuild writes it: its state and its lock.
    let mut conn = end_to_end::redis().await;
    let state = [("generation", "2"), ("group", group.as_str()), ("phase", "handover")];
    let _: () = conn.hset_multiple(Keyspace::rebuild(&prefix), &state).await.unwrap();
    let _: () = conn.set_ex(Keyspace::rebuild_lock(&prefix), "a rebuild", 60).await.unwrap();
    eventually(Duration::from_secs(10), "the live projector to report itself paused", || async {
        let reports: HashMap<String, String> = conn.clone().hgetall(Keyspace::projectors(&prefix)).await.ok()?;
        let paused = reports.values().filter_map(|json| serde_json::from_str::<projector::Instance>(json).ok());
        paused.map(|report| report.paused).reduce(|a, b| a && b).unwrap_or(false).then_some(())
    })
    .await;
    let consumed = live.consumed();
    assert!(consumed < scenario.messages.len() as u64, "events were still coming when it paused");
    let recorded = recorded_positions(&mut conn, &Keyspace::new(prefix.clone(), 1)).await;
    assert_eq!(recorded, consumed, "the positions recorded add up to every message it consumed");
    drop(publishing);
    live.stop().await;
}

/// The positions a generation holds, added up over the partitions (each the lowest any primary holds).
async fn recorded_positions(conn: &mut Connection, keys: &Keyspace) -> u64 {
    let mut lowest: HashMap<String, u64> = HashMap::new();
    for key in runner::generation_keys(conn, keys).await.into_iter().filter(|key| keys.is_position(key)) {
        let fields: HashMap<String, String> = conn.hgetall(&key).await.unwrap();
        for (field, value) in fields {
            if let Ok(position) = value.parse::<u64>() {
                if field.contains('/') {
                    let entry = lowest.entry(field).or_insert(position);
                    *entry = (*entry).min(position);
                }
            }
        }
    }
    lowest.values().sum()
}

/// A rebuild's lock can lapse between its last check and its switch, and a rebuild that took the lock
/// meanwhile may have switched further (made here by putting the pointer past the rebuild's generation as
/// it starts building). The late switch leaves the pointer where it is, ends with a message saying so,
/// and deletes nothing: moving the pointer back would serve an older read model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuild_whose_generation_was_switched_past_never_moves_the_active_generation_back() {
    let runner::Built { prefix, config, .. } = runner::dataset_built("rm").await;
    let pointer = Keyspace::active_generation(&prefix);
    let options = runner::rebuild_options(0, Duration::from_secs(30));
    let (_keep_running, running) = tokio::sync::watch::channel(false);
    let notify = |notice: projector::RebuildNotice| {
        if let projector::RebuildNotice::Building { generation, .. } = notice {
            let past = generation + 1;
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    let _: () = end_to_end::redis().await.set(&pointer, past).await.unwrap();
                })
            });
        }
    };
    let result = projector::rebuild(config, options, running, &notify).await;

    let mut conn = end_to_end::redis().await;
    assert_eq!(conn.get::<_, u64>(&pointer).await.unwrap(), 3, "the pointer stays where the other switch put it");
    assert!(matches!(result, Err(projector::Error::SwitchedPast { generation: 2 })), "{result:?}");
    let first = Keyspace::new(prefix.clone(), 1);
    assert!(!runner::generation_keys(&mut conn, &first).await.is_empty(), "nothing was deleted");
    assert!(!conn.exists::<_, bool>(Keyspace::rebuild(&prefix)).await.unwrap(), "the rebuild's state is gone");
}

/// The live projectors' reports lost (their primary flushed) while a live projector is stalled (frozen
/// here) as a rebuild hands over: a missing report is no evidence that nobody runs. The rebuild does not
/// switch while the stalled projector, unpaused, still has the time every live projector has to report
/// again; once it goes on, it sees the handover, pauses, and the switch follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_that_finds_the_reports_lost_does_not_take_their_absence_for_nobody() {
    let runner::Built { topics, prefix, group, config, .. } = runner::dataset_built("rm").await;
    let mut command = std::process::Command::new(runner::binary());
    command.args(runner::args(&topics, &prefix, &group)).env("RUST_LOG", "warn");
    let live = runner::KillOnDrop(command.stdout(std::process::Stdio::null()).spawn().expect("projector starts"));
    let (projectors, pointer) = (Keyspace::projectors(&prefix), Keyspace::active_generation(&prefix));
    let mut conn = end_to_end::redis().await;
    eventually(Duration::from_secs(30), "the live projector to report itself", || async {
        let reports: HashMap<String, String> = conn.clone().hgetall(&projectors).await.ok()?;
        reports.values().any(|json| serde_json::from_str::<projector::Instance>(json).is_ok()).then_some(())
    })
    .await;

    let options = runner::rebuild_options(0, Duration::from_secs(60));
    let (_keep_running, running) = tokio::sync::watch::channel(false);
    let notify = |notice: projector::RebuildNotice| {
        if let projector::RebuildNotice::Building { .. } = notice {
            live.freeze();
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(async {
                    let _: () = end_to_end::redis().await.del(&projectors).await.unwrap();
                })
            });
        }
    };
    let observed = async {
        eventually(Duration::from_secs(60), "the rebuild to hand over", || async {
            let phase: Option<String> = conn.clone().hget(Keyspace::rebuild(&prefix), "phase").await.ok()?;
            (phase.as_deref() == Some("handover")).then_some(())
        })
        .await;
        // Two seconds of the stalled projector's five: the rebuild must not switch meanwhile.
        let watched = Instant::now();
        let mut switched = None;
        while watched.elapsed() < Duration::from_secs(2) && switched.is_none() {
            let active: u64 = conn.clone().get(&pointer).await.unwrap();
            switched = (active != 1).then(|| watched.elapsed());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        live.thaw();
        switched
    };
    let (result, switched) = tokio::join!(projector::rebuild(config, options, running, &notify), observed);
    assert_eq!(switched, None, "switched while a live projector had not paused and could still report");
    assert_eq!(result.expect("the rebuild switches once the projector paused"), Some(2));
    assert_eq!(conn.get::<_, u64>(&pointer).await.unwrap(), 2);
}

/// Runs `switch` once, after the `after`-th command a reader sends: a real connection, with another
/// writer's commands landing between two of the reader's.
struct SwitchBetween {
    inner: Connection,
    after: usize,
    sent: usize,
    switch: Option<Vec<redis::Cmd>>,
}

impl redis::aio::ConnectionLike for SwitchBetween {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let reply = self.inner.req_packed_command(cmd).await?;
            self.sent += 1;
            if self.sent == self.after {
                // One command per key: the keys may sit on different primaries of a cluster.
                for command in self.switch.take().into_iter().flatten() {
                    let () = command.query_async(&mut self.inner).await?;
                }
            }
            Ok(reply)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        self.inner.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test]
async fn a_switch_landing_between_the_reads_of_the_control_keys_never_reads_as_a_handover_ended_without_one() {
    // A paused live projector reads the rebuild's phase and the active pointer in several commands. The
    // rebuild switches (pointer to 2) and then ends (its state and lock go) between any two of them: what
    // is read must be the handover still on, or the switch; "pointer at 1, no handover" would resume the
    // projector on the old generation, which then finds the new one short and marks a loss.
    let conn = end_to_end::redis().await;
    for after in 1..=3 {
        let prefix = unique("rm");
        let (pointer, rebuild, lock) =
            (Keyspace::active_generation(&prefix), Keyspace::rebuild(&prefix), Keyspace::rebuild_lock(&prefix));
        let _: () = conn.clone().set(&pointer, 1).await.unwrap();
        let _: () = conn.clone().hset_multiple(&rebuild, &[("generation", "2"), ("phase", "handover")]).await.unwrap();
        let _: () = conn.clone().set(&lock, "token").await.unwrap();
        let switch = vec![redis::Cmd::set(&pointer, 2), redis::Cmd::del(&rebuild), redis::Cmd::del(&lock)];
        let mut reader = SwitchBetween { inner: conn.clone(), after, sent: 0, switch: Some(switch) };
        let signals = projector::control_signals(&mut reader, &prefix).await.unwrap();
        assert!(reader.switch.is_none(), "the switch landed after command {after}");
        assert!(
            signals.active == Some(2) || signals.handover == Some(2),
            "with the switch after command {after}, read {signals:?}: a handover ended without a switch"
        );
    }
}

/// A rebuild resumed after its generation lost its data and positions, whose group committed the ends of
/// the topics before the loss, catches up with the live projectors by what it applies, never by those
/// offsets: here the broker refuses every commit of the resumed rebuild, so its group's offsets stay at
/// the ends, and the switch is still to a generation equal to a build from scratch. Red while the
/// handover counted the rebuild's committed offsets as applied (it switched having applied nothing of the
/// partitions it had not read yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_rebuild_catches_up_by_what_it_applied_never_by_offsets_its_group_committed_before_a_loss() {
    let kafka = MockKafka::start();
    let topics = kafka.topics();
    let scenario = Scenario::generate(0x5eed_0a13, 12, 30, 6);
    let total = scenario.messages.len() as u64;
    kafka::publish(&kafka::producer_on(kafka.client()), &topics, &scenario.messages).await;
    let (prefix, group) = (unique("rm"), unique("g"));
    let live = runner::spawn(kafka.config(&topics, &prefix, &group, &[])).await;
    live.wait_until_consumed(total, Duration::from_secs(120)).await;

    // The interrupted rebuild of generation 2: its state and meta, and its group's offsets at the ends of
    // the topics, as when it had read everything before its generation's data was lost.
    let rebuild_group = format!("{group}-rebuild-g2");
    let building = runner::interrupted_rebuild(&prefix, 2, &rebuild_group).await;
    let conn = end_to_end::redis().await;
    kafka::reset_offsets(kafka.client(), &topics, &rebuild_group, true);
    kafka.refuse_commits(1_000_000);

    let config = kafka.config(&topics, &prefix, &group, &[]);
    let (switched, notices) = runner::rebuild_handing_over_at(config, i64::MAX).await;
    assert_eq!(switched.expect("the rebuild switches"), Some(2), "{notices:#?}");
    // The digest the switch printed: the generation as it was switched to, before anyone else wrote it.
    let at_switch = notices.iter().find_map(|n| n.strip_prefix("switched to generation 2 (was 1); digest "));
    let at_switch = at_switch.expect("the switch's digest").to_string();
    eventually(Duration::from_secs(10), "the live projector to follow the switch", || async {
        (runner::instances(&conn, &prefix).await.iter().all(|(_, _, generation)| *generation == 2)).then_some(())
    })
    .await;
    let losses = metrics::sample(&live.metrics_text(), "projector_redis_losses_total", &[]);
    live.stop().await;
    assert_eq!(losses, 0.0, "the live projector found generation 2 holding less than it had applied");

    let scratch = Keyspace::new(unique("scratch"), 1);
    runner::build(kafka.config(&topics, scratch.prefix(), &unique("g"), &[]), total, Duration::from_secs(120)).await;
    assert_eq!(at_switch, runner::digest(&scratch).await, "generation 2 is every event's read model when switched to");
    assert_eq!(runner::digest(&building).await, at_switch);
}
