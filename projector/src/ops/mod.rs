//! The operator's commands, one file each, and the command line that names them. All of the projector's
//! printing lives here; the library below only returns what it found or did.

mod digest;
mod dlq;
mod generations;
mod rebuild;
mod repair;
mod status;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::Config;
use crate::Error;

/// The command line: the projector's configuration, and what to do (by default, project).
#[derive(Debug, Parser)]
#[command(
    name = "projector",
    version = crate::VERSION,
    about = "Projects study, interview and API-key events from Kafka into the Redis read model."
)]
pub struct Cli {
    #[command(flatten)]
    pub config: Config,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Project live events (the default).
    Run,
    /// Rebuild the read model into a new generation by replaying every topic from its earliest offset,
    /// while the current generation keeps serving; switch to it once caught up.
    Rebuild {
        /// Seconds to keep the old generation after the switch, for requests still reading it.
        #[arg(long, env = "REBUILD_GRACE_SECS", default_value_t = 60)]
        grace_secs: u64,
        /// Messages behind the end of the topics at which the handover starts.
        #[arg(long, env = "REBUILD_HANDOVER_LAG", default_value_t = 1000)]
        handover_lag: i64,
        /// Seconds to wait for every live projector to pause before retrying the handover later.
        #[arg(long, env = "REBUILD_HANDOVER_TIMEOUT_SECS", default_value_t = 30)]
        handover_timeout_secs: u64,
        /// Seconds to wait for the rebuild lock (a rebuild that died releases it within 10 s).
        #[arg(long, env = "REBUILD_LOCK_WAIT_SECS", default_value_t = 15)]
        lock_wait_secs: u64,
    },
    /// Redo one organization's data, or one aggregate's, from the topics while the API serves it, and
    /// swap it in atomically (the live projectors' writes to it wait for a moment at the end).
    Repair {
        /// The organization whose studies, interviews and API keys to redo.
        #[arg(long, required_unless_present = "aggregate", conflicts_with = "aggregate")]
        organization: Option<String>,
        /// One aggregate to redo, as TOPIC:ID (the topic by name, or `study`, `interview`, `apikey`).
        #[arg(long)]
        aggregate: Option<String>,
        /// How many times in all to run the repair when a run changes nothing because Redis failed under
        /// it or lost what it held or staged (1: never again).
        #[arg(long, env = "REPAIR_ATTEMPTS", default_value_t = crate::repair::ATTEMPTS,
              value_parser = clap::value_parser!(u64).range(1..=10))]
        attempts: u64,
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Print a canonical, order-independent digest of a generation (by default the active one).
    Digest {
        /// The generation to digest.
        #[arg(long)]
        generation: Option<u64>,
    },
    /// List the generations Redis holds keys of and what each is (active, being rebuilt, written by a live
    /// projector, or left behind); delete one left behind.
    Generations {
        /// Delete this generation, if it is left behind: neither active, nor being rebuilt, nor written by
        /// a live projector.
        #[arg(long, value_name = "GENERATION")]
        delete: Option<u64>,
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Print the active and building generations, live projectors, lag per partition, dead-letter depth.
    Status {
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// List dead letters with their reasons, or replay them through the projector.
    Dlq {
        #[command(subcommand)]
        action: DlqAction,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum DlqAction {
    /// Print every dead letter: topic, offset, key, reason.
    List {
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Publish every dead letter not replayed yet back to its original topic; one still bad returns to
    /// the dead-letter topic with its reason. An aggregate that moved on past a letter (its later events
    /// were applied) is repaired with the letter in its place.
    Replay {
        /// A corrected event for one letter, as `TOPIC/PARTITION@OFFSET=FILE`: the letter as `dlq list`
        /// names it, and a file holding the value to publish instead of the letter's own (repeatable).
        #[arg(long, value_name = "LETTER=FILE")]
        corrected: Vec<String>,
        /// List the letters a replay would publish (with the corrected values given), and publish,
        /// commit and repair nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

/// How a command prints what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Lines for a person.
    Text,
    /// One JSON document for automation; its fields are the report's, in camelCase.
    Json,
}

/// Does what the command line says, printing what an operator asked for; the exit code is 0 but for
/// `status`, whose code says what it found.
pub async fn run(cli: Cli) -> Result<std::process::ExitCode, Error> {
    let mut config = cli.config;
    config.load_kafka_properties()?;
    let done = match cli.command.unwrap_or(Command::Run) {
        Command::Status { output } => return status::run(&config, output).await,
        Command::Run => crate::run(config, shared::process::shutdown_signal()).await,
        Command::Rebuild { grace_secs, handover_lag, handover_timeout_secs, lock_wait_secs } => {
            let options = rebuild::options(grace_secs, handover_lag, handover_timeout_secs, lock_wait_secs);
            rebuild::run(config, options).await
        }
        Command::Repair { organization, aggregate, attempts, output } => {
            let target = match (organization, aggregate) {
                (Some(org), _) => crate::repair::Target::Organization(org),
                (None, Some(spec)) => repair::aggregate(&config, &spec)?,
                (None, None) => unreachable!("clap requires one"),
            };
            repair::run(&config, target, attempts, output).await
        }
        Command::Digest { generation } => digest::run(&config, generation).await,
        Command::Generations { delete, output } => generations::run(&config, delete, output).await,
        Command::Dlq { action: DlqAction::List { output } } => dlq::list(&config, output),
        Command::Dlq { action: DlqAction::Replay { corrected, dry_run, output } } => {
            dlq::replay(&config, &corrected, dry_run, output).await
        }
    };
    done.map(|()| std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Cli;

    #[test]
    fn the_redis_options_parse_and_the_password_never_prints() {
        let cli = Cli::parse_from([
            "projector",
            "--redis-url",
            "rediss://projector:hunter2@redis.example:6380",
            "--redis-ca-file",
            "/etc/redis/ca.pem",
            "--redis-client-cert-file",
            "/etc/redis/client.pem",
            "--redis-client-key-file",
            "/etc/redis/client.key",
            "status",
        ]);
        let tls = &cli.config.redis.tls;
        assert_eq!(tls.ca_file.as_deref(), Some(std::path::Path::new("/etc/redis/ca.pem")));
        assert!(tls.client_cert_file.is_some() && tls.client_key_file.is_some());
        let shown = format!("{cli:?} {} {:?}", cli.config.redis.target(), cli.config.redis.target());
        assert!(!shown.contains("hunter2") && shown.contains("projector:***@redis.example:6380"), "{shown}");
        assert_eq!(cli.config.redis.url.expose(), "rediss://projector:hunter2@redis.example:6380");
    }

    #[test]
    fn every_setting_has_its_row_and_default_in_the_configuration_document() {
        use clap::CommandFactory;
        let document = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md"));
        let problems = shared::settings_doc::undocumented(&Cli::command(), document);
        assert!(problems.is_empty(), "docs/configuration.md: {problems:#?}");
    }

    #[test]
    fn connection_flags_are_taken_after_a_subcommand_too() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let after = Cli::try_parse_from([
            "projector",
            "status",
            "--brokers",
            "kafka:9092",
            "--redis-url",
            "redis://redis:6379",
            "--key-prefix",
            "rm2",
            "--kafka-property",
            "client.id=ops",
            "--output",
            "json",
        ])
        .expect("flags after the subcommand");
        assert_eq!(after.config.brokers.as_deref(), Some("kafka:9092"));
        assert_eq!(after.config.redis.url.expose(), "redis://redis:6379");
        assert_eq!(after.config.redis.key_prefix, "rm2");
        assert_eq!(after.config.kafka.kafka_property, [("client.id".to_string(), "ops".to_string())]);
        assert!(matches!(after.command, Some(super::Command::Status { .. })));
    }
}
