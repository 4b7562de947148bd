//! The read path: the read model in Redis ([`model`]), reads kept in memory ([`cache`]) and what vouches
//! for them ([`trust`]), the generation being served ([`generation`]) and how fresh it is ([`freshness`]).
//!
//! A data route reads through [`Reads`]: a read kept in memory when there is one to trust, else one read
//! of Redis, which is then kept.

pub mod cache;
pub mod freshness;
pub mod generation;
pub mod model;
pub mod scripts;
pub mod transcript;
pub mod trust;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use shared::Keyspace;

use crate::metrics::Metrics;
use cache::{ReadCache, ReadKey, Stored};
use model::{InterviewRead, OrgEpoch, Page, ReadModel};
use redis::RedisResult;

/// The longest id a read asks Redis for: a longer one is no id the projector wrote, so it is answered as
/// not found without a read, and never kept.
pub const MAX_ID_BYTES: usize = 256;

/// Which items of a list: zero-based, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub stop: u64,
}

/// The data reads of the routes.
pub struct Reads {
    model: ReadModel,
    cache: Option<ReadCache>,
    /// The most bytes a read of interviews holds (documents and whole transcripts); longer transcripts
    /// are sent a chunk at a time ([`transcript`]).
    budget: u64,
    metrics: Arc<Metrics>,
}

impl Reads {
    pub fn new(model: ReadModel, cache: Option<ReadCache>, budget: u64, metrics: Arc<Metrics>) -> Self {
        Self { model, cache, budget, metrics }
    }

    /// The read model, for what is read while a response is sent (long transcripts).
    pub fn model(&self) -> &ReadModel {
        &self.model
    }

    /// The reads kept in memory, when that is on.
    pub fn cache(&self) -> Option<&ReadCache> {
        self.cache.as_ref()
    }

    /// A page of the organization's completed studies.
    pub async fn studies(&self, keys: &Keyspace, org: &str, span: Span) -> RedisResult<Arc<Page<String>>> {
        let key = ReadKey::Studies { start: span.start, stop: span.stop };
        let read = || self.model.studies(keys, org, span);
        let unwrap = |kept| if let Stored::Studies(kept) = kept { Some(kept) } else { None };
        self.through(keys, org, key, Stored::Studies, unwrap, read).await
    }

    /// One completed study's document, if there is one.
    pub async fn study(&self, keys: &Keyspace, org: &str, id: &str) -> RedisResult<Arc<Option<String>>> {
        if id.len() > MAX_ID_BYTES {
            return Ok(Arc::new(None));
        }
        let read = || self.model.study(keys, org, id);
        let unwrap = |kept| if let Stored::Study(kept) = kept { Some(kept) } else { None };
        self.through(keys, org, ReadKey::Study(id.into()), Stored::Study, unwrap, read).await
    }

    /// A page of a completed study's interviews; `None` when the study is not a completed one.
    pub async fn interviews(
        &self,
        keys: &Keyspace,
        org: &str,
        study_id: &str,
        span: Span,
    ) -> RedisResult<Arc<Option<Page<InterviewRead>>>> {
        if study_id.len() > MAX_ID_BYTES {
            return Ok(Arc::new(None));
        }
        let key = ReadKey::Interviews { study: study_id.into(), start: span.start, stop: span.stop };
        let read = || async {
            let found = self.model.interviews(keys, org, study_id, span, self.budget).await?;
            // A study that is not completed comes without an epoch, so that answer is not kept.
            Ok(found.map_or((None, None), |(page, epoch)| (Some(page), epoch)))
        };
        let unwrap = |kept| if let Stored::Interviews(kept) = kept { Some(kept) } else { None };
        self.through(keys, org, key, Stored::Interviews, unwrap, read).await
    }

    /// One interview's document and transcript, if it is served.
    pub async fn interview(&self, keys: &Keyspace, org: &str, id: &str) -> RedisResult<Arc<Option<InterviewRead>>> {
        if id.len() > MAX_ID_BYTES {
            return Ok(Arc::new(None));
        }
        let read = || self.model.interview(keys, org, id, self.budget);
        let unwrap = |kept| if let Stored::Interview(kept) = kept { Some(kept) } else { None };
        self.through(keys, org, ReadKey::Interview(id.into()), Stored::Interview, unwrap, read).await
    }

    /// The read kept for `key` when one may be trusted now; else `read` from Redis, kept with the epoch it
    /// came with. Counted either way while reads are kept.
    async fn through<T, F, Fut>(
        &self,
        keys: &Keyspace,
        org: &str,
        key: ReadKey,
        wrap: fn(Arc<T>) -> Stored,
        unwrap: fn(Stored) -> Option<Arc<T>>,
        read: F,
    ) -> RedisResult<Arc<T>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = RedisResult<(T, OrgEpoch)>>,
    {
        let generation = keys.generation();
        if let Some(cache) = &self.cache {
            if let Some(kept) = cache.get(generation, org, &key, Instant::now()).and_then(unwrap) {
                self.metrics.reads_memory.inc();
                return Ok(kept);
            }
            self.metrics.reads_redis.inc();
        }
        let started = Instant::now();
        let (found, epoch) = read().await?;
        let found = Arc::new(found);
        if let Some(cache) = &self.cache {
            cache.insert(generation, org, key, wrap(found.clone()), epoch, started);
        }
        Ok(found)
    }
}
