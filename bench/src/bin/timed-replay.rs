//! Times the projector binary replaying a run's topics: from its start until its consumer group has
//! committed every message (or a time limit), with its peak resident memory; and, leaving its start-up
//! and its end out, over the middle of the replay: from the moment the group had committed a tenth of the
//! messages to the moment it had committed nine tenths (polled every 100 ms, a request to the broker each).

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use benchmarks::broker;
use benchmarks::report::{peak_rss_kib, Line};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Runs the projector over a benchmark run's topics and reports events applied per second.")]
struct Args {
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: String,
    /// Name of the run whose topics to replay.
    #[arg(long)]
    run: String,
    /// The projector binary; it gets this environment plus the run's topic names.
    #[arg(long)]
    projector: String,
    /// The projector's consumer group (new for each replay).
    #[arg(long, env = "PROJECTOR_GROUP_ID")]
    group: String,
    /// Stop after this many seconds and report the rate so far.
    #[arg(long, default_value_t = 3600)]
    max_secs: u64,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let topics = broker::topic_names(&args.run);
    let inspector = broker::plain_consumer(&args.brokers, &args.group)?;
    let partitions = broker::watermarks(&inspector, &topics)?;
    let total: i64 = partitions.iter().map(|(_, _, low, high)| high - low).sum();
    let started = Instant::now();
    let mut child = Command::new(&args.projector)
        .arg("run")
        .env("STUDY_TOPIC", &topics[0])
        .env("INTERVIEW_TOPIC", &topics[1])
        .env("API_KEY_TOPIC", &topics[2])
        .env("PROJECTOR_GROUP_ID", &args.group)
        .spawn()
        .context("starting the projector")?;
    let limit = Duration::from_secs(args.max_secs);
    let mut first_commit = None;
    let (mut tenth, mut ninetieth) = (None, None);
    let mut applied = 0;
    while applied < total && started.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the projector exited early: {status}");
        }
        applied = broker::committed_messages(&inspector, &partitions)?;
        let at = (started.elapsed().as_secs_f64(), applied);
        if applied > 0 && first_commit.is_none() {
            first_commit = Some(at.0);
        }
        if applied >= total / 10 && tenth.is_none() {
            tenth = Some(at);
        }
        if applied >= total * 9 / 10 && ninetieth.is_none() {
            ninetieth = Some(at);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let first_secs = first_commit.unwrap_or(seconds);
    let (steady, steady_events) = match (tenth, ninetieth) {
        (Some((a, from)), Some((b, to))) => (b - a, to - from),
        _ => (0.0, 0),
    };
    let rss = peak_rss_kib(child.id()).unwrap_or(0);
    child.kill()?;
    child.wait()?;
    Line::default()
        .rate(applied as u64, seconds)
        .with("of", total)
        .with("first_commit_secs", format!("{first_secs:.2}"))
        .with("steady_seconds", format!("{steady:.2}"))
        .with("steady_events_per_sec", format!("{:.0}", steady_events as f64 / steady.max(1e-9)))
        .with("peak_rss_kib", rss)
        .print();
    Ok(())
}
