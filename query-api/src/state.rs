//! What every request shares, and the refresh that keeps it current.
//!
//! [`AppState`] holds the parts of the API, each owning what it needs: the read model, the generation
//! served, authentication, the data reads, video links, how fresh the read model is, and the metrics.
//! [`AppState::refresh`], run every `GENERATION_REFRESH_MS` in the background (and by a request while the
//! read model is not known to be complete), reads the active generation, then the projectors' reports,
//! then the epochs that vouch for what is kept in memory, in that order: so that a response never says it
//! is as fresh as an event whose change a kept read could still be missing.

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shared::redis_tls::Tls;
use shared::Keyspace;

use crate::auth::key_cache::{KeyCache, KeyIndexEpoch};
use crate::auth::rate_limit::{RateLimit, UnknownKeys};
use crate::auth::{Auth, Organization};
use crate::config::Config;
use crate::error::ApiError;
use crate::links::Presigner;
use crate::metrics::Metrics;
use crate::read::cache::ReadCache;
use crate::read::freshness::{Freshness, Latest};
use crate::read::generation::{Found, Generation};
use crate::read::model::ReadModel;
use crate::read::Reads;

#[derive(Clone)]
pub struct AppState(Arc<Parts>);

pub struct Parts {
    pub model: ReadModel,
    pub generation: Generation,
    pub auth: Auth,
    pub reads: Reads,
    pub links: Option<Arc<Presigner>>,
    /// How fresh the served generation is, as its projectors last reported.
    pub freshness: Latest,
    pub metrics: Arc<Metrics>,
}

impl Deref for AppState {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

impl AppState {
    pub fn new(config: &Config, tls: Tls, links: Option<Presigner>) -> Result<Self, redis::RedisError> {
        let model = ReadModel::new(config.redis_target(), tls, config.redis_timeout())?;
        let metrics = Arc::new(Metrics::default());
        let auth = Auth::new(
            model.clone(),
            KeyCache::new(config.api_key_cache_size),
            RateLimit::new(config.rate_limit_per_second, config.rate_limit_burst),
            UnknownKeys::new(config.unknown_keys_per_second),
            metrics.clone(),
        );
        let read_cache = ReadCache::new(config.read_cache_mb as usize * 1024 * 1024);
        let reads = Reads::new(model.clone(), read_cache, config.max_page_mb * 1024 * 1024, metrics.clone());
        Ok(Self(Arc::new(Parts {
            model,
            generation: Generation::new(&config.key_prefix),
            auth,
            reads,
            links: links.map(Arc::new),
            freshness: Latest::default(),
            metrics,
        })))
    }

    /// The keys of the generation being served, read once per request so that one response never mixes
    /// two generations. Until the active generation has been read (Redis was away when the API started,
    /// or there is no read model yet) it is read now, and without it the request is answered 503: serving
    /// a guessed generation would answer 401 to valid keys. So is a generation known to be incomplete
    /// (being projected again after Redis lost data, or new), rather than answer a short list.
    pub async fn keyspace(&self) -> Result<Keyspace, ApiError> {
        if self.generation.needs_reading() {
            self.refresh().await;
        }
        self.generation.keyspace().map_err(ApiError::NotReady)
    }

    /// Whether `org`'s part of the generation is complete: while some primaries of a cluster heal, the
    /// organizations whose keys live there are answered 503 and the others are served.
    pub fn serves_organization(&self, org: &Organization) -> Result<(), ApiError> {
        self.generation.serves_organization(&org.keys, &org.id).map_err(ApiError::NotReady)
    }

    /// Re-reads the active generation, whether it is complete, how fresh it is, and the epochs of what is
    /// kept in memory.
    pub async fn refresh(&self) {
        let (keys, complete) = match self.generation.read(&self.model).await {
            Found::Nothing => return,
            Found::Gone => return self.forget_kept(),
            Found::Active { keys, complete } => (keys, complete),
        };
        let reports = self.model.projectors(self.generation.prefix()).await;
        if complete {
            self.refresh_kept(&keys).await;
        } else {
            self.forget_kept();
        }
        match reports {
            Ok(reports) => {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                self.freshness.set(Freshness::of(&reports, keys.generation(), now.as_secs_f64()));
            }
            Err(e) => tracing::warn!(error = %e, "could not read the projectors' reports"),
        }
        self.generation.serve(keys.generation());
    }

    /// Reads the epochs of what is kept in memory (keys, and reads of organizations): what changed is
    /// dropped, the rest is vouched for as of the moment the read started.
    async fn refresh_kept(&self, keys: &Keyspace) {
        let generation = keys.generation();
        if let Some(cache) = self.auth.key_cache() {
            let started = Instant::now();
            match self.model.api_key_epoch(keys).await {
                Ok(token) => cache.refreshed(KeyIndexEpoch { generation, token }, started),
                Err(e) => tracing::warn!(error = %e, "could not read the key index's epoch"),
            }
            self.metrics.kept_keys_bytes.set(cache.bytes() as i64);
        }
        if let Some(cache) = self.reads.cache() {
            let orgs = cache.organizations(generation);
            if !orgs.is_empty() {
                let started = Instant::now();
                match self.model.org_epochs(keys, &orgs).await {
                    Ok(epochs) => cache.refreshed(generation, orgs.into_iter().zip(epochs).collect(), started),
                    Err(e) => tracing::warn!(error = %e, "could not read the organizations' epochs"),
                }
            }
            self.metrics.kept_reads_bytes.set(cache.bytes() as i64);
        }
    }

    /// Drops every key and read kept in memory.
    fn forget_kept(&self) {
        if let Some(cache) = self.auth.key_cache() {
            cache.forget();
        }
        if let Some(cache) = self.reads.cache() {
            cache.forget();
        }
    }

    /// Refreshes every `every`, for ever.
    pub async fn follow(self, every: Duration) {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.refresh().await;
        }
    }

    /// Drops the rate limit's idle keys every `every`, for ever.
    pub async fn prune_rate_limit(self, every: Duration) {
        let mut ticker = tokio::time::interval(every);
        loop {
            ticker.tick().await;
            if let Some(limit) = self.auth.rate_limit() {
                limit.prune();
            }
        }
    }
}
