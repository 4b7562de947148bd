//! The demo's broker: librdkafka's mock cluster, held in this process's memory, with the product's topics
//! and their dead-letter topics. It runs the consumer-group protocol and keeps commits with their
//! metadata, so the projector runs on its default membership (`group`) against it; and it comes with the
//! Kafka client the build already links, so a first run compiles no broker. Kafka clients reach it on
//! loopback (`kcat` too). What it holds is gone when it stops.
//!
//! Writes its bootstrap servers to `--brokers-file` once the topics exist, then runs until SIGTERM or
//! SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::ClientConfig;
use tokio::signal::unix::{signal, SignalKind};

/// Runs a Kafka-protocol broker in memory for the demo (librdkafka's mock cluster).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Where to write the bootstrap servers (host:port, comma-separated) once the topics exist.
    #[arg(long, env = "DEMO_KAFKA_BROKERS_FILE")]
    brokers_file: PathBuf,
    /// The topics to create; each gets a dead-letter topic (`<topic>.dlq`) beside it.
    #[arg(
        long,
        env = "DEMO_KAFKA_TOPICS",
        value_delimiter = ',',
        default_value = "study-events,interview-events,api-key-events"
    )]
    topics: Vec<String>,
    /// Partitions of every topic.
    #[arg(long, env = "DEMO_KAFKA_PARTITIONS", default_value_t = 3)]
    partitions: i32,
    /// Brokers in the cluster.
    #[arg(long, env = "DEMO_KAFKA_BROKERS", default_value_t = 1)]
    brokers: u16,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo-kafka: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> anyhow::Result<()> {
    let (mut terminate, mut interrupt) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    // The cluster lives as long as the client that owns it.
    let owner: BaseProducer = ClientConfig::new().set("test.mock.num.brokers", args.brokers.to_string()).create()?;
    let cluster = owner.client().mock_cluster().ok_or_else(|| anyhow::anyhow!("the client owns no mock cluster"))?;
    for topic in &args.topics {
        for name in [topic.clone(), format!("{topic}.dlq")] {
            cluster.create_topic(&name, args.partitions, 1)?;
        }
    }
    let brokers = cluster.bootstrap_servers();
    let partial = args.brokers_file.with_extension("tmp");
    std::fs::write(&partial, format!("{brokers}\n"))?;
    std::fs::rename(&partial, &args.brokers_file)?;
    println!("demo-kafka: {} topics of {} partitions on {brokers}", args.topics.len() * 2, args.partitions);
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    let _ = std::fs::remove_file(&args.brokers_file);
    println!("demo-kafka: stopped");
    Ok(())
}
