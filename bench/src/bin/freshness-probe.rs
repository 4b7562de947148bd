//! What the freshness benchmark (`scripts/bench-freshness`) runs besides the binaries:
//!
//! - `setup`: creates a run's topics and publishes its organizations: each with a main API key, some keys
//!   to delete later, and completed studies;
//! - `measure`: publishes, at a steady rate, a `study.retitled` to one of those studies (each with its
//!   study's next sequence) and, at another rate, the deletion of one of those keys; probers on every API
//!   instance ask for the study (or with the key) until the change shows (the new title; a 401), a few
//!   milliseconds apart. A plain consumer of the same topics, with the same client properties as the
//!   projector, times the broker's own delivery of each event: the ceiling. Prints one line of
//!   `name=value` pairs: p50, p99 and max, in milliseconds, of published -> delivered by the broker,
//!   published -> visible on every instance, and the service's share (visible on every instance minus
//!   delivered by the broker, per event); the same for key deletions (-> refused on every instance).
//!
//! "Published" is the moment the producer is handed the event (it sends at once: `linger.ms=0`), the
//! moment all three measures start from. A change is "visible" at the moment the first answer that shows
//! it arrives, so the figures include up to one probe interval and one API round trip.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use benchmarks::broker::{self, create_topics, topic_names};
use benchmarks::report::Line;
use clap::{Parser, Subcommand};
use end_to_end::events::{envelope, key_sha256, Envelope};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::{json, Value};
use shared::Topic;

#[derive(Parser)]
#[command(about = "The freshness benchmark's data, publisher and probers.")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Creates the run's topics and publishes its organizations, keys and studies.
    Setup(Shape),
    /// Publishes changes at a steady rate and times them until they show on every API instance.
    Measure(Measure),
}

/// The run's data: the same arguments for both commands.
#[derive(clap::Args, Clone)]
struct Shape {
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: String,
    /// The run's name: its topics are `<run>-study-events` and so on.
    #[arg(long)]
    run: String,
    /// Organizations.
    #[arg(long, default_value_t = 20)]
    orgs: usize,
    /// Completed studies of each organization.
    #[arg(long, default_value_t = 5)]
    studies: usize,
    /// Keys of each organization that can be deleted during the run.
    #[arg(long, default_value_t = 20)]
    keys: usize,
}

#[derive(clap::Args)]
struct Measure {
    #[command(flatten)]
    shape: Shape,
    /// Base URL of an API instance (repeat for each).
    #[arg(long = "api", required = true)]
    apis: Vec<String>,
    /// Study retitles published a second.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Key deletions published a second.
    #[arg(long, default_value_t = 4.0)]
    key_rate: f64,
    /// How long changes are published, in seconds.
    #[arg(long, default_value_t = 30)]
    secs: u64,
    /// Milliseconds between two probes of one change on one instance.
    #[arg(long, default_value_t = 2)]
    probe_ms: u64,
    /// A librdkafka property of the projector's consumer, `key=value`, given to the ceiling's consumer too
    /// (repeatable), over the projector's properties from the environment (`KAFKA_PROPERTY_*`).
    #[arg(long = "kafka-property", value_parser = key_value)]
    kafka_properties: Vec<(String, String)>,
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("{s}: not key=value"))
}

impl Shape {
    fn org(&self, o: usize) -> String {
        format!("{}-org{o:04}", self.run)
    }

    fn main_secret(&self, o: usize) -> String {
        format!("{}-main-secret", self.org(o))
    }

    fn key_secret(&self, o: usize, k: usize) -> String {
        format!("{}-key{k:03}-secret", self.org(o))
    }

    fn key_id(&self, o: usize, k: usize) -> String {
        format!("{}-k{k:03}", self.org(o))
    }

    fn study(&self, o: usize, s: usize) -> String {
        format!("{}-s{s:02}", self.org(o))
    }
}

/// One event, as the product publishes it, with `occurredAt` now, and its id: `<aggregate>/<sequence>`, what
/// the ceiling's consumer matches on.
fn message(org: &str, id: &str, sequence: u64, kind: &str, data: Value) -> (String, Vec<u8>) {
    let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let event_id = format!("{id}/{sequence}");
    let value = envelope(&Envelope { event_id: &event_id, kind, org, aggregate: id, sequence, at: &at }, data);
    (event_id, value.to_string().into_bytes())
}

async fn setup(shape: &Shape) -> Result<()> {
    let topics = create_topics(&shape.brokers, &shape.run).await?;
    let producer = producer(&shape.brokers, "20")?;
    let mut sends = Vec::new();
    for o in 0..shape.orgs {
        let org = shape.org(o);
        let main = format!("{org}-k-main");
        let mut out = vec![(
            Topic::ApiKey,
            main.clone(),
            message(&org, &main, 1, "api_key.created", key_data(&shape.main_secret(o))),
        )];
        for k in 0..shape.keys {
            let id = shape.key_id(o, k);
            let data = key_data(&shape.key_secret(o, k));
            out.push((Topic::ApiKey, id.clone(), message(&org, &id, 1, "api_key.created", data)));
        }
        for s in 0..shape.studies {
            let id = shape.study(o, s);
            let title = json!({"internalTitle": format!("study {s}")});
            out.push((Topic::Study, id.clone(), message(&org, &id, 1, "study.created", title)));
            out.push((Topic::Study, id.clone(), message(&org, &id, 2, "study.launched", json!({}))));
            let done = json!({"completedAt": "2026-03-01T10:00:00Z"});
            out.push((Topic::Study, id.clone(), message(&org, &id, 3, "study.completed", done)));
        }
        for (topic, key, (_, value)) in out {
            let name = &topics[Topic::ALL.iter().position(|t| *t == topic).expect("a topic")];
            let record = FutureRecord::to(name).key(&key).payload(&value);
            sends.push(producer.send_result(record).map_err(|(e, _)| e).context("queueing the run's data")?);
        }
    }
    for sent in futures::future::join_all(sends).await {
        sent.context("the producer went away")?.map_err(|(e, _)| e).context("publishing the run's data")?;
    }
    Line::default().with("orgs", shape.orgs).with("studies", shape.orgs * shape.studies).print();
    Ok(())
}

fn key_data(secret: &str) -> Value {
    json!({"name": "freshness", "keySha256": key_sha256(secret)})
}

fn producer(brokers: &str, linger_ms: &str) -> Result<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", linger_ms)
        .set("message.timeout.ms", "60000")
        .create()?)
}

/// Which change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A study retitled: visible once the new title is served.
    Title,
    /// A key deleted: done once it is refused.
    Deletion,
}

/// When each part of one change happened.
#[derive(Debug, Clone)]
struct Timing {
    kind: Kind,
    published: Instant,
    /// Delivered by the broker to the ceiling's consumer.
    delivered: Option<Instant>,
    /// Visible (or refused) on each instance.
    seen: Vec<Option<Instant>>,
}

type Timings = Arc<Mutex<HashMap<String, Timing>>>;

/// How long a probe waits for a change before it counts it as never seen.
const GIVE_UP: Duration = Duration::from_secs(20);

async fn measure(m: Measure) -> Result<()> {
    let shape = &m.shape;
    let clients: Vec<reqwest::Client> = m
        .apis
        .iter()
        .map(|_| reqwest::Client::builder().timeout(Duration::from_secs(5)).pool_max_idle_per_host(64).build())
        .collect::<Result<_, _>>()?;
    let apis: Arc<Vec<(reqwest::Client, String)>> =
        Arc::new(clients.into_iter().zip(m.apis.iter().map(|a| a.trim_end_matches('/').to_string())).collect());
    wait_for_setup(&apis, shape).await?;
    let topics = topic_names(&shape.run);
    let timings: Timings = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ceiling = start_ceiling(&m, &topics, timings.clone(), stop.clone())?;
    let publisher =
        Publisher { producer: producer(&shape.brokers, "0")?, timings: timings.clone(), instances: apis.len() };
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let probe = Duration::from_millis(m.probe_ms);
    let mut probes = Vec::new();
    let started = Instant::now();
    let end = started + Duration::from_secs(m.secs);
    let title_every = Duration::from_secs_f64(1.0 / m.rate.max(0.001));
    let key_every = Duration::from_secs_f64(1.0 / m.key_rate.max(0.001));
    let (mut next_title, mut next_key) = (started, started + key_every / 2);
    let mut sequences: HashMap<(usize, usize), u64> = HashMap::new();
    let (mut titles, mut deletions) = (0usize, 0usize);
    let keys_available = shape.orgs * shape.keys;
    while Instant::now() < end {
        let now = Instant::now();
        if m.rate > 0.0 && now >= next_title {
            next_title += title_every;
            // Round the studies, so that a study is retitled again only once every other one was: its new
            // title is long seen by then, never overwritten before it shows.
            let (o, s) = (titles % shape.orgs, (titles / shape.orgs) % shape.studies);
            let sequence = sequences.entry((o, s)).or_insert(3);
            *sequence += 1;
            let (org, study) = (shape.org(o), shape.study(o, s));
            let title = format!("retitled {titles}");
            let data = json!({"internalTitle": title});
            let event = message(&org, &study, *sequence, "study.retitled", data);
            let (id, published) = publisher.publish(&topics[0], &study, event, Kind::Title);
            let check = Check::Title { study: study.clone(), title, secret: shape.main_secret(o) };
            probes.push(tokio::spawn(watch(
                apis.clone(),
                check,
                id,
                published,
                timings.clone(),
                errors.clone(),
                probe,
            )));
            titles += 1;
        }
        if m.key_rate > 0.0 && now >= next_key && deletions < keys_available {
            next_key += key_every;
            let (o, k) = (deletions % shape.orgs, deletions / shape.orgs);
            let (org, id, secret) = (shape.org(o), shape.key_id(o, k), shape.key_secret(o, k));
            // In use on every instance just before it is deleted, as a key being revoked usually is.
            for (client, base) in apis.iter() {
                let status = get(client, &format!("{base}/v1/studies?pageSize=1"), &secret).await.map(|(s, _)| s);
                if !matches!(status, Ok(200)) {
                    bail!("key {id} was not accepted before its deletion: {status:?}");
                }
            }
            let (event, published) =
                publisher.publish(&topics[2], &id, message(&org, &id, 2, "api_key.deleted", json!({})), Kind::Deletion);
            let check = Check::Refused { secret };
            probes.push(tokio::spawn(watch(
                apis.clone(),
                check,
                event,
                published,
                timings.clone(),
                errors.clone(),
                probe,
            )));
            deletions += 1;
        }
        let wake = if m.key_rate > 0.0 { next_title.min(next_key) } else { next_title };
        tokio::time::sleep_until(wake.max(Instant::now()).into()).await;
    }
    for probe in probes {
        probe.await?;
    }
    // The ceiling's consumer gets a moment for the last deliveries, then stops.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && timings.lock().expect("timings").values().any(|t| t.delivered.is_none()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    ceiling.join().map_err(|_| anyhow::anyhow!("the ceiling's consumer panicked"))??;
    report(&timings.lock().expect("timings"), errors.load(std::sync::atomic::Ordering::Relaxed), apis.len());
    Ok(())
}

/// Sends changes at once (the producer does not linger) and records when each was handed over.
struct Publisher {
    producer: FutureProducer,
    timings: Timings,
    instances: usize,
}

impl Publisher {
    fn publish(&self, topic: &str, key: &str, (id, value): (String, Vec<u8>), kind: Kind) -> (String, Instant) {
        let published = Instant::now();
        let timing = Timing { kind, published, delivered: None, seen: vec![None; self.instances] };
        self.timings.lock().expect("timings").insert(id.clone(), timing);
        match self.producer.send_result(FutureRecord::to(topic).key(key).payload(&value)) {
            Ok(delivery) => drop(tokio::spawn(async move {
                if let Ok(Err((e, _))) = delivery.await {
                    eprintln!("a change was not delivered to the broker: {e}");
                }
            })),
            Err((e, _)) => eprintln!("a change could not be queued for the broker: {e}"),
        }
        (id, published)
    }
}

/// What shows that a change arrived on an instance.
#[derive(Clone)]
enum Check {
    Title { study: String, title: String, secret: String },
    Refused { secret: String },
}

/// Probes every instance until the change shows there, and records when it did.
async fn watch(
    apis: Arc<Vec<(reqwest::Client, String)>>,
    check: Check,
    id: String,
    published: Instant,
    timings: Timings,
    errors: Arc<std::sync::atomic::AtomicU64>,
    every: Duration,
) {
    let each = apis.iter().enumerate().map(|(i, (client, base))| {
        let (check, id, timings, errors) = (check.clone(), id.clone(), timings.clone(), errors.clone());
        async move {
            while published.elapsed() < GIVE_UP {
                let shown = match &check {
                    Check::Title { study, title, secret } => {
                        match get(client, &format!("{base}/v1/studies/{study}"), secret).await {
                            Ok((200, body)) => body["internalTitle"] == title.as_str(),
                            _ => {
                                errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                false
                            }
                        }
                    }
                    Check::Refused { secret } => {
                        match get(client, &format!("{base}/v1/studies?pageSize=1"), secret).await {
                            Ok((401, _)) => true,
                            Ok((200, _)) => false,
                            _ => {
                                errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                false
                            }
                        }
                    }
                };
                if shown {
                    timings.lock().expect("timings").get_mut(&id).expect("published").seen[i] = Some(Instant::now());
                    return;
                }
                tokio::time::sleep(every).await;
            }
        }
    });
    futures::future::join_all(each).await;
}

async fn get(client: &reqwest::Client, url: &str, secret: &str) -> Result<(u16, Value)> {
    let response = client.get(url).bearer_auth(secret).send().await?;
    let status = response.status().as_u16();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    Ok((status, body))
}

/// Waits until every instance serves the last organization's last study and accepts its last key.
async fn wait_for_setup(apis: &[(reqwest::Client, String)], shape: &Shape) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let o = shape.orgs - 1;
    let study = format!("{}-s{:02}", shape.org(o), shape.studies - 1);
    let last_key = shape.key_secret(o, shape.keys.saturating_sub(1));
    for (client, base) in apis {
        loop {
            let study = get(client, &format!("{base}/v1/studies/{study}"), &shape.main_secret(o)).await;
            let key = get(client, &format!("{base}/v1/studies?pageSize=1"), &last_key).await;
            if matches!((study, key), (Ok((200, _)), Ok((200, _)))) {
                break;
            }
            if Instant::now() > deadline {
                bail!("{base} does not serve the run's data after 300 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// A plain consumer of the study and key topics, from their ends, with the projector's client properties:
/// it records when the broker delivers each change.
fn start_ceiling(
    m: &Measure,
    topics: &[String; 3],
    timings: Timings,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &m.shape.brokers)
        .set("group.id", format!("{}-ceiling", m.shape.run))
        .set("enable.auto.commit", "false");
    // The projector's properties from the environment (`KAFKA_PROPERTY_*`), then those given.
    let from_env = projector::Properties::load(&projector::KafkaOptions::default(), std::env::vars());
    from_env.map_err(anyhow::Error::msg)?.apply(&mut config);
    for (key, value) in &m.kafka_properties {
        config.set(key, value);
    }
    let consumer: BaseConsumer = config.create()?;
    let reader = broker::plain_consumer(&m.shape.brokers, &format!("{}-watermarks", m.shape.run))?;
    let mut list = TopicPartitionList::new();
    for topic in [&topics[0], &topics[2]] {
        for p in 0..broker::PARTITIONS {
            let (_, high) = reader.fetch_watermarks(topic, p, Duration::from_secs(10))?;
            list.add_partition_offset(topic, p, Offset::Offset(high))?;
        }
    }
    consumer.assign(&list)?;
    Ok(std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match consumer.poll(Duration::from_millis(50)) {
                Some(Ok(message)) => {
                    let at = Instant::now();
                    let value: Value = serde_json::from_slice(message.payload().unwrap_or_default())?;
                    let id = value["eventId"].as_str().unwrap_or_default();
                    if let Some(timing) = timings.lock().expect("timings").get_mut(id) {
                        timing.delivered.get_or_insert(at);
                    }
                }
                Some(Err(e)) => bail!("the ceiling's consumer failed: {e}"),
                None => {}
            }
        }
        Ok(())
    }))
}

/// Milliseconds from `from` to `to`.
fn ms(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

/// p50, p99 and max of `values` (sorted here), in milliseconds.
fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    values.sort_by(f64::total_cmp);
    let at = |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
    (at(0.50), at(0.99), values[values.len() - 1])
}

fn report(timings: &HashMap<String, Timing>, errors: u64, instances: usize) {
    let mut line = Line::default().with("instances", instances).with("probe_errors", errors);
    for (name, kind) in [("visible", Kind::Title), ("revoked", Kind::Deletion)] {
        let of_kind: Vec<&Timing> = timings.values().filter(|t| t.kind == kind).collect();
        let complete: Vec<(&Timing, Instant, Instant)> = of_kind
            .iter()
            .filter_map(|t| {
                Some((*t, t.delivered?, t.seen.iter().copied().collect::<Option<Vec<_>>>()?.into_iter().max()?))
            })
            .collect();
        let broker = spread(complete.iter().map(|(t, delivered, _)| ms(t.published, *delivered)).collect());
        let end_to_end = spread(complete.iter().map(|(t, _, seen)| ms(t.published, *seen)).collect());
        let share = spread(complete.iter().map(|(_, delivered, seen)| ms(*delivered, *seen)).collect());
        line = line
            .with(&format!("{name}_changes"), of_kind.len())
            .with(&format!("{name}_missed"), of_kind.len() - complete.len());
        for (what, (p50, p99, max)) in [("broker", broker), ("e2e", end_to_end), ("share", share)] {
            line = line
                .with(&format!("{name}_{what}_p50_ms"), format!("{p50:.1}"))
                .with(&format!("{name}_{what}_p99_ms"), format!("{p99:.1}"))
                .with(&format!("{name}_{what}_max_ms"), format!("{max:.1}"));
        }
    }
    line.print();
}

#[tokio::main]
async fn main() -> Result<()> {
    match Args::parse().command {
        Command::Setup(shape) => setup(&shape).await,
        Command::Measure(m) => measure(m).await,
    }
}
