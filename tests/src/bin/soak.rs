//! The fault soak (see `end_to_end::soak`): `scripts/soak` runs it on the local stack's S3 server, with a
//! broker and a Redis of its own.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use end_to_end::soak::{self, OwnBroker};

/// Injects faults of every kind at random moments while events flow and a prober reads, then checks
/// that the read model equals a build from scratch and that no answer was wrong.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Seconds of faults.
    #[arg(long, env = "SOAK_SECONDS", default_value_t = 120)]
    seconds: u64,
    /// Seed of the scenario and of the faults' kinds and moments (the same seed, the same faults in order).
    #[arg(long, env = "SOAK_SEED", default_value_t = 0x50a4)]
    seed: u64,
    /// The read model on a Redis Cluster of three primaries with a replica each, rather than on one Redis.
    #[arg(long, env = "SOAK_CLUSTER")]
    cluster: bool,
    /// Directory of the logs of the projectors and operator commands it runs.
    #[arg(long, env = "SOAK_LOGS", default_value = "target/soak")]
    logs: std::path::PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    std::fs::create_dir_all(&args.logs).expect("log directory");
    // What the API (it runs in this process) says, to read beside the projectors' logs.
    let api_log = std::fs::File::create(args.logs.join("api.log")).expect("the API's log file");
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("SOAK_LOG").unwrap_or_else(|_| "query_api=info".into()))
        .with_writer(std::sync::Mutex::new(api_log))
        .with_ansi(false)
        .init();
    let broker = OwnBroker::start();
    // Before any thread starts: every Kafka client of the soak, and the projectors it runs, use its broker.
    std::env::set_var("KAFKA_BROKERS", broker.address());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let options = soak::Options {
        duration: Duration::from_secs(args.seconds),
        seed: args.seed,
        cluster: args.cluster,
        logs: args.logs,
    };
    let report = runtime.block_on(soak::run(options, broker));
    println!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
