//! The fault soak: faults of every kind at random moments, overlapping, while events flow and a prober
//! reads; then the read model must equal a build from scratch and no wrong answer may have been given,
//! whatever Redis lost and whenever (one bounded exception: [`PROMOTION_WINDOW`]). Run by `scripts/soak`
//! (the `soak` binary).

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
use crate::{eventually, runner, unique};

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
/// How long the read model may take to converge once the faults are over.
const CONVERGENCE: Duration = Duration::from_secs(300);

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
    let mut injector = tokio::task::spawn_blocking(move || {
        injector.run_until(until);
        injector.settle(Duration::from_secs(180));
        injector
    })
    .await
    .expect("the faults' thread");
    publisher.wait_more(20).await;
    let published = publisher.finish().await;
    println!("[soak] faults over after {:?}; {published} events published meanwhile", started.elapsed());

    let total = published_total(&topics).await;
    let reference = reference(&topics, total, &urls, cluster).await;
    let converging = Instant::now();
    wait_converged(&app, &prefix, &urls, cluster, &reference).await;
    let converged = converging.elapsed();
    let heard = prober.finish().await;
    injector.settle(Duration::ZERO);
    Report::new(&injector, &heard, converged, published)
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

/// Waits until the active generation digests like `reference` and the API is ready.
async fn wait_converged(app: &TestApp, prefix: &str, urls: &str, cluster: bool, reference: &str) {
    let conn = connect(urls, cluster).await;
    let last = std::cell::Cell::new(Instant::now());
    eventually(CONVERGENCE, "the read model to equal a build from scratch", || async {
        let mut conn = conn.clone();
        let generation: Option<u64> =
            redis::cmd("GET").arg(Keyspace::active_generation(prefix)).query_async(&mut conn).await.ok().flatten();
        let keys = Keyspace::new(prefix.to_string(), generation?);
        let digest = runner::digest_of(&mut conn, &keys).await.ok()?.to_string();
        let ready = app.admin_get("/readyz").await;
        let converged = digest == reference && ready.status() == 200;
        if !converged && last.get().elapsed() > Duration::from_secs(10) {
            last.set(Instant::now());
            let why = ready.text().await.unwrap_or_default();
            println!("[soak] not converged yet: generation {generation:?}, {digest} (want {reference}), api: {why}");
        }
        converged.then_some(())
    })
    .await;
}
