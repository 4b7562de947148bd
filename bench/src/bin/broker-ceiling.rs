//! The broker's read ceiling: a plain consumer reads every partition of a run's topics from the start to
//! the end and discards the messages. It reads with the projector's Kafka properties from the environment
//! (`KAFKA_PROPERTY_*`) and those it is given, and reports its rate from its start and, leaving the start-up and the end out, over the
//! middle of the read: from the 10th to the 90th percentile of the messages.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use benchmarks::broker;
use benchmarks::report::Line;
use clap::Parser;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

#[derive(Parser)]
#[command(about = "Reads a benchmark run's topics to their end and discards them, as fast as it can.")]
struct Args {
    /// Kafka bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    brokers: String,
    /// Name of the run whose topics to read.
    #[arg(long)]
    run: String,
    /// A librdkafka property of the consumer, KEY=VALUE (repeatable), over the projector's properties from
    /// the environment (`KAFKA_PROPERTY_*`) and librdkafka's defaults.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let topics = broker::topic_names(&args.run);
    // What `broker::plain_consumer` sets, and the properties given.
    let mut settings = ClientConfig::new();
    settings
        .set("bootstrap.servers", &args.brokers)
        .set("group.id", format!("{}-ceiling", args.run))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    // The projector's properties from the environment (`KAFKA_PROPERTY_*`: the local stack's
    // `fetch.wait.max.ms`), then those given.
    let from_env = projector::Properties::load(&projector::KafkaOptions::default(), std::env::vars());
    from_env.map_err(anyhow::Error::msg)?.apply(&mut settings);
    for property in &args.properties {
        let Some((key, value)) = property.split_once('=') else {
            bail!("--property takes KEY=VALUE, not {property:?}")
        };
        settings.set(key, value);
    }
    let consumer: BaseConsumer = settings.create()?;
    let partitions = broker::watermarks(&consumer, &topics)?;
    let total: i64 = partitions.iter().map(|(_, _, low, high)| high - low).sum();
    let mut list = TopicPartitionList::new();
    for (topic, partition, _, _) in &partitions {
        list.add_partition_offset(topic, *partition, Offset::Beginning)?;
    }
    let started = Instant::now();
    consumer.assign(&list)?;
    let (mut read, mut bytes) = (0i64, 0usize);
    let (tenth, ninetieth) = (total / 10, total * 9 / 10);
    let (mut at_tenth, mut at_ninetieth) = (None, None);
    while read < total {
        match consumer.poll(Duration::from_secs(30)) {
            Some(Ok(message)) => {
                read += 1;
                bytes += message.payload_len();
                if read == tenth {
                    at_tenth = Some(Instant::now());
                }
                if read == ninetieth {
                    at_ninetieth = Some(Instant::now());
                }
            }
            Some(Err(e)) => bail!("consumer error: {e}"),
            None => bail!("nothing arrived for 30 s after {read} of {total} messages"),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let middle = match (at_tenth, at_ninetieth) {
        (Some(a), Some(b)) => (b - a).as_secs_f64(),
        _ => 0.0,
    };
    Line::default()
        .rate(read as u64, seconds)
        .with("bytes", bytes)
        .with("steady_seconds", format!("{middle:.2}"))
        .with("steady_events_per_sec", format!("{:.0}", (ninetieth - tenth) as f64 / middle.max(1e-9)))
        .print();
    Ok(())
}
