//! The read path: the read model in Redis ([`model`]), reads kept in memory ([`cache`]) and what vouches
//! for them, the epochs and keys Redis pushes changes of ([`push`]), the generation being served
//! ([`generation`]), whether it heals ([`healing`]) and how fresh it is ([`freshness`]).
//!
//! A data route reads through [`Reads`]: a read kept in memory when its organization's epoch is the one
//! Redis last pushed, else one read of Redis, which is then kept.

pub mod budget;
pub mod cache;
pub mod document;
pub mod freshness;
pub mod generation;
pub mod healing;
mod key_by_key;
pub mod model;
pub mod push;
pub mod scripts;
pub mod transcript;

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;

use shared::Keyspace;

use crate::metrics::Metrics;
use cache::{ReadCache, ReadKey, Stored};
use model::{InterviewRead, OrgEpoch, Page, ReadModel};
use push::{Kind, Known, Tracker};
use redis::RedisResult;
use transcript::Transcript;

/// Why a data read was not answered.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// The read found no epoch of the organization, and the primary serving its slot holds none of the
    /// projector's positions either: that primary lost its data (a flush, a restart empty) and no
    /// projector has marked the loss yet. An empty answer would be a short list served with 200.
    #[error("the primary serving the organization's slot lost its data, which is not projected again yet")]
    SlotLost,
}

/// The longest id a read asks Redis for: a longer one is no id the projector wrote (its event was poison),
/// so it is answered as not found without a read, and never kept.
pub use shared::keys::MAX_ID_BYTES;

/// Which items of a list: zero-based, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub stop: u64,
}

/// What a read found, and the organization's epoch it was found at (which says how fresh it is:
/// [`freshness::org_as_of`]).
#[derive(Debug)]
pub struct Read<T> {
    pub found: Arc<T>,
    pub epoch: Option<Arc<str>>,
    /// What the read holds of the process's byte budget ([`budget`]), until it is dropped: a read of
    /// interviews from Redis.
    pub held: Option<budget::Held>,
}

impl<T> Deref for Read<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.found
    }
}

/// The data reads of the routes.
pub struct Reads {
    model: ReadModel,
    cache: Option<ReadCache>,
    tracker: Tracker,
    /// The most bytes a read of interviews holds (documents and whole transcripts); longer transcripts
    /// are sent a chunk at a time ([`transcript`]).
    budget: u64,
    /// The bytes all reads together hold ([`budget`]).
    pages: budget::Budget,
    metrics: Arc<Metrics>,
}

impl Reads {
    pub fn new(
        model: ReadModel,
        cache: Option<ReadCache>,
        tracker: Tracker,
        budget: (u64, budget::Budget),
        metrics: Arc<Metrics>,
    ) -> Self {
        let (budget, pages) = budget;
        Self { model, cache, tracker, budget, pages, metrics }
    }

    /// The bytes all reads together hold, for the chunks of long transcripts.
    pub fn pages(&self) -> &budget::Budget {
        &self.pages
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
    pub async fn studies(&self, keys: &Keyspace, org: &str, span: Span) -> Result<Read<Page<String>>, ReadError> {
        let key = ReadKey::Studies { start: span.start, stop: span.stop };
        let read = || self.model.studies(keys, org, span);
        let unwrap = |kept| if let Stored::Studies(kept) = kept { Some(kept) } else { None };
        self.through(keys, org, key, Stored::Studies, unwrap, read).await
    }

    /// One completed study's document, if there is one.
    pub async fn study(&self, keys: &Keyspace, org: &str, id: &str) -> Result<Read<Option<String>>, ReadError> {
        if id.len() > MAX_ID_BYTES {
            return Ok(Read { found: Arc::new(None), epoch: None, held: None });
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
    ) -> Result<Read<Option<Page<InterviewRead>>>, ReadError> {
        if study_id.len() > MAX_ID_BYTES {
            return Ok(Read { found: Arc::new(None), epoch: None, held: None });
        }
        let key = ReadKey::Interviews { study: study_id.into(), start: span.start, stop: span.stop };
        let held = std::sync::Mutex::new(None);
        let read = || async {
            let mut reserved = self.pages.reserve(self.budget).await;
            let mut found = self.model.interviews(keys, org, study_id, span, reserved.bytes()).await?;
            if let Some((page, _)) = &mut found {
                Transcript::settle(page.items.iter_mut().map(|(doc, t)| (doc.heap_bytes(), t)), reserved.bytes())?;
            }
            let holds = found.as_ref().map_or(0, |(page, _)| page.items.iter().map(read_bytes).sum());
            reserved.keep(holds);
            *held.lock().expect("held") = Some(reserved);
            // A study that is not completed comes without an epoch, so that answer is not kept.
            Ok(found.map_or((None, None), |(page, epoch)| (Some(page), epoch)))
        };
        let unwrap = |kept| if let Stored::Interviews(kept) = kept { Some(kept) } else { None };
        let mut read = self.through(keys, org, key, Stored::Interviews, unwrap, read).await?;
        read.held = held.into_inner().expect("held");
        Ok(read)
    }

    /// One interview's document and transcript, if it is served.
    pub async fn interview(
        &self,
        keys: &Keyspace,
        org: &str,
        id: &str,
    ) -> Result<Read<Option<InterviewRead>>, ReadError> {
        if id.len() > MAX_ID_BYTES {
            return Ok(Read { found: Arc::new(None), epoch: None, held: None });
        }
        let held = std::sync::Mutex::new(None);
        let read = || async {
            let mut reserved = self.pages.reserve(self.budget).await;
            let mut found = self.model.interview(keys, org, id, reserved.bytes()).await?;
            if let Some((doc, transcript)) = &mut found.0 {
                Transcript::settle([(doc.heap_bytes(), transcript)], reserved.bytes())?;
            }
            reserved.keep(found.0.as_ref().map_or(0, read_bytes));
            *held.lock().expect("held") = Some(reserved);
            Ok(found)
        };
        let unwrap = |kept| if let Stored::Interview(kept) = kept { Some(kept) } else { None };
        let mut read = self.through(keys, org, ReadKey::Interview(id.into()), Stored::Interview, unwrap, read).await?;
        read.held = held.into_inner().expect("held");
        Ok(read)
    }

    /// The read kept for `key` when its organization's epoch is the one Redis last pushed; else `read`
    /// from Redis, kept with the epoch it came with (and the epoch kept, if it is not yet). Counted
    /// either way while reads are kept.
    async fn through<T, F, Fut>(
        &self,
        keys: &Keyspace,
        org: &str,
        key: ReadKey,
        wrap: fn(Arc<T>) -> Stored,
        unwrap: fn(Stored) -> Option<Arc<T>>,
        read: F,
    ) -> Result<Read<T>, ReadError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = RedisResult<(T, OrgEpoch)>>,
    {
        let generation = keys.generation();
        let Some(cache) = &self.cache else {
            let (found, epoch) = self.vouched(keys, org, read().await?).await?;
            return Ok(Read { found: Arc::new(found), epoch: epoch.map(Arc::from), held: None });
        };
        let epoch_key = keys.org_epoch(org);
        if let Some(Known::Value(current)) = self.tracker.known(&epoch_key) {
            if let Some((kept, epoch)) = cache.get(generation, org, &key, &current) {
                if let Some(found) = unwrap(kept) {
                    self.metrics.reads_memory.inc();
                    return Ok(Read { found, epoch: Some(epoch), held: None });
                }
            }
        }
        self.metrics.reads_redis.inc();
        let (found, epoch) = self.vouched(keys, org, read().await?).await?;
        let (found, epoch) = (Arc::new(found), epoch.map(Arc::<str>::from));
        if epoch.is_some() {
            cache.insert(generation, org, key, wrap(found.clone()), epoch.as_ref());
            self.tracker.keep(&epoch_key, model::org_epoch(keys, org), Kind::Org);
        }
        Ok(Read { found, epoch, held: None })
    }

    /// A read that found an epoch of the organization, as it is; one that found none (an organization
    /// without data, a study not completed, a page read key by key) only once the primary serving the
    /// organization's slot is seen still holding the projector's positions, which the projector records
    /// on every primary a few times a second and a flush or an empty restart takes with the data.
    async fn vouched<T>(&self, keys: &Keyspace, org: &str, read: (T, OrgEpoch)) -> Result<(T, OrgEpoch), ReadError> {
        if read.1.is_none() && !self.model.positions_kept(keys, org).await? {
            return Err(ReadError::SlotLost);
        }
        Ok(read)
    }
}

/// The bytes an interview as read holds: its document and its transcript (a long one only its key).
fn read_bytes((doc, transcript): &InterviewRead) -> u64 {
    (doc.heap_bytes() + transcript.heap_bytes()) as u64
}
