//! The demo's broker: librdkafka's mock cluster, held in this process's memory, with the product's topics
//! and their dead-letter topics. It runs the consumer-group protocol and keeps commits with their
//! metadata, so the projector runs on its default membership (`group`) against it; and it comes with the
//! Kafka client the build already links, so a first run compiles no broker. Kafka clients reach it on
//! loopback (`kcat` too). What it holds is gone when it stops.
//!
//! The end-to-end suite's group leg runs on it as well (docs/testing.md): the mock answers no
//! `CreateTopics`, and a broker fault there is a broker taken down and up rather than a process killed, so
//! with `--control-file` it takes those orders on a loopback port of its own, one per line:
//! `create <topic> <partitions>`, `down <broker id>`, `up <broker id>` (ids count from 1); each is
//! answered `ok` or `error <why>`.
//!
//! Writes its bootstrap servers to `--brokers-file` once the topics exist, then runs until SIGTERM or
//! SIGINT.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, DefaultProducerContext, Producer};
use rdkafka::ClientConfig;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot};

/// Runs a Kafka-protocol broker in memory for the demo (librdkafka's mock cluster).
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Where to write the bootstrap servers (host:port, comma-separated) once the topics exist.
    #[arg(long, env = "DEMO_KAFKA_BROKERS_FILE")]
    brokers_file: PathBuf,
    /// The topics to create; each gets a dead-letter topic (`<topic>.dlq`) beside it. Empty: none.
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
    /// How many brokers the cluster has.
    #[arg(long, env = "DEMO_KAFKA_BROKER_COUNT", default_value_t = 1)]
    broker_count: u16,
    /// Where to write the address (host:port) of a loopback port that takes orders (topics created,
    /// brokers taken down and up; see above). Without it, no such port is opened.
    #[arg(long, env = "DEMO_KAFKA_CONTROL_FILE")]
    control_file: Option<PathBuf>,
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

/// One order from the control port.
#[derive(Debug, PartialEq, Eq)]
enum Order {
    Create { topic: String, partitions: i32 },
    Down(i32),
    Up(i32),
}

impl Order {
    fn parse(line: &str) -> Result<Self, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let number = |word: &str| word.parse::<i32>().map_err(|_| format!("not a number: {word}"));
        match words.as_slice() {
            ["create", topic, partitions] => {
                Ok(Order::Create { topic: topic.to_string(), partitions: number(partitions)? })
            }
            ["down", id] => Ok(Order::Down(number(id)?)),
            ["up", id] => Ok(Order::Up(number(id)?)),
            _ => Err(format!("unknown order: {line:?} (create <topic> <partitions> | down <id> | up <id>)")),
        }
    }

    fn carry_out(&self, cluster: &MockCluster<'_, DefaultProducerContext>) -> Result<(), String> {
        let done = match self {
            Order::Create { topic, partitions } => cluster.create_topic(topic, *partitions, 1),
            Order::Down(id) => cluster.broker_down(*id),
            Order::Up(id) => cluster.broker_up(*id),
        };
        done.map_err(|e| e.to_string())
    }
}

type Orders = mpsc::Sender<(Order, oneshot::Sender<Result<(), String>>)>;

async fn run(args: &Args) -> anyhow::Result<()> {
    let (mut terminate, mut interrupt) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    // The cluster lives as long as the client that owns it.
    let owner: BaseProducer =
        ClientConfig::new().set("test.mock.num.brokers", args.broker_count.to_string()).create()?;
    let cluster = owner.client().mock_cluster().ok_or_else(|| anyhow::anyhow!("the client owns no mock cluster"))?;
    for topic in args.topics.iter().filter(|t| !t.is_empty()) {
        for name in [topic.clone(), format!("{topic}.dlq")] {
            cluster.create_topic(&name, args.partitions, 1)?;
        }
    }
    // Connections hand their orders here: the cluster is used from this task only.
    let (orders, mut pending) = mpsc::channel(64);
    if let Some(file) = &args.control_file {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        write_atomically(file, &listener.local_addr()?.to_string())?;
        tokio::spawn(accept(listener, orders));
    }
    let brokers = cluster.bootstrap_servers();
    write_atomically(&args.brokers_file, &brokers)?;
    println!(
        "demo-kafka: {} topics of {} partitions on {brokers}",
        args.topics.iter().filter(|t| !t.is_empty()).count() * 2,
        args.partitions
    );
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            Some((order, reply)) = pending.recv() => {
                let done = order.carry_out(&cluster);
                println!("demo-kafka: {order:?}: {done:?}");
                let _ = reply.send(done);
            }
        }
    }
    for file in std::iter::once(&args.brokers_file).chain(&args.control_file) {
        let _ = std::fs::remove_file(file);
    }
    println!("demo-kafka: stopped");
    Ok(())
}

fn write_atomically(path: &Path, line: &str) -> std::io::Result<()> {
    let partial = path.with_extension("tmp");
    std::fs::write(&partial, format!("{line}\n"))?;
    std::fs::rename(&partial, path)
}

async fn accept(listener: TcpListener, orders: Orders) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve(stream, orders.clone()));
    }
}

async fn serve(stream: TcpStream, orders: Orders) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let done = match Order::parse(&line) {
            Ok(order) => {
                let (reply, answer) = oneshot::channel();
                if orders.send((order, reply)).await.is_err() {
                    return;
                }
                answer.await.unwrap_or_else(|_| Err("stopping".into()))
            }
            Err(e) => Err(e),
        };
        let answer = match done {
            Ok(()) => "ok\n".to_string(),
            Err(e) => format!("error {e}\n"),
        };
        if write.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Order;

    #[test]
    fn orders_are_read_from_their_words_and_anything_else_is_refused() {
        let create = Order::parse("create t-study-events 3");
        assert_eq!(create, Ok(Order::Create { topic: "t-study-events".into(), partitions: 3 }));
        assert_eq!(Order::parse("down 1"), Ok(Order::Down(1)));
        assert_eq!(Order::parse(" up  2 "), Ok(Order::Up(2)));
        assert!(Order::parse("create t").is_err());
        assert!(Order::parse("down one").is_err());
        assert!(Order::parse("delete t").is_err());
    }
}
