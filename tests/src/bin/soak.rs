//! The fault soak (see `end_to_end::soak`): `scripts/soak` runs it on the local stack's S3 server, with a
//! broker and a Redis of its own.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use end_to_end::soak::{self, OwnBroker};

/// How the soak's projectors share the partitions.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Membership {
    Redis,
    Group,
}

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
    /// How the projectors share the partitions: `redis` on a tansu of the soak's own (the local stack's
    /// membership), or `group` (the default in production) as members of the consumer group, on
    /// librdkafka's mock cluster (`demo-kafka`), whose broker is taken down and up for the broker faults.
    #[arg(long, env = "SOAK_MEMBERSHIP", value_enum, default_value_t = Membership::Redis)]
    membership: Membership,
    /// Directory of the logs of the projectors and operator commands it runs.
    #[arg(long, env = "SOAK_LOGS", default_value = "target/soak")]
    logs: std::path::PathBuf,
}

fn main() -> ExitCode {
    let args = Args::parse();
    std::fs::create_dir_all(&args.logs).expect("log directory");
    // Each run's logs of its own (the projectors append to theirs as they are started again).
    for log in ["projector-0", "projector-1", "rebuild", "repair"] {
        let _ = std::fs::remove_file(args.logs.join(format!("{log}.log")));
    }
    // What the API (it runs in this process) says, to read beside the projectors' logs.
    let api_log = std::fs::File::create(args.logs.join("api.log")).expect("the API's log file");
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("SOAK_LOG").unwrap_or_else(|_| "query_api=info".into()))
        .with_writer(std::sync::Mutex::new(api_log))
        .with_ansi(false)
        .init();
    let broker = match args.membership {
        Membership::Redis => OwnBroker::start(),
        Membership::Group => OwnBroker::start_mock(),
    };
    // Before any thread starts: every Kafka client of the soak, and the projectors it runs, use its broker.
    std::env::set_var("KAFKA_BROKERS", broker.address());
    if let Some(control) = broker.control() {
        std::env::set_var("MOCK_KAFKA_CONTROL", control);
    }
    if args.membership == Membership::Group {
        // The projectors as production runs them: group members, librdkafka's fetch wait (the local
        // stack's 10 ms is for tansu), the session the Kubernetes base sets unless one is given.
        std::env::set_var("PROJECTOR_MEMBERSHIP", "group");
        std::env::remove_var("KAFKA_PROPERTY_FETCH_WAIT_MAX_MS");
        for (name, value) in
            [("KAFKA_PROPERTY_SESSION_TIMEOUT_MS", "10000"), ("KAFKA_PROPERTY_HEARTBEAT_INTERVAL_MS", "3000")]
        {
            if std::env::var_os(name).is_none() {
                std::env::set_var(name, value);
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let options = soak::Options {
        duration: Duration::from_secs(args.seconds),
        seed: args.seed,
        cluster: args.cluster,
        logs: args.logs,
    };
    let logs = options.logs.clone();
    let report = runtime.block_on(soak::run(options, broker));
    println!("{report}");
    if args.membership == Membership::Group && !assigned_by_the_group(&logs) {
        println!("the projectors' logs say no partitions were assigned by the group: they were not group members");
        return ExitCode::FAILURE;
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Whether each projector's log says the group assigned it partitions at least once.
fn assigned_by_the_group(logs: &std::path::Path) -> bool {
    (0..soak::PROJECTORS).all(|i| {
        let log = std::fs::read_to_string(logs.join(format!("projector-{i}.log"))).unwrap_or_default();
        log.contains("partitions assigned by the group")
    })
}
