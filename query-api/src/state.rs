//! What every request handler shares: the Redis connection (made lazily, so the API starts and answers
//! `/healthz` while Redis is away), the active generation, and the presigner.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shared::connection::{Connection, Settings, Target};
use shared::Keyspace;
use tokio::sync::OnceCell;

use crate::config::Config;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::presign::Presigner;
use crate::rate_limit::RateLimit;
use crate::read_model::ReadModel;

#[derive(Clone)]
pub struct AppState(Arc<Inner>);

/// The generation before the active one has been read (generations start at 1).
const UNKNOWN: u64 = 0;

struct Inner {
    prefix: String,
    target: Target,
    settings: Settings,
    read_model: OnceCell<ReadModel>,
    /// The active generation as last read; 0 until it has been read once.
    generation: AtomicU64,
    presigner: Option<Presigner>,
    rate_limit: Option<RateLimit>,
    metrics: Arc<Metrics>,
}

impl AppState {
    pub fn new(config: &Config, presigner: Option<Presigner>) -> Result<Self, redis::RedisError> {
        let target = Target::new(&config.redis_url, config.redis_cluster);
        if let Target::Single(url) = &target {
            redis::Client::open(url.as_str())?;
        }
        Ok(Self(Arc::new(Inner {
            prefix: config.key_prefix.clone(),
            target,
            // Retries on a cluster wait 10 ms doubling: ten of them (about 2.5 s at most) ride out a slot moving.
            settings: Settings { timeout: config.redis_timeout(), cluster_retries: 10 },
            read_model: OnceCell::new(),
            generation: AtomicU64::new(UNKNOWN),
            presigner,
            rate_limit: RateLimit::new(config.rate_limit_per_second, config.rate_limit_burst),
            metrics: Arc::default(),
        })))
    }

    /// The read model; connects on first use, failing with 503 within the Redis timeout.
    pub async fn read_model(&self) -> Result<&ReadModel, ApiError> {
        let inner = &self.0;
        let connect = async {
            let conn = Connection::connect(&inner.target, inner.settings);
            match tokio::time::timeout(inner.settings.timeout, conn).await {
                Ok(conn) => Ok(ReadModel::new(conn?)),
                Err(_) => Err(redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut))),
            }
        };
        Ok(inner.read_model.get_or_try_init(|| connect).await?)
    }

    /// The keys of the generation being served, read once per request so that one response never mixes
    /// two generations. Until the active generation has been read (Redis was away when the API started,
    /// or there is no read model yet) it is read now, and without it the request is answered 503: serving
    /// a guessed generation would answer 401 to valid keys.
    pub async fn keyspace(&self) -> Result<Keyspace, ApiError> {
        if self.0.generation.load(Ordering::Acquire) == UNKNOWN {
            self.refresh_generation().await;
        }
        match self.0.generation.load(Ordering::Acquire) {
            UNKNOWN => Err(ApiError::NotReady("the read model's active generation is not known yet")),
            generation => Ok(Keyspace::new(self.0.prefix.clone(), generation)),
        }
    }

    pub fn presigner(&self) -> Option<&Presigner> {
        self.0.presigner.as_ref()
    }

    /// The per-key rate limit, when one is configured.
    pub fn rate_limit(&self) -> Option<&RateLimit> {
        self.0.rate_limit.as_ref()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.0.metrics
    }

    pub fn prefix(&self) -> &str {
        &self.0.prefix
    }

    /// Re-reads the active generation.
    pub async fn refresh_generation(&self) {
        let Ok(read_model) = self.read_model().await else { return };
        match read_model.active_generation(&self.0.prefix).await {
            Ok(Some(generation)) => {
                let previous = self.0.generation.swap(generation, Ordering::AcqRel);
                if previous != generation {
                    tracing::info!(generation, previous, "serving a new generation of the read model");
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "could not read the active generation"),
        }
    }

    /// Follows the active generation, re-reading it every `every`.
    pub async fn follow_generation(self, every: Duration) {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.refresh_generation().await;
        }
    }
}
