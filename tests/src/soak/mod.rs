//! The fault soak: bursts of faults of every kind at random moments, overlapping, while events flow and a
//! prober reads; after each burst the read model must equal a build from scratch within a bound (a 503 is
//! honest only if it ends), and no wrong answer may have been given, whatever Redis lost and whenever (one
//! bounded exception: [`PROMOTION_WINDOW`]). Run by `scripts/soak` (the `soak` binary).

mod broker;
mod faults;
mod prober;
mod report;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use shared::connection::{Connection, Settings};
use shared::redis_url::Target;
use shared::{Keyspace, Topic};

pub use broker::OwnBroker;
pub use faults::PROJECTORS;
use faults::{Injector, Redis, Setting};
use prober::Prober;
pub use report::Report;

use crate::api::{self, TestApp};
use crate::faults::Publisher;
use crate::kafka::Topics;
use crate::own_redis::{OwnCluster, OwnRedis, Persistence};
use crate::scenario::Scenario;
use crate::{runner, unique};

/// How a soak runs.
pub struct Options {
    /// How long faults are injected.
    pub duration: Duration,
    /// The seed of the scenario and of the faults' kinds and moments.
    pub seed: u64,
    /// The read model on a three-primary Redis Cluster with a replica each, rather than one Redis.
    pub cluster: bool,
    /// Where the projectors' and operator commands' logs go.
    pub logs: PathBuf,
}

/// The one wrong answer the soak excuses, and only this long after a replica was promoted in place of a
/// crashed primary: a revoked key opened, because the replica lacked the revocation's last writes until
/// a projector saw the failover. No loss excuses anything else: a live key refused or a short list is
/// wrong at any time.
pub const PROMOTION_WINDOW: Duration = Duration::from_secs(1);
/// How long the read model may take to converge after a burst of faults: this plus [`PER_EVENT`] for each
/// event on the topics (a loss of everything projects the whole stream again, as a replay does).
const CONVERGENCE: Duration = Duration::from_secs(90);
const PER_EVENT: Duration = Duration::from_millis(10);

/// Runs the soak on `broker` (the `KAFKA_BROKERS` of this process must name it).
pub async fn run(options: Options, broker: OwnBroker) -> Report {
    std::fs::create_dir_all(&options.logs).expect("log directory");
    let redis = if options.cluster {
        Redis::Cluster(OwnCluster::with_replicas(Persistence::Snapshots, 1).await)
    } else {
        Redis::One(OwnRedis::with(Persistence::Snapshots))
    };
    let (urls, cluster) = (redis.urls(), redis.is_cluster());
    let scenario = Scenario::generate(options.seed, 6, 8, 3);
    let topics = Topics::holding(&scenario.messages).await;
    let prefix = unique("soak");
    let setting = Setting {
        topics: topics.clone(),
        prefix: prefix.clone(),
        group: unique("g"),
        organizations: scenario.organizations(),
        logs: options.logs.clone(),
    };
    let mut injector = Injector::new(options.seed, redis, broker, setting);
    let mut config = api::config(&prefix, &urls);
    config.redis.cluster = cluster;
    config.redis.timeout_ms = 1000;
    let app = api::spawn_app(config).await;
    app.wait_serving(Duration::from_secs(120)).await;
    injector.save();

    let started = Instant::now();
    let prober = Prober::start(&app, &scenario);
    let publisher = Publisher::start(&topics, &scenario);
    let until = started + options.duration;
    // Bursts of faults, each followed by a quiet gap (no fault, no event) in which the read model must
    // converge: a 503 is honest only if it ends.
    let mut gaps = Vec::new();
    loop {
        injector = tokio::task::spawn_blocking(move || {
            injector.burst(until);
            injector.settle(Duration::from_secs(180));
            injector
        })
        .await
        .expect("the faults' thread");
        publisher.wait_more(20).await;
        let published = publisher.pause().await;
        let total = published_total(&topics).await;
        let reference = reference(&topics, total, &urls, cluster).await;
        let within = CONVERGENCE + PER_EVENT * total as u32;
        let gap = Gap { app: &app, prefix: &prefix, urls: &urls, cluster, reference: &reference, within };
        match gap.wait_converged(&mut injector).await {
            Ok(took) => {
                println!("[soak] converged {took:?} after a burst ({total} events, within {within:?})");
                gaps.push(took);
            }
            Err(unconverged) => {
                println!("{unconverged}");
                let heard = prober.finish().await;
                injector.settle(Duration::ZERO);
                return Report::new(&injector, &heard, gaps, published, Some(unconverged));
            }
        }
        if Instant::now() >= until {
            println!("[soak] faults over after {:?}; {published} events published meanwhile", started.elapsed());
            publisher.finish().await;
            let heard = prober.finish().await;
            injector.settle(Duration::ZERO);
            return Report::new(&injector, &heard, gaps, published, None);
        }
        publisher.resume().await;
    }
}

/// Every message on the soak's topics, by their high watermarks (nothing is ever deleted from them).
async fn published_total(topics: &Topics) -> u64 {
    let consumer: BaseConsumer = crate::kafka::client().create().expect("a consumer");
    let mut total = 0;
    for topic in Topic::ALL {
        for partition in 0..crate::kafka::PARTITIONS {
            let (low, high) = consumer
                .fetch_watermarks(topics.name(topic), partition, Duration::from_secs(30))
                .expect("the broker's watermarks");
            total += (high - low) as u64;
        }
    }
    total
}

/// The digest of a build from scratch of `total` messages, by a projector of its own under a prefix of
/// its own, on the soak's Redis once the faults are over.
async fn reference(topics: &Topics, total: u64, urls: &str, cluster: bool) -> String {
    let keys = Keyspace::new(unique("scratch"), 1);
    let mut config = runner::config(topics, keys.prefix(), &unique("g"));
    config.redis.url = urls.into();
    config.redis.cluster = cluster;
    runner::build(config, total, Duration::from_secs(180)).await;
    let mut conn = connect(urls, cluster).await;
    runner::digest_of(&mut conn, &keys).await.expect("the reference's digest").to_string()
}

async fn connect(urls: &str, cluster: bool) -> Connection {
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
    Connection::connect(&Target::new(urls, cluster), settings).await.expect("the soak's Redis")
}

/// A quiet gap after a burst: the read model must equal `reference` (a build from scratch of everything
/// published) and the API be ready, `within` the bound.
struct Gap<'a> {
    app: &'a TestApp,
    prefix: &'a str,
    urls: &'a str,
    cluster: bool,
    reference: &'a str,
    within: Duration,
}

impl Gap<'_> {
    /// Waits until converged, starting again any projector that ended by itself meanwhile; how long it
    /// took, or what each projector and the read model say when it did not.
    async fn wait_converged(&self, injector: &mut Injector) -> Result<Duration, String> {
        let conn = connect(self.urls, self.cluster).await;
        let (started, mut said) = (Instant::now(), Instant::now());
        let mut last = String::new();
        while started.elapsed() < self.within {
            injector.reap();
            let mut conn = conn.clone();
            let active = Keyspace::active_generation(self.prefix);
            let generation: Option<u64> = redis::cmd("GET").arg(active).query_async(&mut conn).await.ok().flatten();
            let digest = match generation {
                Some(g) => runner::digest_of(&mut conn, &Keyspace::new(self.prefix.to_string(), g)).await.ok(),
                None => None,
            };
            let digest = digest.map(|d| d.to_string()).unwrap_or_default();
            let ready = self.app.admin_get("/readyz").await;
            let status = ready.status();
            let why = ready.text().await.unwrap_or_default();
            if digest == self.reference && status == 200 {
                return Ok(started.elapsed());
            }
            last = format!("generation {generation:?}, {digest} (want {}), api: {why}", self.reference);
            if said.elapsed() > Duration::from_secs(10) {
                said = Instant::now();
                println!("[soak] not converged yet: {last}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(self.unconverged(injector, &conn, &last).await)
    }

    /// What a gap that did not converge leaves to read: the last look, each projector's losses and last
    /// lines, and the active generation's healing and positions hashes.
    async fn unconverged(&self, injector: &Injector, conn: &Connection, last: &str) -> String {
        let mut out = format!("[soak] NOT CONVERGED within {:?} after a burst: {last}\n", self.within);
        for (name, log) in injector.projector_logs() {
            let losses = log.matches("the read model's Redis lost data").count();
            out += &format!("--- {name}: {losses} losses logged; its last lines:\n");
            let lines: Vec<&str> = log.lines().collect();
            for line in &lines[lines.len().saturating_sub(15)..] {
                out += &format!("  {line}\n");
            }
        }
        let mut conn = conn.clone();
        let active = Keyspace::active_generation(self.prefix);
        let generation: u64 = redis::cmd("GET").arg(active).query_async(&mut conn).await.ok().flatten().unwrap_or(1);
        let keys = Keyspace::new(self.prefix.to_string(), generation);
        let mut hashes = vec![keys.healing()];
        if let Ok(nodes) = conn.nodes().await {
            hashes.extend(nodes.iter().map(|node| keys.positions_on(&node.slots)));
        }
        for hash in hashes {
            let held: Result<Vec<(String, String)>, _> = redis::cmd("HGETALL").arg(&hash).query_async(&mut conn).await;
            out += &format!("--- {hash}: {held:?}\n");
        }
        out
    }
}
