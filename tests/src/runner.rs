//! Running the projector for a test: in-process through its library, or as the real binary.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use projector::{Config, Counts, Metrics, Outcome, Projector};
use tokio::sync::watch;

use crate::env;
use crate::kafka::Topics;

/// The projector's arguments for a test's topics, key prefix and consumer group.
pub fn args(topics: &Topics, prefix: &str, group: &str) -> Vec<String> {
    let pairs = [
        ("--brokers", env("KAFKA_BROKERS")),
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
    /// Where its /metrics, /healthz and /readyz answer, when its configuration asked for them.
    pub http: Option<std::net::SocketAddr>,
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
    if let Ok(filter) = std::env::var("TEST_LOG") {
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    }
    let (stop, stopped) = watch::channel(false);
    let projector =
        Projector::connect(config, stopped.clone()).await.expect("projector connects").expect("not stopped");
    let metrics = projector.metrics();
    let http = projector.serve_http(Default::default()).await;
    let task = tokio::spawn(projector.run_live(stopped));
    Running { http, stop, task, metrics }
}

impl Running {
    /// Messages consumed so far, whatever became of them.
    pub fn consumed(&self) -> u64 {
        self.counts().consumed()
    }

    /// Waits until at least `total` messages were consumed, or fails the test after `timeout`.
    pub async fn wait_until_consumed(&self, total: u64, timeout: Duration) {
        let what = format!("{total} messages consumed");
        crate::eventually(timeout, &what, || async { (self.consumed() >= total).then_some(()) }).await
    }

    /// The projector's totals by outcome.
    pub fn counts(&self) -> Counts {
        self.metrics.counts()
    }

    pub fn snapshot(&self) -> Snapshot {
        self.counts().into()
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.await.expect("projector task").expect("projector ends cleanly");
    }
}

/// The projector binary built next to this test binary (`cargo build -p projector` builds it).
pub fn binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let path = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("projector");
    assert!(path.exists(), "{} is missing: run `cargo build -p projector` first", path.display());
    path
}

/// A child process that is killed when dropped, so a failing test leaves nothing running.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for KillOnDrop {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KillOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// Starts the real projector binary.
pub fn spawn_process(topics: &Topics, prefix: &str, group: &str) -> KillOnDrop {
    KillOnDrop(command(topics, prefix, group, &[]).stdout(Stdio::null()).spawn().expect("projector starts"))
}

/// The real projector binary with a test's arguments, then `extra` (a subcommand and its options).
pub fn command(topics: &Topics, prefix: &str, group: &str, extra: &[&str]) -> Command {
    let mut command = Command::new(binary());
    command.args(args(topics, prefix, group)).args(extra).env("RUST_LOG", "warn").stderr(Stdio::inherit());
    command
}

/// Runs a command to completion with its output captured, killing it and failing the test if it takes
/// longer than `deadline`.
pub fn output_within(mut command: Command, deadline: std::time::Duration) -> std::process::Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("command starts");
    let started = std::time::Instant::now();
    while child.try_wait().expect("command status").is_none() {
        if started.elapsed() > deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("killed command output");
            panic!(
                "{command:?} did not finish within {deadline:?}; it printed:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().expect("command output")
}

/// The digest of a generation, as `projector digest` prints it.
pub async fn digest(keys: &shared::Keyspace) -> String {
    projector::Digest::of(&mut crate::redis().await, keys).await.expect("digest").to_string()
}

/// The read model of `topics` built from scratch, under a prefix of its own, by a projector of its own:
/// the reference a run with faults must end identical to. Returns that build's keys once `total`
/// messages were consumed.
pub async fn build_from_scratch(topics: &Topics, total: u64) -> shared::Keyspace {
    let keys = shared::Keyspace::new(crate::unique("scratch"), 1);
    let running = spawn(config(topics, keys.prefix(), &crate::unique("g"))).await;
    running.wait_until_consumed(total, Duration::from_secs(120)).await;
    running.stop().await;
    keys
}
