//! The projector's own pipeline without the broker: the replay stream, generated in memory, decoded,
//! grouped and applied to Redis in batches by the projector's code.

use std::time::{Duration, Instant};

use anyhow::Result;
use benchmarks::report::Line;
use benchmarks::{apply, stream::Stream};
use clap::Parser;
use shared::redis_url::Target;

#[derive(Parser)]
#[command(about = "Decodes and applies the generated stream from memory in batches; reports events per second.")]
struct Args {
    /// The read model's Redis; with `--redis-cluster`, comma-separated nodes of a Redis Cluster.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: String,
    /// Write to a Redis Cluster, as the projector does with REDIS_CLUSTER=true.
    #[arg(long, env = "REDIS_CLUSTER", default_value_t = false)]
    redis_cluster: bool,
    /// Key prefix to write under (new for each run).
    #[arg(long)]
    prefix: String,
    /// Messages in the stream.
    #[arg(long, env = "EVENTS", default_value_t = 1_000_000)]
    events: usize,
    /// Seed of the stream.
    #[arg(long, env = "SEED", default_value_t = 7)]
    seed: u64,
    /// Messages per batch, as the projector's BATCH_SIZE.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// The read model's layout: this build's, or an earlier one to compare what a layout costs.
    #[arg(long, env = "LAYOUT", default_value_t = shared::layout::LAYOUT)]
    layout: u32,
    /// Stop after this many seconds and report the rate so far.
    #[arg(long, default_value_t = 3600)]
    max_secs: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let messages = Stream::collect_all(args.seed, args.events);
    let target = Target::new(&args.redis_url, args.redis_cluster);
    let store = apply::store_of_layout(&target, &args.prefix, args.layout).await?;
    let mut pipeline = apply::Pipeline::new(store);
    let limit = Duration::from_secs(args.max_secs);
    let mut done = 0;
    let started = Instant::now();
    for batch in messages.chunks(args.batch) {
        pipeline.apply(batch).await?;
        done += batch.len();
        if started.elapsed() >= limit {
            break;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Line::default().rate(done as u64, seconds).with("applied", pipeline.applied()).print();
    Ok(())
}
