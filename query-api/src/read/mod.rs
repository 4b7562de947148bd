//! The read path of the data routes: a read kept in memory when there is one to trust
//! (`crate::read_cache`), else one read of Redis, which is then kept.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::auth::Organization;
use crate::error::ApiError;
use crate::pagination::Pagination;
use crate::read_cache::{ReadKey, Stored};
use crate::read_model::{Epoch, Page, StoredInterview};
use crate::state::AppState;

impl AppState {
    /// A page of the organization's completed studies.
    pub async fn studies(&self, org: &Organization, page: Pagination) -> Result<Arc<Page<String>>, ApiError> {
        let key = ReadKey::Studies { start: page.start(), stop: page.stop() };
        let read = || async { Ok(self.read_model().await?.studies(&org.keys, &org.id, page).await?) };
        self.through(
            org,
            key,
            Stored::Studies,
            |kept| if let Stored::Studies(kept) = kept { Some(kept) } else { None },
            read,
        )
        .await
    }

    /// One completed study's document, if there is one.
    pub async fn study(&self, org: &Organization, id: &str) -> Result<Arc<Option<String>>, ApiError> {
        let key = ReadKey::Study(id.to_string());
        let read = || async { Ok(self.read_model().await?.study(&org.keys, &org.id, id).await?) };
        self.through(
            org,
            key,
            Stored::Study,
            |kept| if let Stored::Study(kept) = kept { Some(kept) } else { None },
            read,
        )
        .await
    }

    /// A page of a completed study's interviews; `None` when the study is not a completed one.
    pub async fn interviews(
        &self,
        org: &Organization,
        study_id: &str,
        page: Pagination,
    ) -> Result<Arc<Option<Page<StoredInterview>>>, ApiError> {
        let key = ReadKey::Interviews { study: study_id.to_string(), start: page.start(), stop: page.stop() };
        let read = || async {
            let found = self.read_model().await?.interviews(&org.keys, &org.id, study_id, page).await?;
            // A study that is not completed comes without an epoch, so that answer is not kept.
            Ok(found.map_or((None, None), |(page, epoch)| (Some(page), epoch)))
        };
        let unwrap = |kept| if let Stored::Interviews(kept) = kept { Some(kept) } else { None };
        self.through(org, key, Stored::Interviews, unwrap, read).await
    }

    /// One interview's document and transcript, if it is served.
    pub async fn interview(&self, org: &Organization, id: &str) -> Result<Arc<Option<StoredInterview>>, ApiError> {
        let key = ReadKey::Interview(id.to_string());
        let read = || async { Ok(self.read_model().await?.interview(&org.keys, &org.id, id).await?) };
        let unwrap = |kept| if let Stored::Interview(kept) = kept { Some(kept) } else { None };
        self.through(org, key, Stored::Interview, unwrap, read).await
    }

    /// The read kept for `key` when one may be trusted now; else `read` from Redis, kept with the epoch it
    /// came with. Counted either way while reads are kept.
    async fn through<T, F, Fut>(
        &self,
        org: &Organization,
        key: ReadKey,
        wrap: fn(Arc<T>) -> Stored,
        unwrap: fn(Stored) -> Option<Arc<T>>,
        read: F,
    ) -> Result<Arc<T>, ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(T, Epoch), ApiError>>,
    {
        let generation = org.keys.generation();
        if let Some(cache) = self.read_cache() {
            if let Some(kept) = cache.get(generation, &org.id, &key, Instant::now()).and_then(unwrap) {
                self.metrics().reads_memory.inc();
                return Ok(kept);
            }
            self.metrics().reads_redis.inc();
        }
        let started = Instant::now();
        let (found, epoch) = read().await?;
        let found = Arc::new(found);
        if let Some(cache) = self.read_cache() {
            cache.insert(generation, &org.id, key, wrap(found.clone()), epoch, started);
        }
        Ok(found)
    }
}
