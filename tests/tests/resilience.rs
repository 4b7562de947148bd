//! The projector when Redis goes away mid-stream: it retries with backoff, loses and skips nothing, and
//! ends with exactly the model's read model once Redis is back. Uses a Redis of its own, so stopping it
//! disturbs no other test.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use end_to_end::kafka::{self, Topics};
use end_to_end::scenario::Scenario;
use end_to_end::{eventually, projector, read_model, unique};
use shared::Keyspace;

struct OwnRedis {
    port: u16,
    dir: std::path::PathBuf,
    child: Option<Child>,
}

impl OwnRedis {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let dir = std::env::temp_dir().join(unique("redis"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = Self { port, dir, child: None };
        redis.restart();
        redis
    }

    fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", "", "--appendonly", "yes"])
            .args(["--appendfsync", "always", "--dir", self.dir.to_str().unwrap()])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
    }

    /// SIGTERM: Redis flushes its append-only file and exits.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
            child.wait().unwrap();
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projector_rides_out_a_redis_outage_without_losing_or_skipping_events() {
    let mut redis = OwnRedis::start();
    let topics = Topics::create().await;
    let scenario = Scenario::generate(0x5eed_0004, 2, 6, 5);
    let (first, second) = scenario.messages.split_at(scenario.messages.len() / 2);
    let producer = kafka::producer();
    kafka::publish(&producer, &topics, first).await;

    let prefix = unique("rm");
    let mut config = projector::config(&topics, &prefix, &unique("g"));
    config.redis_url = redis.url();
    config.redis_timeout_ms = 500;
    let running = eventually(Duration::from_secs(10), "the projector to connect", || {
        let config = config.clone();
        async move { Some(projector::spawn(config).await) }
    })
    .await;
    eventually(Duration::from_secs(60), "the first half", || async {
        (running.consumed() >= first.len() as u64).then_some(())
    })
    .await;

    redis.stop();
    kafka::publish(&producer, &topics, second).await;
    eventually(Duration::from_secs(30), "the projector to hit the outage", || async {
        (running.stats.snapshot().retries > 0).then_some(())
    })
    .await;
    assert!(running.consumed() < scenario.messages.len() as u64, "nothing was applied while Redis was away");
    redis.restart();
    let total = scenario.messages.len() as u64;
    eventually(Duration::from_secs(60), "the second half after the outage", || async {
        (running.consumed() >= total).then_some(())
    })
    .await;

    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys = Keyspace::new(prefix, 1);
    for org in scenario.organizations() {
        assert_eq!(read_model::read(&mut conn, &keys, &scenario, &org).await, scenario.expected(&org), "{org}");
    }
    running.stop().await;
}
