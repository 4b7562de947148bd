//! Preloads the replay benchmark's stream into fresh topics `<run>-study-events`, `<run>-interview-events`
//! and `<run>-api-key-events` (3 partitions each, plus their dead-letter topics).

use std::time::Instant;

use anyhow::Result;
use benchmarks::report::Line;
use benchmarks::{broker, stream::Stream};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Publishes the generated event stream to fresh topics of a benchmark run.")]
struct Args {
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: String,
    /// Name of the run; prefixes the topics.
    #[arg(long)]
    run: String,
    /// Messages in the stream.
    #[arg(long, env = "EVENTS", default_value_t = 1_000_000)]
    events: usize,
    /// Seed of the stream.
    #[arg(long, env = "SEED", default_value_t = 7)]
    seed: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let topics = broker::create_topics(&args.brokers, &args.run).await?;
    let started = Instant::now();
    let sent = broker::publish(&args.brokers, &topics, Stream::new(args.seed, args.events)).await?;
    let seconds = started.elapsed().as_secs_f64();
    Line::default().rate(sent as u64, seconds).print();
    Ok(())
}
