//! Running the query API for a test (`spawn_app`), and a whole world: a test's own topics, key prefix,
//! projector and API, fed with a given stream of events.

use std::time::Duration;

use clap::Parser;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use shared::Keyspace;

use crate::events::Outgoing;
use crate::kafka::{self, Topics};
use crate::{env, eventually, runner, unique};

/// How long after the projector applied a key's deletion (or replacement) every API instance refuses it.
pub const REVOCATION: Duration = Duration::from_secs(1);

pub struct TestApp {
    pub address: String,
    /// The admin listener: `/metrics`, `/readyz` with its detail, `/livez`.
    pub admin: String,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
}

/// The API's arguments for a key prefix and a Redis URL, with video links signed for the stack's S3 server.
pub fn config(prefix: &str, redis_url: &str) -> query_api::Config {
    query_api::Config::parse_from([
        "query-api",
        "--redis-url",
        redis_url,
        "--key-prefix",
        prefix,
        "--s3-endpoint",
        &env("S3_ENDPOINT"),
        "--s3-bucket",
        &env("S3_BUCKET"),
        "--s3-force-path-style",
        "true",
        "--generation-refresh-ms",
        "100",
    ])
}

/// [`spawn_app`], once the instance serves the read model (its first read of the generation found it
/// complete): until then an instance answers every request 503, which a test of what a running instance
/// answers must not take for its answer (a busy machine makes that first read late).
pub async fn spawn_serving_app(config: query_api::Config) -> TestApp {
    let app = spawn_app(config).await;
    app.wait_serving(Duration::from_secs(60)).await;
    app
}

/// Starts the API and its admin listener on free loopback ports.
pub async fn spawn_app(config: query_api::Config) -> TestApp {
    crate::test_log();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = format!("http://{}", listener.local_addr().unwrap());
    let admin = format!("http://{}", admin_listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(query_api::run(listener, Some(admin_listener), config, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    TestApp { address, admin, client, stop: Some(stop) }
}

impl TestApp {
    /// GET with the key as a Bearer token (or no credential).
    pub async fn get(&self, path: &str, key: Option<&str>) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{path}", self.address));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send().await.expect("request sent")
    }

    /// GET from the admin listener.
    pub async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.client.get(format!("{}{path}", self.admin)).send().await.expect("request sent")
    }

    /// Waits until the API serves a generation of the read model (its admin `/readyz` says so): on a busy
    /// machine its first connection to Redis, and its first reading of the generation, can take a while.
    pub async fn wait_serving(&self, within: Duration) {
        eventually(within, "the API to serve the read model", || async {
            (self.admin_get("/readyz").await.status() == 200).then_some(())
        })
        .await
    }

    /// Waits for `key` to be refused, for at most the time the API promises a revocation takes: every
    /// instance refuses a key within a second of the projector applying its deletion.
    pub async fn refused_within_a_second(&self, key: &str) {
        eventually(REVOCATION, &format!("the key {key:?} to be refused"), || async {
            (self.get("/v1/studies", Some(key)).await.status() == 401).then_some(())
        })
        .await
    }

    /// Panics unless every 503 this instance answered so far was one a loaded machine causes (a Redis
    /// command over its timeout, a request shed or over its own): a test waiting for an answer may ask
    /// again after those, never after a refusal that says something of the read model (healing, lost...).
    pub async fn assert_refused_only_for_load(&self) {
        let text = self.admin_get("/metrics").await.text().await.unwrap();
        let refused = |labels: &[&str]| crate::metrics::sample(&text, "api_refused_total", labels);
        let other = refused(&[]) - refused(&["cause=\"redis\""]) - refused(&["cause=\"overloaded\""]);
        let lines: Vec<&str> = text.lines().filter(|line| line.starts_with("api_refused_total{")).collect();
        assert_eq!(other, 0.0, "refused for something other than load: {lines:?}");
    }

    /// GET with the key and parse the JSON body; returns the status too.
    pub async fn json(&self, path: &str, key: &str) -> (u16, serde_json::Value) {
        let response = self.get(path, Some(key)).await;
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON body"))
    }

    /// The status of `/v1/studies` for `key`, and the total it gave (none with an error body).
    pub async fn studies_total(&self, key: &str) -> (u16, Option<u64>) {
        let response = self.get("/v1/studies", Some(key)).await;
        let status = response.status().as_u16();
        (status, response.json::<serde_json::Value>().await.ok().and_then(|body| body["pagination"]["total"].as_u64()))
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A body without its presigned links, which differ with the second they were signed in.
pub fn unsigned(mut body: serde_json::Value) -> serde_json::Value {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                map.remove("videoDownloadURL");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut body);
    body
}

/// A test's own topics, key prefix, projector and API.
pub struct World {
    pub topics: Topics,
    pub prefix: String,
    pub app: TestApp,
    pub projector: runner::Running,
    producer: rdkafka::producer::FutureProducer,
    published: u64,
}

impl World {
    pub async fn start(messages: &[Outgoing]) -> Self {
        Self::start_with(messages, |_| {}).await
    }

    /// A world whose API runs with settings of the test's choosing.
    pub async fn start_with(messages: &[Outgoing], configure: impl FnOnce(&mut query_api::Config)) -> Self {
        Self::start_configured(messages, &unique("api"), |_| {}, configure).await
    }

    /// A world under `prefix` whose projector and API both run with settings of the test's choosing.
    pub async fn start_configured(
        messages: &[Outgoing],
        prefix: &str,
        configure_projector: impl FnOnce(&mut projector::Config),
        configure_api: impl FnOnce(&mut query_api::Config),
    ) -> Self {
        let topics = Topics::create().await;
        let prefix = prefix.to_string();
        let mut projector = runner::config(&topics, &prefix, &unique("g"));
        configure_projector(&mut projector);
        let projector = runner::spawn(projector).await;
        let mut api = config(&prefix, &env("REDIS_URL"));
        configure_api(&mut api);
        let app = spawn_app(api).await;
        let mut world = Self { topics, prefix, app, projector, producer: kafka::producer(), published: 0 };
        world.publish(messages).await;
        world.app.wait_serving(Duration::from_secs(60)).await;
        world
    }

    /// Builds generation 2 beside generation 1 from the same topics, makes it active, and deletes
    /// generation 1 at once: what a rebuild's switch does, without its handover.
    pub async fn switch_to_a_second_generation(&self) {
        let mut builder = runner::config(&self.topics, &self.prefix, &unique("g"));
        builder.generation = Some(2);
        runner::build(builder, self.projector.consumed(), Duration::from_secs(60)).await;
        self.make_the_second_generation_active().await;
    }

    /// Builds generation 2 from `messages`, on topics of its own (so it holds other data than generation
    /// 1), then switches to it as [`Self::switch_to_a_second_generation`] does. The world's projector is
    /// stopped first: generation 2 holds no position of its topics, so it would follow the switch as one
    /// to a generation holding less than it applied, and project its events into it again (the API
    /// answering 503 meanwhile), which a rebuild's switch never is.
    pub async fn switch_to_a_second_generation_of(&mut self, messages: &[Outgoing]) {
        self.projector.halt().await;
        let topics = Topics::create().await;
        kafka::publish(&self.producer, &topics, messages).await;
        let mut builder = runner::config(&topics, &self.prefix, &unique("g"));
        builder.generation = Some(2);
        runner::build(builder, messages.len() as u64, Duration::from_secs(60)).await;
        self.make_the_second_generation_active().await;
    }

    async fn make_the_second_generation_active(&self) {
        let mut conn = crate::redis().await;
        let _: () = ::redis::AsyncCommands::set(&mut conn, Keyspace::active_generation(&self.prefix), 2).await.unwrap();
        runner::delete_generation(&mut conn, &Keyspace::new(self.prefix.clone(), 1)).await;
    }

    /// Publishes more events and waits until the projector has consumed them.
    pub async fn publish(&mut self, messages: &[Outgoing]) {
        kafka::publish(&self.producer, &self.topics, messages).await;
        self.published += messages.len() as u64;
        let (projector, total) = (&self.projector, self.published);
        projector.wait_until_consumed(total, Duration::from_secs(60)).await;
    }
}

/// The real query-api binary, for tests that measure the memory of its process: started on a free loopback
/// port with the test's key prefix and the stack's Redis, killed when dropped.
pub struct ApiProcess {
    pub address: String,
    pub client: reqwest::Client,
    process: crate::runner::KillOnDrop,
}

impl ApiProcess {
    /// Starts the binary (built by `cargo build -p query-api`) with `extra` arguments, and waits until it
    /// answers `/livez`.
    pub async fn spawn(prefix: &str, extra: &[&str]) -> Self {
        Self::start(prefix, &env("REDIS_URL"), extra, None).await
    }

    /// Starts the binary on `redis_url`, logging JSON lines at `info` into `logs`.
    pub async fn spawn_logging(prefix: &str, redis_url: &str, logs: std::fs::File) -> Self {
        Self::start(prefix, redis_url, &[], Some(logs)).await
    }

    async fn start(prefix: &str, redis_url: &str, extra: &[&str], logs: Option<std::fs::File>) -> Self {
        let exe = std::env::current_exe().expect("test binary path");
        let binary = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("query-api");
        assert!(binary.exists(), "{} is missing: run `cargo build -p query-api` first", binary.display());
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let listen = format!("127.0.0.1:{port}");
        let mut command = std::process::Command::new(binary);
        command
            .args(["--listen-addr", &listen, "--admin-addr", "off", "--key-prefix", prefix])
            .args(["--redis-url", redis_url, "--generation-refresh-ms", "100", "--s3-disabled", "true"])
            .arg(format!("--redis-cluster={}", crate::redis_cluster()))
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null());
        if let Some(logs) = logs {
            command.env("RUST_LOG", "info").env("LOG_FORMAT", "json").stderr(logs);
        }
        let child = command.spawn().expect("query-api starts");
        let api = Self {
            address: format!("http://{listen}"),
            // Its tests send pages of tens of megabytes through a debug build: on a busy machine one takes
            // more than half a minute, which is no fault of what they check (the process's memory).
            client: reqwest::Client::builder().timeout(Duration::from_secs(180)).build().unwrap(),
            process: crate::runner::KillOnDrop(child),
        };
        eventually(Duration::from_secs(30), "the API process to answer /livez", || async {
            let live = api.client.get(format!("{}/livez", api.address)).send().await;
            live.is_ok_and(|r| r.status() == 200).then_some(())
        })
        .await;
        api
    }

    /// GET with the key as a Bearer token.
    pub async fn get(&self, path: &str, key: &str) -> reqwest::Response {
        self.client.get(format!("{}{path}", self.address)).bearer_auth(key).send().await.expect("request sent")
    }

    /// SIGTERM: the API stops accepting and drains the requests in flight.
    pub fn sigterm(&self) {
        let status = std::process::Command::new("kill").arg("-TERM").arg(self.process.id().to_string()).status();
        assert!(status.expect("kill runs").success(), "SIGTERM sent");
    }

    /// Waits for the process to exit, for at most `within`; its exit status, if it did.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.process.0.try_wait().expect("the process's status") {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// A figure of the process's memory from `/proc/<pid>/status`, in bytes: `VmRSS` (resident now) or
    /// `VmHWM` (the most it was resident).
    pub fn memory(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.process.id())).expect("process status");
        let line = status.lines().find(|line| line.starts_with(&format!("{field}:"))).expect("the field");
        let kb: u64 = line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number of kB");
        kb * 1024
    }
}
