//! The read path of the data routes: a read kept in memory when there is one to trust
//! (`crate::read_cache`), else one read of Redis, which is then kept.

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
        if let Some(Stored::Studies(kept)) = self.kept(org, &key) {
            return Ok(kept);
        }
        let started = Instant::now();
        let (found, epoch) = self.read_model().await?.studies(&org.keys, &org.id, page).await?;
        let found = Arc::new(found);
        self.keep(org, key, Stored::Studies(found.clone()), epoch, started);
        Ok(found)
    }

    /// One completed study's document.
    pub async fn study(&self, org: &Organization, id: &str) -> Result<Arc<Option<String>>, ApiError> {
        let key = ReadKey::Study(id.to_string());
        if let Some(Stored::Study(kept)) = self.kept(org, &key) {
            return Ok(kept);
        }
        let started = Instant::now();
        let (found, epoch) = self.read_model().await?.study(&org.keys, &org.id, id).await?;
        let found = Arc::new(found);
        self.keep(org, key, Stored::Study(found.clone()), epoch, started);
        Ok(found)
    }

    /// A page of a completed study's interviews; `None` when the study is not a completed one.
    pub async fn interviews(
        &self,
        org: &Organization,
        study_id: &str,
        page: Pagination,
    ) -> Result<Option<Arc<Page<StoredInterview>>>, ApiError> {
        let key = ReadKey::Interviews { study: study_id.to_string(), start: page.start(), stop: page.stop() };
        if let Some(Stored::Interviews(kept)) = self.kept(org, &key) {
            return Ok(Some(kept));
        }
        let started = Instant::now();
        let read_model = self.read_model().await?;
        let Some((found, epoch)) = read_model.interviews(&org.keys, &org.id, study_id, page).await? else {
            return Ok(None);
        };
        let found = Arc::new(found);
        self.keep(org, key, Stored::Interviews(found.clone()), epoch, started);
        Ok(Some(found))
    }

    /// One interview's document and transcript.
    pub async fn interview(&self, org: &Organization, id: &str) -> Result<Arc<Option<StoredInterview>>, ApiError> {
        let key = ReadKey::Interview(id.to_string());
        if let Some(Stored::Interview(kept)) = self.kept(org, &key) {
            return Ok(kept);
        }
        let started = Instant::now();
        let (found, epoch) = self.read_model().await?.interview(&org.keys, &org.id, id).await?;
        let found = Arc::new(found);
        self.keep(org, key, Stored::Interview(found.clone()), epoch, started);
        Ok(found)
    }

    /// The read kept for `key`, if any may be trusted now (counted either way when reads are kept).
    fn kept(&self, org: &Organization, key: &ReadKey) -> Option<Stored> {
        let cache = self.read_cache()?;
        let kept = cache.get(org.keys.generation(), &org.id, key, Instant::now());
        let counter = if kept.is_some() { &self.metrics().reads_memory } else { &self.metrics().reads_redis };
        counter.inc();
        kept
    }

    fn keep(&self, org: &Organization, key: ReadKey, value: Stored, epoch: Epoch, started: Instant) {
        if let Some(cache) = self.read_cache() {
            cache.insert(org.keys.generation(), &org.id, key, value, epoch, started);
        }
    }
}
