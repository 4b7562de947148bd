//! What every request handler shares: the Redis connection (made lazily, so the API starts and answers
//! `/healthz` while Redis is away), the active generation and whether it is complete, and the presigner.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shared::connection::{Connection, Settings, Target};
use shared::Keyspace;
use tokio::sync::OnceCell;

use crate::config::Config;
use crate::error::ApiError;
use crate::key_cache::{Epoch, KeyCache};
use crate::metrics::Metrics;
use crate::presign::Presigner;
use crate::rate_limit::RateLimit;
use crate::read_cache::ReadCache;
use crate::read_model::ReadModel;

#[derive(Clone)]
pub struct AppState(Arc<Inner>);

/// The generation before the active one has been read (generations start at 1).
const UNKNOWN: u64 = 0;

/// What the last read of the active generation found.
const COMPLETE: u8 = 0;
/// The projector is projecting the generation again after Redis lost data (or it is new).
const HEALING: u8 = 1;
/// The active generation was known and is gone: Redis lost its data, and no projector has answered yet.
const LOST: u8 = 2;

struct Inner {
    prefix: String,
    target: Target,
    settings: Settings,
    read_model: OnceCell<ReadModel>,
    /// The active generation as last read; 0 until it has been read once.
    generation: AtomicU64,
    /// [`COMPLETE`], [`HEALING`] or [`LOST`].
    condition: AtomicU8,
    /// How fresh the served generation is, as its projectors last reported.
    freshness: crate::freshness::Latest,
    presigner: Option<Presigner>,
    rate_limit: Option<RateLimit>,
    /// API keys kept in memory, checked against the key index's epoch on every refresh.
    key_cache: Option<KeyCache>,
    /// Reads kept in memory, checked against their organizations' epochs on every refresh (none with
    /// READ_CACHE_MB=0).
    read_cache: Option<ReadCache>,
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
            condition: AtomicU8::new(COMPLETE),
            freshness: Default::default(),
            presigner,
            rate_limit: RateLimit::new(config.rate_limit_per_second, config.rate_limit_burst),
            key_cache: KeyCache::new(config.api_key_cache_size),
            read_cache: ReadCache::new(config.read_cache_mb as usize * 1024 * 1024),
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
    /// a guessed generation would answer 401 to valid keys. So is a generation known to be incomplete
    /// (being projected again after Redis lost data, or new), rather than answer a short list.
    pub async fn keyspace(&self) -> Result<Keyspace, ApiError> {
        // While the read model is not known to be complete, every request looks again, so that it is
        // served the moment the projector has caught up.
        if self.0.generation.load(Ordering::Acquire) == UNKNOWN || self.0.condition.load(Ordering::Acquire) != COMPLETE
        {
            self.refresh_generation().await;
        }
        self.serving().map(|generation| Keyspace::new(self.0.prefix.clone(), generation)).map_err(ApiError::NotReady)
    }

    /// The generation being served, or why none is.
    pub fn serving(&self) -> Result<u64, &'static str> {
        match (self.0.generation.load(Ordering::Acquire), self.0.condition.load(Ordering::Acquire)) {
            (_, HEALING) => Err("the read model is incomplete: the projector is projecting it (again)"),
            (_, LOST) => Err("the read model's Redis lost its data; waiting for the projector"),
            (UNKNOWN, _) => Err("the read model's active generation is not known yet"),
            (generation, _) => Ok(generation),
        }
    }

    /// How fresh the served generation is, as last read.
    pub fn freshness(&self) -> crate::freshness::Freshness {
        self.0.freshness.get()
    }

    pub fn presigner(&self) -> Option<&Presigner> {
        self.0.presigner.as_ref()
    }

    /// The API keys kept in memory, unless that is off.
    pub fn key_cache(&self) -> Option<&KeyCache> {
        self.0.key_cache.as_ref()
    }

    /// The reads kept in memory, when that is on.
    pub fn read_cache(&self) -> Option<&ReadCache> {
        self.0.read_cache.as_ref()
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

    /// Re-reads the active generation, whether it is complete, and the key index's epoch.
    pub async fn refresh_generation(&self) {
        let Ok(read_model) = self.read_model().await else { return };
        let generation = match read_model.active_generation(&self.0.prefix).await {
            Ok(Some(generation)) => generation,
            Ok(None) => {
                self.forget_kept();
                if self.0.generation.load(Ordering::Acquire) != UNKNOWN
                    && self.0.condition.swap(LOST, Ordering::AcqRel) != LOST
                {
                    tracing::error!("the read model's active generation is gone: Redis lost its data");
                }
                return;
            }
            Err(e) => return tracing::warn!(error = %e, "could not read the active generation"),
        };
        let keys = Keyspace::new(self.0.prefix.clone(), generation);
        let condition = match read_model.healing_partitions(&keys).await {
            Ok(0) => COMPLETE,
            Ok(_) => HEALING,
            Err(e) => return tracing::warn!(error = %e, "could not read whether the read model is complete"),
        };
        if self.0.condition.swap(condition, Ordering::AcqRel) != condition {
            tracing::info!(generation, complete = condition == COMPLETE, "the read model's condition changed");
        }
        // The projectors' reports are read before the epochs, so that a response never says it is as fresh
        // as an event whose change a kept read could still be missing.
        let reports = read_model.projectors(&self.0.prefix).await;
        self.refresh_kept(read_model, &keys, condition == COMPLETE).await;
        match reports {
            Ok(reports) => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                let freshness = crate::freshness::Freshness::of(&reports, generation, now.as_secs_f64());
                self.0.freshness.set(freshness);
            }
            Err(e) => tracing::warn!(error = %e, "could not read the projectors' reports"),
        }
        let previous = self.0.generation.swap(generation, Ordering::AcqRel);
        if previous != generation {
            tracing::info!(generation, previous, "serving a new generation of the read model");
        }
    }

    /// Reads the epochs of what is kept in memory (keys, and reads of organizations) and drops what
    /// changed; drops everything while the read model is not complete.
    async fn refresh_kept(&self, read_model: &ReadModel, keys: &Keyspace, complete: bool) {
        if !complete {
            self.forget_kept();
            return;
        }
        let generation = keys.generation();
        if let Some(cache) = self.key_cache() {
            // Started before the read: the entries are vouched for as of this moment, not a later one.
            let started = std::time::Instant::now();
            match read_model.api_key_epoch(keys).await {
                Ok(token) => cache.refreshed(Epoch { generation, token }, started),
                Err(e) => tracing::warn!(error = %e, "could not read the key index's epoch"),
            }
        }
        if let Some(cache) = self.read_cache() {
            let orgs = cache.organizations(generation);
            if !orgs.is_empty() {
                let started = std::time::Instant::now();
                match read_model.org_epochs(keys, &orgs).await {
                    Ok(epochs) => cache.refreshed(generation, orgs.into_iter().zip(epochs).collect(), started),
                    Err(e) => tracing::warn!(error = %e, "could not read the organizations' epochs"),
                }
            }
        }
    }

    /// Drops every key and read kept in memory.
    fn forget_kept(&self) {
        if let Some(cache) = self.key_cache() {
            cache.forget();
        }
        if let Some(cache) = self.read_cache() {
            cache.forget();
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
