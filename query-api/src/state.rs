//! What every request shares, and the refresh that keeps it current.
//!
//! [`AppState`] holds the parts of the API, each owning what it needs: the read model, the generation
//! served, authentication, the data reads, video links, how fresh the read model is, and the metrics.
//! [`AppState::refresh`], run every `GENERATION_REFRESH_MS` in the background (and by a request while the
//! read model is not known to be complete), reads the active generation, whether it is complete, and the
//! projectors' reports. What is kept in memory needs no refresh: Redis pushes its changes
//! ([`crate::read::push`]); another generation, or one not known complete, drops it all.

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shared::redis_tls::Tls;
use shared::Keyspace;

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
use crate::read::push::{Capacity, Tracker};
use crate::read::Reads;

/// The share of `READ_CACHE_MB` that bounds how many organizations' epochs are kept: one per that many
/// bytes (about 32,000 in the default 64 MiB).
const ORG_SHARE: usize = 2048;

#[derive(Clone)]
pub struct AppState(Arc<Parts>);

pub struct Parts {
    pub model: ReadModel,
    pub generation: Generation,
    pub auth: Auth,
    pub reads: Reads,
    pub links: Option<Arc<Presigner>>,
    /// The keys and organizations' epochs kept in memory, Redis pushing their changes.
    pub tracker: Tracker,
    /// How fresh the served generation is, as its projectors last reported.
    pub freshness: Latest,
    pub metrics: Arc<Metrics>,
    /// Held by the one request reading the generation again while nothing is served.
    reading: tokio::sync::Mutex<()>,
}

impl Deref for AppState {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

impl AppState {
    pub fn new(config: &Config, tls: Tls, links: Option<Presigner>) -> Result<Self, redis::RedisError> {
        let model = ReadModel::new(config.redis.target(), tls.clone(), config.redis.timeout())?;
        let metrics = Arc::new(Metrics::default());
        let budget = config.read_cache_mb as usize * 1024 * 1024;
        let bytes = config.api_key_cache_mb as usize * 1024 * 1024;
        let capacity = Capacity { keys: config.api_key_cache_size, orgs: budget / ORG_SHARE, bytes };
        let tracker = Tracker::new(
            config.redis.target(),
            tls,
            config.redis.timeout(),
            &config.redis.key_prefix,
            capacity,
            metrics.clone(),
        );
        let auth = Auth::new(
            model.clone(),
            (config.api_key_cache_size > 0).then(|| tracker.clone()),
            (
                RateLimit::new(config.rate_limit_per_second, config.rate_limit_burst),
                UnknownKeys::new(config.unknown_keys_per_second),
            ),
            crate::auth::invalid::InvalidKeys::new(config.invalid_key_cache_size),
            config.trusted_proxies.clone(),
            metrics.clone(),
        );
        let read_cache = ReadCache::new(budget);
        let max_page = config.max_page_mb * 1024 * 1024;
        let pages = crate::read::budget::Budget::new(config.max_pages_mb * 1024 * 1024);
        let reads = Reads::new(model.clone(), read_cache, tracker.clone(), (max_page, pages), metrics.clone());
        Ok(Self(Arc::new(Parts {
            model,
            generation: Generation::new(&config.redis.key_prefix),
            auth,
            reads,
            links: links.map(Arc::new),
            tracker,
            freshness: Latest::default(),
            metrics,
            reading: tokio::sync::Mutex::new(()),
        })))
    }

    /// The keys of the generation being served, read once per request so that one response never mixes
    /// two generations. Until the active generation has been read (Redis was away when the API started,
    /// or there is no read model yet) it is read now, and without it the request is answered 503: serving
    /// a guessed generation would answer 401 to valid keys. So is a generation known to be incomplete
    /// (being projected again after Redis lost data, or new), rather than answer a short list.
    pub async fn keyspace(&self) -> Result<Keyspace, ApiError> {
        if self.generation.needs_reading() {
            // One read at a time: the requests that come while it is on its way take its answer.
            match self.reading.try_lock() {
                Ok(_reading) => self.refresh().await,
                Err(_) => drop(self.reading.lock().await),
            }
        }
        self.generation.keyspace().map_err(ApiError::NotReady)
    }

    /// Whether `org`'s part of the generation is complete: while some primaries of a cluster heal, the
    /// organizations whose keys live there are answered 503 and the others are served.
    pub fn serves_organization(&self, org: &Organization) -> Result<(), ApiError> {
        self.generation.serves_organization(&org.keys, &org.id).map_err(ApiError::NotReady)
    }

    /// Re-reads the active generation, whether it is complete, and how fresh it is.
    pub async fn refresh(&self) {
        let (keys, complete, newly_healing) = match self.generation.read(&self.model).await {
            Found::Nothing => return,
            Found::Gone => return self.forget_kept(),
            Found::Active { keys, complete, newly_healing } => (keys, complete, newly_healing),
        };
        let reports = self.model.projectors(self.generation.prefix()).await;
        match newly_healing {
            // What was kept of the organizations being projected again goes (a flush or a failover has
            // dropped it already, as Redis pushed); the others' is still what Redis holds.
            Some(scope) => self.tracker.forget_slots(&scope),
            None if !complete && !self.generation.heals_some() => self.forget_kept(),
            None => {}
        }
        if self.tracker.keeps_anything() {
            // A change to either is pushed, and wakes the next refresh at once.
            let active = Keyspace::active_generation(self.generation.prefix());
            self.tracker.watch(&active, redis::cmd("GET").arg(&active).to_owned());
            self.tracker.watch(&keys.healing(), redis::cmd("HGETALL").arg(keys.healing()).to_owned());
        }
        match reports {
            Ok(reports) => {
                let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
                self.freshness.set(Freshness::of(&reports, keys.generation(), now.as_secs_f64()));
            }
            Err(e) => tracing::warn!(error = %e, "could not read the projectors' reports"),
        }
        if self.generation.serving() != Ok(keys.generation()) {
            // Another generation: nothing kept of the one served before may answer.
            self.forget_kept();
        }
        self.generation.serve(keys.generation());
        if let Some(cache) = self.reads.cache() {
            self.metrics.kept_reads_bytes.set(cache.bytes() as i64);
        }
    }

    /// Drops every key and read kept in memory.
    fn forget_kept(&self) {
        self.tracker.forget();
        if let Some(cache) = self.reads.cache() {
            cache.forget();
        }
    }

    /// Refreshes every `every`, and at once when Redis pushes a change of the active generation or of the
    /// healing entries (or a connection that pushed changes is lost), for ever.
    pub async fn refresh_forever(self, every: Duration) {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = self.tracker.changed() => {}
            }
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
            if let Some(unknown) = self.auth.unknown_keys() {
                unknown.prune(std::time::Instant::now());
            }
        }
    }
}
