//! The read path: the read model in Redis ([`model`]), reads kept in memory ([`cache`]) and what vouches
//! for them ([`trust`]), the generation being served ([`generation`]) and how fresh it is ([`freshness`]).
//!
//! A data route reads through [`Reads`]: a read kept in memory when there is one to trust, else one read
//! of Redis, which is then kept.

pub mod cache;
pub mod freshness;
pub mod generation;
pub mod model;
pub mod trust;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use shared::Keyspace;

use crate::metrics::Metrics;
use cache::{ReadCache, ReadKey, Stored};
use model::{InterviewRead, OrgEpoch, Page, PageError, ReadModel};

/// The longest id a read asks Redis for: a longer one is no id the projector wrote, so it is answered as
/// not found without a read, and never kept.
pub const MAX_ID_BYTES: usize = 256;

/// Which items of a list: zero-based, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub stop: u64,
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// The page's documents and transcripts take more than a page may (`MAX_PAGE_MB`).
    #[error("the page takes {bytes} bytes, more than the {budget} a page may")]
    PageTooLarge { bytes: u64, budget: u64 },
}

/// The data reads of the routes.
pub struct Reads {
    model: ReadModel,
    cache: Option<ReadCache>,
    /// The most bytes a page of interviews may take (documents and transcripts).
    page_budget: u64,
    metrics: Arc<Metrics>,
}

impl Reads {
    pub fn new(model: ReadModel, cache: Option<ReadCache>, page_budget: u64, metrics: Arc<Metrics>) -> Self {
        Self { model, cache, page_budget, metrics }
    }

    /// The reads kept in memory, when that is on.
    pub fn cache(&self) -> Option<&ReadCache> {
        self.cache.as_ref()
    }

    /// A page of the organization's completed studies.
    pub async fn studies(&self, keys: &Keyspace, org: &str, span: Span) -> Result<Arc<Page<String>>, ReadError> {
        let key = ReadKey::Studies { start: span.start, stop: span.stop };
        let read = || async { Ok(self.model.studies(keys, org, span).await?) };
        let unwrap = |kept| if let Stored::Studies(kept) = kept { Some(kept) } else { None };
        self.through(keys, org, key, Stored::Studies, unwrap, read).await
    }

    /// One completed study's document, if there is one.
    pub async fn study(&self, keys: &Keyspace, org: &str, id: &str) -> Result<Arc<Option<String>>, ReadError> {
        if id.len() > MAX_ID_BYTES {
            return Ok(Arc::new(None));
        }
        let read = || async { Ok(self.model.study(keys, org, id).await?) };
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
    ) -> Result<Arc<Option<Page<InterviewRead>>>, ReadError> {
        if study_id.len() > MAX_ID_BYTES {
            return Ok(Arc::new(None));
        }
        let key = ReadKey::Interviews { study: study_id.into(), start: span.start, stop: span.stop };
        let budget = self.page_budget;
        let read = || async {
            let found = self.model.interviews(keys, org, study_id, span, budget).await.map_err(|e| match e {
                PageError::Redis(e) => ReadError::Redis(e),
                PageError::TooLarge { bytes } => ReadError::PageTooLarge { bytes, budget },
            })?;
            // A study that is not completed comes without an epoch, so that answer is not kept.
            Ok(found.map_or((None, None), |(page, epoch)| (Some(page), epoch)))
        };
        let unwrap = |kept| if let Stored::Interviews(kept) = kept { Some(kept) } else { None };
        self.through(keys, org, key, Stored::Interviews, unwrap, read).await
    }

    /// One interview's document and transcript, if it is served.
    pub async fn interview(
        &self,
        keys: &Keyspace,
        org: &str,
        id: &str,
    ) -> Result<Arc<Option<InterviewRead>>, ReadError> {
        if id.len() > MAX_ID_BYTES {
            return Ok(Arc::new(None));
        }
        let read = || async { Ok(self.model.interview(keys, org, id).await?) };
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
    ) -> Result<Arc<T>, ReadError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(T, OrgEpoch), ReadError>>,
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
