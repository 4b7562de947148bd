//! What the failover benchmark (`scripts/bench-failover`) needs besides Redis and the binaries:
//!
//! - `caught-up`: waits until a projector's consumer group has committed every message of a run's topics
//!   and reports the replay's rate from the projector's start;
//! - `probe`: finds the organizations of the replayed stream through the API (their keys are
//!   `<org>-secret0`), samples some of them, and asks the API for each one's studies list and one of its
//!   interviews, again and again, writing every answer (time, organization, its slot, route, status) to a
//!   CSV file; meanwhile it publishes `study.retitled` events to the sampled organizations' studies (each
//!   with its study's next sequence), so that events flow through the fault. Both stop once a given file
//!   exists.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use benchmarks::broker;
use benchmarks::report::Line;
use benchmarks::stream::Stream;
use clap::{Parser, Subcommand};
use end_to_end::events::{envelope, Envelope};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use serde_json::{json, Value};
use shared::keys::slot;
use shared::{Keyspace, Topic};
use tokio::sync::mpsc;

#[derive(Parser)]
#[command(about = "The failover benchmark's replay wait, prober and publisher.")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Waits until the group has committed every message of the run's topics; prints the rate.
    CaughtUp {
        /// Kafka bootstrap servers.
        #[arg(long, env = "KAFKA_BROKERS")]
        brokers: String,
        /// Name of the run whose topics the projector reads.
        #[arg(long)]
        run: String,
        /// The projector's consumer group.
        #[arg(long)]
        group: String,
        /// When the projector was started, in milliseconds since the Unix epoch.
        #[arg(long)]
        started_ms: u128,
        /// The projector's process id: fails if it exits meanwhile.
        #[arg(long)]
        pid: Option<u32>,
        /// Gives up after this many seconds.
        #[arg(long, default_value_t = 3600)]
        max_secs: u64,
    },
    /// Probes the API and publishes updates until the stop file exists.
    Probe(Probe),
}

#[derive(clap::Args)]
struct Probe {
    /// The API's base URL.
    #[arg(long)]
    api: String,
    /// The read model's key prefix (the organizations' slots are those of their keys under it).
    #[arg(long)]
    prefix: String,
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: String,
    /// Name of the run whose study topic gets the updates.
    #[arg(long)]
    run: String,
    /// Messages in the replayed stream (to know each study's last sequence).
    #[arg(long, env = "EVENTS", default_value_t = 1_000_000)]
    events: usize,
    /// Seed of the replayed stream.
    #[arg(long, env = "SEED", default_value_t = 7)]
    seed: u64,
    /// Organizations to probe, spread evenly over those found.
    #[arg(long, default_value_t = 30)]
    sample: usize,
    /// Pause between two rounds of one organization's requests, in milliseconds.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// `study.retitled` events published a second (0: none).
    #[arg(long, default_value_t = 50)]
    publish_per_sec: u32,
    /// Every answer, one CSV line each: `ms,org,slot,route,status,latency_ms` (status 0: no answer).
    #[arg(long)]
    out: PathBuf,
    /// The sample, written before probing starts: `org slot interview` a line.
    #[arg(long)]
    sample_out: PathBuf,
    /// Probing and publishing stop once this file exists.
    #[arg(long)]
    stop: PathBuf,
}

fn now_ms() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("a clock after 1970").as_millis()
}

#[tokio::main]
async fn main() -> Result<()> {
    match Args::parse().command {
        Command::CaughtUp { brokers, run, group, started_ms, pid, max_secs } => {
            caught_up(&brokers, &run, &group, started_ms, pid, max_secs)
        }
        Command::Probe(probe) => probe.run().await,
    }
}

fn caught_up(brokers: &str, run: &str, group: &str, started_ms: u128, pid: Option<u32>, max_secs: u64) -> Result<()> {
    let inspector = broker::plain_consumer(brokers, group)?;
    let partitions = broker::watermarks(&inspector, &broker::topic_names(run))?;
    let total: i64 = partitions.iter().map(|(_, _, low, high)| high - low).sum();
    let limit = Instant::now() + Duration::from_secs(max_secs);
    loop {
        if broker::committed_messages(&inspector, &partitions)? >= total {
            break;
        }
        if let Some(pid) = pid.filter(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            bail!("the projector (pid {pid}) exited before it caught up");
        }
        if Instant::now() > limit {
            bail!("the projector had not caught up after {max_secs} s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let seconds = (now_ms() - started_ms) as f64 / 1000.0;
    Line::default().rate(total as u64, seconds).print();
    Ok(())
}

/// One organization probed: its key, its slot and one of its interviews.
struct Target {
    org: String,
    secret: String,
    slot: u16,
    interview: String,
}

impl Probe {
    async fn run(self) -> Result<()> {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build()?;
        let targets = self.sample(&client).await?;
        let lines: Vec<String> = targets.iter().map(|t| format!("{} {} {}\n", t.org, t.slot, t.interview)).collect();
        let partial = self.sample_out.with_extension("partial");
        std::fs::write(&partial, lines.concat())?;
        std::fs::rename(&partial, &self.sample_out)?;

        let stop = Arc::new(AtomicBool::new(false));
        let published = Arc::new(AtomicU64::new(0));
        let publisher = match self.publish_per_sec {
            0 => None,
            rate => {
                let studies = last_sequences(self.seed, self.events, &targets);
                let topic = broker::topic_names(&self.run)[0].clone();
                Some(tokio::spawn(publish(self.brokers.clone(), topic, studies, rate, stop.clone(), published.clone())))
            }
        };
        let (answers, mut received) = mpsc::unbounded_channel::<String>();
        let mut probers = Vec::new();
        for target in targets {
            let (client, base, stop, answers) = (client.clone(), self.api.clone(), stop.clone(), answers.clone());
            let interval = Duration::from_millis(self.interval_ms);
            probers.push(tokio::spawn(async move {
                let routes = [
                    ("studies", format!("{base}/v1/studies?pageSize=20")),
                    ("interview", format!("{base}/v1/interviews/{}", target.interview)),
                ];
                while !stop.load(Ordering::Relaxed) {
                    for (route, url) in &routes {
                        let asked = Instant::now();
                        let status = match client.get(url).bearer_auth(&target.secret).send().await {
                            Ok(response) => {
                                let status = response.status().as_u16();
                                // The whole body, as a client reads it.
                                let _ = response.bytes().await;
                                status
                            }
                            Err(_) => 0,
                        };
                        let latency = asked.elapsed().as_secs_f64() * 1000.0;
                        let line =
                            format!("{},{},{},{route},{status},{latency:.1}\n", now_ms(), target.org, target.slot);
                        let _ = answers.send(line);
                    }
                    tokio::time::sleep(interval).await;
                }
            }));
        }
        drop(answers);
        let out = self.out.clone();
        let writer = tokio::task::spawn_blocking(move || -> Result<(u64, HashMap<String, u64>)> {
            let mut file = std::io::BufWriter::new(std::fs::File::create(&out)?);
            writeln!(file, "ms,org,slot,route,status,latency_ms")?;
            let (mut count, mut statuses) = (0, HashMap::<String, u64>::new());
            let mut flushed = Instant::now();
            while let Some(line) = received.blocking_recv() {
                file.write_all(line.as_bytes())?;
                count += 1;
                *statuses.entry(line.split(',').nth(4).unwrap_or_default().to_string()).or_default() += 1;
                if flushed.elapsed() > Duration::from_millis(500) {
                    file.flush()?;
                    flushed = Instant::now();
                }
            }
            file.flush()?;
            Ok((count, statuses))
        });
        while !self.stop.exists() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        stop.store(true, Ordering::Relaxed);
        for prober in probers {
            prober.await?;
        }
        if let Some(publisher) = publisher {
            publisher.await??;
        }
        let (count, statuses) = writer.await??;
        let mut by_status: Vec<String> = statuses.iter().map(|(s, n)| format!("{s}:{n}")).collect();
        by_status.sort();
        Line::default()
            .with("answers", count)
            .with("statuses", by_status.join(","))
            .with("published", published.load(Ordering::Relaxed))
            .print();
        Ok(())
    }

    /// Finds the organizations the API serves (`org00000` on, until several in a row are unknown), and
    /// takes `sample` of them evenly spread, each with an interview it serves.
    async fn sample(&self, client: &reqwest::Client) -> Result<Vec<Target>> {
        let keys = Keyspace::new(self.prefix.clone(), 1);
        let (mut found, mut unknown) = (Vec::new(), 0);
        for n in 0.. {
            let org = format!("org{n:05}");
            let secret = format!("{org}-secret0");
            let (status, _) = self.get(client, &secret, "/v1/studies?pageSize=1").await?;
            match status {
                200 => {
                    unknown = 0;
                    found.push((org, secret));
                }
                // The stream ends inside a few organizations' histories: some of their keys are missing.
                401 if unknown < 8 => unknown += 1,
                401 => break,
                other => bail!("the API answered {other} to {org}'s studies while finding the organizations"),
            }
        }
        let mut targets = Vec::new();
        for i in 0..self.sample.min(found.len()) {
            let (org, secret) = &found[i * found.len() / self.sample.min(found.len())];
            if let Some(interview) = self.an_interview(client, secret).await? {
                let slot = slot(&keys.org_epoch(org));
                targets.push(Target { org: org.clone(), secret: secret.clone(), slot, interview });
            }
        }
        if targets.is_empty() {
            bail!("the API serves no organization with an interview ({} organizations found)", found.len());
        }
        Ok(targets)
    }

    /// The first interview the API lists in the organization's first page of studies.
    async fn an_interview(&self, client: &reqwest::Client, secret: &str) -> Result<Option<String>> {
        let (_, studies) = self.get(client, secret, "/v1/studies?pageSize=20").await?;
        for study in studies["items"].as_array().into_iter().flatten() {
            let id = study["id"].as_str().unwrap_or_default();
            let (_, interviews) = self.get(client, secret, &format!("/v1/studies/{id}/interviews?pageSize=1")).await?;
            if let Some(interview) = interviews["items"][0]["id"].as_str() {
                return Ok(Some(interview.to_string()));
            }
        }
        Ok(None)
    }

    async fn get(&self, client: &reqwest::Client, secret: &str, path: &str) -> Result<(u16, Value)> {
        let response = client.get(format!("{}{path}", self.api)).bearer_auth(secret).send().await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await.unwrap_or_default()))
    }
}

/// The last sequence of every study of the targets' organizations in the replayed stream, with its
/// organization.
fn last_sequences(seed: u64, events: usize, targets: &[Target]) -> Vec<(String, String, u64)> {
    let orgs: Vec<String> = targets.iter().map(|t| format!("{}-", t.org)).collect();
    let mut last: HashMap<String, (String, u64)> = HashMap::new();
    let mut stream = Stream::new(seed, events);
    while let Some(chunk) = stream.next_chunk() {
        for message in chunk.iter().filter(|m| m.topic == Topic::Study) {
            let Some(org) = orgs.iter().find(|o| message.key.starts_with(o.as_str())) else { continue };
            let event: Value = serde_json::from_slice(&message.value).expect("a generated event");
            let sequence = event["sequence"].as_u64().unwrap_or(0);
            let entry = last.entry(message.key.clone()).or_insert((org.trim_end_matches('-').to_string(), 0));
            entry.1 = entry.1.max(sequence);
        }
    }
    let mut studies: Vec<(String, String, u64)> = last.into_iter().map(|(id, (org, seq))| (id, org, seq)).collect();
    studies.sort();
    studies
}

/// Publishes `study.retitled` to the studies in turn, `rate` a second, each with its study's next
/// sequence, until told to stop.
async fn publish(
    brokers: String,
    topic: String,
    mut studies: Vec<(String, String, u64)>,
    rate: u32,
    stop: Arc<AtomicBool>,
    published: Arc<AtomicU64>,
) -> Result<()> {
    if studies.is_empty() {
        bail!("no study to update in the sampled organizations");
    }
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &brokers).set("linger.ms", "5").create()?;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    let mut next = 0;
    while !stop.load(Ordering::Relaxed) {
        ticks.tick().await;
        let count = studies.len();
        let (study, org, sequence) = &mut studies[next % count];
        next += 1;
        *sequence += 1;
        let at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let (id, kind) = (format!("{study}-{sequence}"), "study.retitled");
        let fields = Envelope { event_id: &id, kind, org, aggregate: study, sequence: *sequence, at: &at };
        let value = envelope(&fields, json!({ "internalTitle": format!("Retitled during the failover {sequence}") }));
        let payload = value.to_string();
        producer
            .send(FutureRecord::to(&topic).key(study.as_str()).payload(&payload), Duration::from_secs(30))
            .await
            .map_err(|(e, _)| e)
            .context("publishing an update")?;
        published.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
