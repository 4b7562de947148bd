//! Command-line and environment configuration of the projector.

use std::time::Duration;

use clap::Parser;
use shared::connection::Settings;
use shared::redis_options::RedisOptions;
use shared::redis_tls::Tls;
use shared::Topic;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "projector",
    version = crate::VERSION,
    about = "Projects study, interview and API-key events from Kafka into the Redis read model."
)]
pub struct Config {
    /// Kafka bootstrap servers, comma-separated host:port; by default bootstrap.servers of the Kafka
    /// properties, or 127.0.0.1:9092.
    #[arg(global = true, long, env = "KAFKA_BROKERS")]
    pub brokers: Option<String>,

    #[command(flatten)]
    pub kafka: KafkaOptions,

    /// The Kafka properties read from `kafka`, once loaded (see [`Config::load_kafka_properties`]).
    #[arg(skip)]
    pub kafka_properties: Option<Properties>,

    /// Consumer group id; every instance of one projection shares it.
    #[arg(global = true, long, env = "PROJECTOR_GROUP_ID", default_value = "read-model-projector")]
    pub group_id: String,

    /// Topic of study events.
    #[arg(global = true, long, env = "STUDY_TOPIC", default_value = "study-events")]
    pub study_topic: String,

    /// Topic of interview events.
    #[arg(global = true, long, env = "INTERVIEW_TOPIC", default_value = "interview-events")]
    pub interview_topic: String,

    /// Topic of organization API-key events.
    #[arg(global = true, long, env = "API_KEY_TOPIC", default_value = "api-key-events")]
    pub api_key_topic: String,

    #[command(flatten)]
    pub redis: RedisOptions,

    /// Generation to write; by default the active one (1 on a new Redis).
    #[arg(global = true, long, env = "PROJECTOR_GENERATION")]
    pub generation: Option<u64>,

    /// Most messages applied in one batch (one set of pipelined Redis round trips and one offset commit).
    #[arg(global = true, long, env = "BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    /// How long a batch waits to fill up before it is applied, in milliseconds; 0 takes what the broker
    /// has already delivered and waits for nothing more (while a backlog is read, batches fill anyway: the
    /// client fetches ahead).
    #[arg(global = true, long, env = "BATCH_LINGER_MS", default_value_t = 0)]
    pub batch_linger_ms: u64,

    /// Address of the HTTP server of /metrics, /livez and /readyz; `off` to run none.
    #[arg(global = true, long, env = "PROJECTOR_HTTP_ADDR", default_value = "127.0.0.1:9464")]
    pub http_addr: OptionalAddr,

    /// Seconds without progress, while behind, after which /readyz reports the projector stuck.
    #[arg(global = true, long, env = "PROJECTOR_STALL_AFTER_SECS", default_value_t = 60)]
    pub stall_after_secs: u64,

    /// Seconds without progress, while behind, after which /livez fails too, so that Kubernetes restarts
    /// the stuck projector (a fresh start reads again from what Redis holds); 0: never.
    #[arg(global = true, long, env = "PROJECTOR_RESTART_STUCK_AFTER_SECS", default_value_t = 300)]
    pub restart_stuck_after_secs: u64,

    /// The dead-letter limit: how many of a partition's latest messages count. Once more than
    /// DEAD_LETTER_LIMIT_RATIO of them, and at least DEAD_LETTER_LIMIT_MIN, would be set aside as poison,
    /// the partition halts instead (a broken release, a write script Redis does not load), is reported by
    /// /readyz and `projector_partitions_halted`, and is read again every DEAD_LETTER_LIMIT_RETRY_SECS.
    #[arg(global = true, long, env = "DEAD_LETTER_LIMIT_WINDOW", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub dead_letter_limit_window: u32,

    /// The share of dead letters among a partition's latest messages above which it halts; 1 turns the
    /// limit off (every poison message is set aside, however many).
    #[arg(global = true, long, env = "DEAD_LETTER_LIMIT_RATIO", default_value_t = 0.5)]
    pub dead_letter_limit_ratio: f64,

    /// The fewest dead letters among a partition's latest messages that halt it.
    #[arg(global = true, long, env = "DEAD_LETTER_LIMIT_MIN", default_value_t = 20)]
    pub dead_letter_limit_min: u32,

    /// Seconds a partition halted by the dead-letter limit waits before it is read again from where it
    /// stopped (it goes on if its message there now goes through).
    #[arg(global = true, long, env = "DEAD_LETTER_LIMIT_RETRY_SECS", default_value_t = 30)]
    pub dead_letter_limit_retry_secs: u64,

    /// How the live instances of one projection share the partitions. `group`: they are members of the
    /// Kafka consumer group PROJECTOR_GROUP_ID, whose coordinator assigns the partitions
    /// (cooperative-sticky, or KIP-848's `group.protocol=consumer` when a Kafka property asks for it);
    /// each partition is read from the position the read model holds. `redis`: they report themselves
    /// in Redis and split the partitions by rendezvous hashing, for a broker whose group coordinator does
    /// not rebalance correctly (see docs/configuration.md).
    #[arg(global = true, long, env = "PROJECTOR_MEMBERSHIP", value_enum, default_value_t = Membership::Group)]
    pub membership: Membership,

    /// Log format.
    #[arg(global = true, long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Who decides which live instance reads which partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Membership {
    /// The broker's consumer-group coordinator.
    Group,
    /// The instances themselves, through their reports in Redis.
    Redis,
}

pub use crate::source::{KafkaOptions, Properties};
pub use shared::process::{LogFormat, OptionalAddr};

impl Config {
    /// Refuses settings that would break the read model's key layout.
    pub fn validate(&self) -> Result<(), crate::Error> {
        self.redis.validate().map_err(crate::Error::Config)?;
        if !(self.dead_letter_limit_ratio > 0.0 && self.dead_letter_limit_ratio <= 1.0) {
            return Err(crate::Error::Config("DEAD_LETTER_LIMIT_RATIO must be above 0 and at most 1".into()));
        }
        Ok(())
    }

    /// Reads the operator's Kafka properties (file, environment, flags) once; every client created
    /// afterwards carries them. Logs their names, never their values.
    pub fn load_kafka_properties(&mut self) -> Result<(), crate::Error> {
        if self.kafka_properties.is_none() {
            let properties = Properties::load(&self.kafka, std::env::vars()).map_err(crate::Error::Config)?;
            if !properties.names().is_empty() {
                tracing::info!(properties = ?properties.names(), "kafka client properties set (values not logged)");
            }
            self.kafka_properties = Some(properties);
        }
        Ok(())
    }

    /// The operator's Kafka properties (none until loaded).
    pub fn kafka_properties(&self) -> Properties {
        self.kafka_properties.clone().unwrap_or_default()
    }

    /// The brokers to bootstrap from.
    pub fn brokers(&self) -> String {
        self.kafka_properties().brokers(self.brokers.as_deref())
    }

    /// The configured name of a topic.
    pub fn topic_name(&self, topic: Topic) -> &str {
        match topic {
            Topic::Study => &self.study_topic,
            Topic::Interview => &self.interview_topic,
            Topic::ApiKey => &self.api_key_topic,
        }
    }

    /// Which contract topic a configured topic name is.
    pub fn topic_of(&self, name: &str) -> Option<Topic> {
        Topic::ALL.into_iter().find(|t| self.topic_name(*t) == name)
    }

    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.batch_linger_ms)
    }

    /// The certificates a rediss:// connection trusts and presents, read from their files.
    pub fn redis_tls(&self) -> Result<Tls, crate::Error> {
        self.redis.tls.load(&self.redis.target()).map_err(crate::Error::RedisTls)
    }

    pub fn redis_settings(&self) -> Settings {
        Settings { timeout: self.redis.timeout(), cluster_retries: 12 }
    }

    pub fn stall_after(&self) -> Duration {
        Duration::from_secs(self.stall_after_secs)
    }

    /// How long stuck before `/livez` fails; `None`: never.
    pub fn restart_stuck_after(&self) -> Option<Duration> {
        (self.restart_stuck_after_secs > 0).then(|| Duration::from_secs(self.restart_stuck_after_secs))
    }

    /// When a partition's poison halts it rather than being set aside.
    pub fn dead_letter_limit(&self) -> crate::source::LimitSettings {
        crate::source::LimitSettings {
            window: self.dead_letter_limit_window as usize,
            ratio: self.dead_letter_limit_ratio,
            min_letters: self.dead_letter_limit_min as usize,
            retry: Duration::from_secs(self.dead_letter_limit_retry_secs),
        }
    }
}
