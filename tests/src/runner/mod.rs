//! Running the projector for a test: in-process through its library, or as the real binary
//! ([`process`]). Every call the tests make into the projector crate is here, so a change of its API
//! is met in this one module.

mod process;

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
pub use projector::Outcome;
use projector::{Config, Counts, Metrics, Projector};
use shared::connection::Connection;
use shared::Keyspace;
use tokio::sync::watch;

pub use process::{binary, command, output_within, spawn_process, status_of, succeed, KillOnDrop};

use crate::kafka::Topics;
use crate::{env, unique};

/// The projector's arguments for a test's topics, key prefix and consumer group.
pub fn args(topics: &Topics, prefix: &str, group: &str) -> Vec<String> {
    args_on(&env("KAFKA_BROKERS"), topics, prefix, group)
}

/// [`args`] on the brokers `brokers` rather than the stack's.
pub fn args_on(brokers: &str, topics: &Topics, prefix: &str, group: &str) -> Vec<String> {
    let pairs = [
        ("--brokers", brokers.to_string()),
        ("--redis-url", env("REDIS_URL")),
        ("--group-id", group.to_string()),
        ("--study-topic", topics.study.clone()),
        ("--interview-topic", topics.interview.clone()),
        ("--api-key-topic", topics.api_key.clone()),
        ("--key-prefix", prefix.to_string()),
        ("--batch-linger-ms", "5".to_string()),
        ("--http-addr", "off".to_string()),
    ];
    pairs.into_iter().flat_map(|(k, v)| [k.to_string(), v]).collect()
}

pub fn config(topics: &Topics, prefix: &str, group: &str) -> Config {
    Config::parse_from(std::iter::once("projector".to_string()).chain(args(topics, prefix, group)))
}

/// A projector running in this process.
pub struct Running {
    /// Where its /metrics, /livez and /readyz answer, when its configuration asked for them.
    pub http: Option<std::net::SocketAddr>,
    prefix: String,
    group: String,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), projector::Error>>,
    metrics: Arc<Metrics>,
}

/// The projector's totals as the tests read them: `applied` counts every event applied, gaps included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub applied: u64,
    pub gaps: u64,
    pub duplicates: u64,
    pub refused: u64,
    pub skipped: u64,
    pub dead_lettered: u64,
    pub retries: u64,
}

impl From<Counts> for Snapshot {
    fn from(c: Counts) -> Self {
        Snapshot {
            applied: c.of(Outcome::Applied) + c.of(Outcome::Gap),
            gaps: c.of(Outcome::Gap),
            duplicates: c.of(Outcome::Duplicate),
            refused: c.of(Outcome::Refused),
            skipped: c.of(Outcome::Skipped),
            dead_lettered: c.of(Outcome::DeadLettered),
            retries: c.retries,
        }
    }
}

pub async fn spawn(config: Config) -> Running {
    spawn_then(config, async {}).await
}

/// [`spawn`], doing `meanwhile` once the projector has started (its start's check made, a new read model
/// marked) and before it projects anything: what happens between a start and its first look.
pub async fn spawn_then(config: Config, meanwhile: impl std::future::Future<Output = ()>) -> Running {
    crate::test_log();
    let (prefix, group) = (config.redis.key_prefix.clone(), config.group_id.clone());
    let (stop, stopped) = watch::channel(false);
    let projector =
        Projector::connect(config, stopped.clone()).await.expect("projector connects").expect("not stopped");
    meanwhile.await;
    let metrics = projector.metrics();
    let http = projector.serve_http(Default::default()).await;
    let task = tokio::spawn(projector.run_live(stopped));
    Running { http, prefix, group, stop, task, metrics }
}

/// A projector of a test's own on `topics` (a fresh key prefix and consumer group), once it consumed
/// `total` messages.
pub async fn spawn_caught_up(topics: &Topics, total: u64, timeout: Duration) -> Running {
    let running = spawn(config(topics, &unique("rm"), &unique("g"))).await;
    running.wait_until_consumed(total, timeout).await;
    running
}

/// Runs a projector of `config` as its binary does, until it stops by itself: for one that must refuse
/// to start.
pub async fn run(config: Config) -> Result<(), projector::Error> {
    projector::run(config, std::future::pending()).await
}

/// The fixture's dataset on topics of its own, built into generation 1 under a prefix of its own
/// (`label` and a unique tail) by a projector of a group of its own.
pub struct Built {
    pub topics: Topics,
    pub prefix: String,
    pub group: String,
    /// The configuration that built it.
    pub config: Config,
    /// How many events the dataset holds.
    pub total: u64,
}

/// Builds [`Built`]: a minute at most.
pub async fn dataset_built(label: &str) -> Built {
    let messages = crate::fixture::dataset();
    let topics = Topics::holding(&messages).await;
    let (prefix, group, total) = (unique(label), unique("g"), messages.len() as u64);
    let config = config(&topics, &prefix, &group);
    build(config.clone(), total, Duration::from_secs(60)).await;
    Built { topics, prefix, group, config, total }
}

/// Runs a projector of `config` until it consumed `total` messages, then stops it.
pub async fn build(config: Config, total: u64, timeout: Duration) {
    let running = spawn(config).await;
    running.wait_until_consumed(total, timeout).await;
    running.stop().await;
}

/// Waits until the projectors together consumed at least `total` messages and none heals, or fails the
/// test after `timeout`.
pub async fn wait_until_consumed(projectors: &[&Running], total: u64, timeout: Duration) {
    let what = format!("{total} messages consumed and the read model complete");
    crate::eventually_showing(timeout, &what, || async {
        let healing = projectors
            .iter()
            .map(|running| crate::metrics::sample(&running.metrics_text(), "projector_healing_partitions", &[]))
            .sum::<f64>();
        let consumed = projectors.iter().map(|running| running.consumed()).sum::<u64>();
        let behind = projectors
            .iter()
            .map(|running| crate::metrics::sample(&running.metrics_text(), "projector_lag_messages", &[]))
            .sum::<f64>();
        if consumed >= total && healing == 0.0 {
            return Ok(());
        }
        // A partition held has a lag gauge: none held says the group (or the membership) gave nothing yet.
        let texts: Vec<String> = projectors.iter().map(|running| running.metrics_text()).collect();
        let held: usize =
            texts.iter().map(|t| t.lines().filter(|l| l.starts_with("projector_lag_messages{")).count()).sum();
        let errors: Vec<&str> =
            texts.iter().flat_map(|t| t.lines().filter(|l| l.starts_with("projector_kafka_errors_total{"))).collect();
        Err(format!(
            "{consumed} consumed, {healing} partitions healing, {behind} messages behind, {held} partitions held, \
             Kafka errors {errors:?}"
        ))
    })
    .await
}

impl Running {
    /// Whether the projector's task ended (it stops only when told, or on an error it could not ride out).
    pub fn has_ended(&self) -> bool {
        self.task.is_finished()
    }

    /// The key prefix it writes under.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Its consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Messages consumed so far, whatever became of them.
    pub fn consumed(&self) -> u64 {
        self.counts().consumed()
    }

    /// Waits until at least `total` messages were consumed, or fails the test after `timeout`.
    pub async fn wait_until_consumed(&self, total: u64, timeout: Duration) {
        wait_until_consumed(&[self], total, timeout).await
    }

    /// The projector's totals by outcome.
    pub fn counts(&self) -> Counts {
        self.metrics.counts()
    }

    /// Its Prometheus exposition, as `/metrics` serves it.
    pub fn metrics_text(&self) -> String {
        self.metrics.render()
    }

    pub fn snapshot(&self) -> Snapshot {
        self.counts().into()
    }

    /// Waits for the projector to end by itself (it was not told to stop): how it ended.
    pub async fn ended(self) -> Result<(), projector::Error> {
        self.task.await.expect("projector task")
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("projector task").expect("projector ends cleanly");
    }

    /// [`Running::stop`] for a projector that stays where it is (a [`crate::api::World`]'s): it consumes
    /// nothing more. Stopping it again afterwards is a mistake of the test's.
    pub async fn halt(&mut self) {
        let _ = self.stop.send(true);
        (&mut self.task).await.expect("projector task").expect("projector ends cleanly");
    }

    /// [`Running::stop`], failing the test if the projector has not stopped within `timeout`.
    pub async fn stop_within(self, timeout: Duration) {
        let _ = self.stop.send(true);
        let ended = tokio::time::timeout(timeout, self.task).await;
        ended
            .unwrap_or_else(|_| panic!("the projector did not stop within {timeout:?}"))
            .expect("projector task")
            .expect("projector ends cleanly");
    }
}

/// The read model of `topics` built from scratch, under a prefix of its own, by a projector of its own:
/// the reference a run with faults must end identical to. Returns that build's keys once `total`
/// messages were consumed.
pub async fn build_from_scratch(topics: &Topics, total: u64) -> Keyspace {
    let keys = Keyspace::new(unique("scratch"), 1);
    build(config(topics, keys.prefix(), &unique("g")), total, Duration::from_secs(120)).await;
    keys
}

/// A rebuild run in this process, as a test runs it: the old generation deleted a second after the
/// switch, the handover at lag 0 within 30 s, no waiting for another rebuild's lock; notices printed.
/// Returns the generation switched to.
pub async fn rebuild(config: Config) -> Result<Option<u64>, projector::Error> {
    rebuild_noting(config).await.0
}

/// [`rebuild`], also returning every notice it gave, as printed.
pub async fn rebuild_noting(config: Config) -> (Result<Option<u64>, projector::Error>, Vec<String>) {
    rebuild_handing_over_at(config, 0).await
}

/// A test's rebuild options: the old generation deleted a second after the switch, no wait for another
/// rebuild's lock, handing over within `lag` messages of the ends and giving up on it after `timeout`.
pub fn rebuild_options(lag: i64, timeout: Duration) -> projector::RebuildOptions {
    projector::RebuildOptions {
        grace: Duration::from_secs(1),
        handover_lag: lag,
        handover_timeout: timeout,
        lock_wait: Duration::ZERO,
    }
}

/// [`rebuild_noting`], handing over once within `lag` messages of the end of every partition.
pub async fn rebuild_handing_over_at(config: Config, lag: i64) -> (Result<Option<u64>, projector::Error>, Vec<String>) {
    let notices = std::sync::Mutex::new(Vec::new());
    let options = rebuild_options(lag, Duration::from_secs(30));
    let (_keep_running, running) = watch::channel(false);
    let result = projector::rebuild(config, options, running, &|notice| {
        println!("{notice}");
        notices.lock().unwrap().push(notice.to_string());
    })
    .await;
    (result, notices.into_inner().unwrap())
}

/// The digest of a generation on the stack's Redis, as `projector digest` prints it.
pub async fn digest(keys: &Keyspace) -> String {
    digest_of(&mut crate::redis().await, keys).await.expect("digest").to_string()
}

/// The digest of a generation read through `conn`.
pub async fn digest_of(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<projector::Digest> {
    projector::Digest::of(conn, keys).await
}

/// The names of a generation's keys.
pub async fn generation_keys(conn: &mut Connection, keys: &Keyspace) -> Vec<String> {
    projector::generation_keys(conn, keys).await.expect("generation keys")
}

/// Deletes a generation's keys, as a rebuild does after its grace period.
pub async fn delete_generation(conn: &mut Connection, keys: &Keyspace) {
    projector::delete_generation(conn, keys).await.expect("generation deleted");
}

/// Deletes a generation's keys as a rebuild does after its switch: a batch of 500 at a time, while `deletes`
/// allows the active pointer read before each batch. The pointer it stopped at, if it stopped.
pub async fn delete_generation_while(
    conn: &mut Connection,
    keys: &Keyspace,
    deletes: impl Fn(Option<u64>) -> bool,
) -> Result<usize, Option<u64>> {
    projector::delete_generation_while(conn, keys, deletes).await.expect("generation deleted")
}

/// The live projectors registered under a prefix, as (instance id, partitions, generation), sorted.
pub async fn instances(conn: &Connection, prefix: &str) -> Vec<(String, usize, u64)> {
    let live = projector::live_instances(&mut conn.clone(), prefix).await.expect("instances");
    let mut all: Vec<_> = live.into_iter().map(|(id, i)| (id, i.partitions, i.generation)).collect();
    all.sort();
    all
}

/// The digest of one organization's slot in a generation on the stack's Redis.
pub async fn organization_digest(keys: &Keyspace, org: &str) -> String {
    projector::Digest::of_organization(&mut crate::redis().await, keys, org).await.expect("digest").to_string()
}

/// A repair run in this process, as `projector repair` runs it (without its progress bar).
pub async fn repair(config: Config, target: projector::RepairTarget) -> projector::RepairReport {
    projector::repair(&config, target, projector::REPAIR_ATTEMPTS, &|_, _| {}).await.expect("the repair succeeds")
}

/// Leaves in Redis what an interrupted rebuild of `generation` under `prefix` leaves when its generation
/// lost its data and positions: its state (building, with consumer group `group`), its generation's meta
/// at this build's layout, and the generation counter at `generation`. Returns the generation's keys.
pub async fn interrupted_rebuild(prefix: &str, generation: u64, group: &str) -> Keyspace {
    use redis::AsyncCommands;
    let mut conn = crate::redis().await;
    let number = generation.to_string();
    let state = [("generation", number.as_str()), ("group", group), ("phase", "building")];
    let _: () = conn.hset_multiple(Keyspace::rebuild(prefix), &state).await.expect("rebuild state");
    let layout = shared::layout::LAYOUT.to_string();
    let meta = [("started", "2026-11-29T00:00:00Z"), ("group", group), ("layout", layout.as_str())];
    let keys = Keyspace::new(prefix.to_string(), generation);
    let _: () = conn.hset_multiple(keys.meta(), &meta).await.expect("generation meta");
    let _: () = conn.set(Keyspace::generation_counter(prefix), generation).await.expect("generation counter");
    keys
}
