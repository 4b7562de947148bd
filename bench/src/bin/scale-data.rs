//! What the scale benchmark (`scripts/bench-scale`) needs besides the binaries:
//!
//! - `publish`: a run's topics holding `orgs` organizations, each with one API key (`<org>-secret`) and
//!   `studies` completed studies;
//! - `secrets`: the organizations' keys, one a line (for wrk's script), at most `limit` of them, spread
//!   over every organization;
//! - `keep`: asks an API instance for every organization's first page of studies with its key, a few
//!   requests at a time, `rounds` times: what makes the instance keep each organization (its key, its
//!   epoch, the page); fails on any answer but 200.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use benchmarks::broker::{bulk_producer, create_topics};
use benchmarks::report::Line;
use clap::{Parser, Subcommand};
use end_to_end::events::{envelope, key_sha256, Envelope};
use futures::StreamExt;
use rdkafka::producer::FutureRecord;
use serde_json::{json, Value};

#[derive(Parser)]
#[command(about = "The scale benchmark's organizations: published, listed, and kept by an API instance.")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Creates the run's topics and publishes its organizations.
    Publish {
        /// Kafka bootstrap servers.
        #[arg(long, env = "KAFKA_BROKERS")]
        brokers: String,
        #[arg(long)]
        run: String,
        #[arg(long)]
        orgs: usize,
        /// Completed studies of each organization.
        #[arg(long)]
        studies: usize,
    },
    /// Prints the organizations' keys, one a line, at most `limit`, spread over every organization.
    Secrets {
        #[arg(long)]
        run: String,
        #[arg(long)]
        orgs: usize,
        #[arg(long, default_value_t = 10_000)]
        limit: usize,
    },
    /// Asks an API instance for every organization's first page, `rounds` times.
    Keep {
        /// The instance's base URL.
        #[arg(long)]
        api: String,
        #[arg(long)]
        run: String,
        #[arg(long)]
        orgs: usize,
        #[arg(long, default_value_t = 2)]
        rounds: usize,
    },
}

fn org(run: &str, i: usize) -> String {
    format!("{run}-o{i:06}")
}

fn secret(run: &str, i: usize) -> String {
    format!("{}-secret", org(run, i))
}

fn message(org: &str, id: &str, sequence: u64, kind: &str, data: Value) -> Vec<u8> {
    let event_id = format!("{id}/{sequence}");
    let at = "2026-03-01T10:00:00Z";
    envelope(&Envelope { event_id: &event_id, kind, org, aggregate: id, sequence, at }, data).to_string().into_bytes()
}

async fn publish(brokers: &str, run: &str, orgs: usize, studies: usize) -> Result<()> {
    let topics = create_topics(brokers, run).await?;
    let producer = bulk_producer(brokers)?;
    let started = Instant::now();
    let mut sent = 0usize;
    let mut pending = Vec::new();
    for i in 0..orgs {
        let org = org(run, i);
        let key = format!("{org}-k");
        let data = json!({"name": "scale", "keySha256": key_sha256(&secret(run, i))});
        // Topics in `Topic::ALL`'s order: studies, interviews, API keys.
        pending.push((2, key.clone(), message(&org, &key, 1, "api_key.created", data)));
        for s in 0..studies {
            let id = format!("{org}-s{s}");
            let title = json!({"internalTitle": format!("study {s}")});
            pending.push((0, id.clone(), message(&org, &id, 1, "study.created", title)));
            pending.push((0, id.clone(), message(&org, &id, 2, "study.launched", json!({}))));
            let done = json!({"completedAt": format!("2026-03-01T10:{:02}:{:02}Z", (s / 60) % 60, s % 60)});
            pending.push((0, id.clone(), message(&org, &id, 3, "study.completed", done)));
        }
        if pending.len() >= 20_000 || i + 1 == orgs {
            let sends = pending.iter().map(|(topic, key, value)| {
                producer.send(FutureRecord::to(&topics[*topic]).key(key).payload(value), Duration::from_secs(300))
            });
            for result in futures::future::join_all(sends).await {
                result.map_err(|(e, _)| e).context("publishing")?;
            }
            sent += pending.len();
            pending.clear();
        }
    }
    Line::default().rate(sent as u64, started.elapsed().as_secs_f64()).print();
    Ok(())
}

async fn keep(api: &str, run: &str, orgs: usize, rounds: usize) -> Result<()> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).pool_max_idle_per_host(32).build()?;
    let api = api.trim_end_matches('/');
    let started = Instant::now();
    for _ in 0..rounds {
        let asked = futures::stream::iter(0..orgs)
            .map(|i| {
                let (client, url, secret) = (&client, format!("{api}/v1/studies?pageSize=20"), secret(run, i));
                async move { client.get(url).bearer_auth(secret).send().await.map(|r| r.status().as_u16()) }
            })
            .buffer_unordered(16);
        let statuses: Vec<_> = asked.collect().await;
        let refused = statuses.iter().filter(|s| !matches!(s, Ok(200))).count();
        if refused > 0 {
            bail!("{refused} of {orgs} organizations' pages were not answered 200");
        }
    }
    Line::default()
        .with("requests", orgs * rounds)
        .with("seconds", format!("{:.1}", started.elapsed().as_secs_f64()))
        .print();
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    match Args::parse().command {
        Command::Publish { brokers, run, orgs, studies } => publish(&brokers, &run, orgs, studies).await,
        Command::Secrets { run, orgs, limit } => {
            let step = orgs.div_ceil(limit.max(1)).max(1);
            for i in (0..orgs).step_by(step) {
                println!("{}", secret(&run, i));
            }
            Ok(())
        }
        Command::Keep { api, run, orgs, rounds } => keep(&api, &run, orgs, rounds).await,
    }
}
