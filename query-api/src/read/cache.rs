//! Reads of the read model kept in memory (`READ_CACHE_MB`, 64 MiB unless set; 0 for none), so that a request for a page that
//! has not changed is answered without a Redis round trip, and a change is still served within a second.
//!
//! Every write the projector applies to an organization writes a new token to that organization's epoch
//! (`Keyspace::org_epoch`), in the same script. Every read of an organization returns the epoch with the
//! data, from the same script, and is kept tagged with it. The background refresh reads the epochs of the
//! organizations kept, a few times a second: a different epoch drops everything kept of that
//! organization. A kept read answers only while the latest read of its organization's epoch (by a refresh
//! or by a read of Redis) started less than [`TRUSTED_FOR`] ago, so an answer is never more than that
//! behind Redis, even when the refreshes fail. Another generation drops everything.
//!
//! Memory is bounded by a budget in bytes (what the kept strings take, plus an allowance per entry); when
//! a read would go past it, everything kept is dropped, and the cache fills again with what is asked for.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::read_model::{Page, StoredInterview};

/// How long after its start a read of an organization's epoch vouches for what is kept of it.
pub const TRUSTED_FOR: Duration = Duration::from_millis(750);

/// What each kept read costs beyond its strings.
const ENTRY_OVERHEAD: usize = 128;

/// Which read: the route's parameters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReadKey {
    Studies { start: u64, stop: u64 },
    Study(String),
    Interviews { study: String, start: u64, stop: u64 },
    Interview(String),
}

/// A read as Redis answered it.
#[derive(Debug, Clone)]
pub enum Stored {
    Studies(Arc<Page<String>>),
    Study(Arc<Option<String>>),
    Interviews(Arc<Option<Page<StoredInterview>>>),
    Interview(Arc<Option<StoredInterview>>),
}

impl Stored {
    /// About how many bytes the read takes.
    fn size(&self) -> usize {
        let interview =
            |(doc, transcript): &StoredInterview| doc.len() + transcript.as_ref().map_or(0, String::len) + 48;
        ENTRY_OVERHEAD
            + match self {
                Stored::Studies(page) => page.items.iter().map(|doc| doc.len() + 24).sum(),
                Stored::Study(doc) => doc.as_ref().as_ref().map_or(0, String::len),
                Stored::Interviews(page) => {
                    page.as_ref().as_ref().map_or(0, |page| page.items.iter().map(interview).sum())
                }
                Stored::Interview(one) => one.as_ref().as_ref().map_or(0, interview),
            }
    }
}

pub struct ReadCache {
    budget: usize,
    inner: RwLock<Inner>,
}

#[derive(Default)]
struct Inner {
    generation: u64,
    orgs: HashMap<String, Org>,
    bytes: usize,
}

struct Org {
    epoch: String,
    /// When the latest read that found `epoch` started.
    verified: Instant,
    reads: HashMap<ReadKey, Stored>,
}

impl ReadCache {
    /// A cache of about `budget` bytes; `None` when it is 0 (every request reads Redis).
    pub fn new(budget: usize) -> Option<Self> {
        (budget > 0).then(|| Self { budget, inner: RwLock::default() })
    }

    /// A kept read of `org` in `generation`, if its organization's epoch was vouched for lately.
    pub fn get(&self, generation: u64, org: &str, key: &ReadKey, now: Instant) -> Option<Stored> {
        let inner = self.inner.read().expect("read cache");
        if inner.generation != generation {
            return None;
        }
        let org = inner.orgs.get(org)?;
        if now.saturating_duration_since(org.verified) >= TRUSTED_FOR {
            return None;
        }
        org.reads.get(key).cloned()
    }

    /// Keeps a read of Redis that started at `started` and found the organization at `epoch` (`None`: the
    /// read model has no epoch for it, and nothing is kept). A read that found another epoch than the one
    /// kept replaces what is kept only if it is the newer of the two.
    pub fn insert(
        &self,
        generation: u64,
        org: &str,
        key: ReadKey,
        value: Stored,
        epoch: Option<String>,
        started: Instant,
    ) {
        let Some(epoch) = epoch else { return };
        let size = value.size();
        if size > self.budget {
            return;
        }
        let mut inner = self.inner.write().expect("read cache");
        if inner.generation != generation {
            inner.orgs.clear();
            inner.bytes = 0;
            inner.generation = generation;
        }
        if inner.bytes + size > self.budget {
            inner.orgs.clear();
            inner.bytes = 0;
        }
        let mut freed = 0;
        let kept = inner.orgs.entry(org.to_string()).or_insert_with(|| Org {
            epoch: epoch.clone(),
            verified: started,
            reads: HashMap::new(),
        });
        if kept.epoch != epoch {
            if kept.verified > started {
                return;
            }
            freed = kept.reads.values().map(Stored::size).sum();
            *kept = Org { epoch, verified: started, reads: HashMap::new() };
        }
        kept.verified = kept.verified.max(started);
        let replaced = kept.reads.insert(key, value).map_or(0, |old| old.size());
        inner.bytes = inner.bytes + size - freed - replaced;
    }

    /// The organizations kept in `generation`, whose epochs the refresh reads.
    pub fn organizations(&self, generation: u64) -> Vec<String> {
        let inner = self.inner.read().expect("read cache");
        if inner.generation != generation {
            return Vec::new();
        }
        inner.orgs.keys().cloned().collect()
    }

    /// Records the epochs a refresh that started at `started` read: an organization whose epoch changed
    /// (or is gone) is dropped, the others are vouched for as of `started`.
    pub fn refreshed(&self, generation: u64, epochs: Vec<(String, Option<String>)>, started: Instant) {
        let mut inner = self.inner.write().expect("read cache");
        if inner.generation != generation {
            return;
        }
        for (org, epoch) in epochs {
            let Some(kept) = inner.orgs.get_mut(&org) else { continue };
            if epoch.as_deref() == Some(kept.epoch.as_str()) {
                kept.verified = kept.verified.max(started);
            } else if kept.verified <= started {
                let freed: usize = kept.reads.values().map(Stored::size).sum();
                inner.orgs.remove(&org);
                inner.bytes -= freed;
            }
        }
    }

    /// Drops everything (the read model is not known to be complete, or is gone).
    pub fn forget(&self) {
        let mut inner = self.inner.write().expect("read cache");
        inner.orgs.clear();
        inner.bytes = 0;
    }

    /// The bytes kept, as the budget counts them.
    pub fn bytes(&self) -> usize {
        self.inner.read().expect("read cache").bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(docs: &[&str]) -> Stored {
        Stored::Studies(Arc::new(Page {
            total: docs.len() as u64,
            items: docs.iter().map(|d| d.to_string()).collect(),
        }))
    }

    fn first(stored: Option<Stored>) -> Option<String> {
        match stored? {
            Stored::Studies(page) => page.items.first().cloned(),
            _ => None,
        }
    }

    const KEY: ReadKey = ReadKey::Studies { start: 0, stop: 19 };

    #[test]
    fn a_read_is_served_from_memory_while_its_organizations_epoch_is_vouched_for() {
        let cache = ReadCache::new(1 << 20).unwrap();
        let t0 = Instant::now();
        cache.insert(1, "o", KEY, page(&["a"]), Some("e1".into()), t0);
        assert_eq!(first(cache.get(1, "o", &KEY, t0 + Duration::from_millis(100))).as_deref(), Some("a"));
        assert!(cache.get(1, "o", &KEY, t0 + TRUSTED_FOR).is_none(), "not vouched for lately");
        assert!(cache.get(2, "o", &KEY, t0).is_none() && cache.get(1, "p", &KEY, t0).is_none());
        assert!(cache.get(1, "o", &ReadKey::Studies { start: 20, stop: 39 }, t0).is_none());
        // A refresh that found the same epoch vouches for it again.
        cache.refreshed(1, vec![("o".into(), Some("e1".into()))], t0 + TRUSTED_FOR);
        assert!(cache.get(1, "o", &KEY, t0 + TRUSTED_FOR).is_some());
        assert_eq!(cache.organizations(1), vec!["o".to_string()]);
    }

    #[test]
    fn another_epoch_drops_the_organization_and_an_older_read_never_replaces_a_newer_one() {
        let cache = ReadCache::new(1 << 20).unwrap();
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        cache.insert(1, "o", KEY, page(&["a"]), Some("e1".into()), t(0));
        cache.refreshed(1, vec![("o".into(), Some("e2".into()))], t(10));
        assert!(cache.get(1, "o", &KEY, t(20)).is_none());
        assert_eq!(cache.bytes(), 0);
        // A read that started before a newer epoch was seen is not kept under its older epoch.
        cache.insert(1, "o", KEY, page(&["new"]), Some("e2".into()), t(30));
        cache.insert(1, "o", KEY, page(&["old"]), Some("e1".into()), t(25));
        assert_eq!(first(cache.get(1, "o", &KEY, t(40))).as_deref(), Some("new"));
        // A newer read that found another epoch replaces what was kept.
        cache.insert(1, "o", KEY, page(&["newer"]), Some("e3".into()), t(50));
        assert_eq!(first(cache.get(1, "o", &KEY, t(60))).as_deref(), Some("newer"));
        // A refresh that started before that read does not drop it.
        cache.refreshed(1, vec![("o".into(), Some("e2".into()))], t(45));
        assert!(cache.get(1, "o", &KEY, t(60)).is_some());
        // Without an epoch, nothing is kept; an organization whose epoch is gone is dropped.
        cache.insert(1, "p", KEY, page(&["x"]), None, t(60));
        assert!(cache.get(1, "p", &KEY, t(60)).is_none());
        cache.refreshed(1, vec![("o".into(), None)], t(70));
        assert!(cache.get(1, "o", &KEY, t(70)).is_none());
    }

    #[test]
    fn memory_stays_within_the_budget_and_another_generation_starts_afresh() {
        let doc = "d".repeat(1000);
        let cache = ReadCache::new(10_000).unwrap();
        let t0 = Instant::now();
        for i in 0..50 {
            cache.insert(1, &format!("o{i}"), KEY, page(&[&doc]), Some("e".into()), t0);
            assert!(cache.bytes() <= 10_000, "{}", cache.bytes());
        }
        assert!(cache.bytes() > 0);
        cache.insert(2, "o", KEY, page(&["a"]), Some("e".into()), t0);
        assert!(cache.get(1, "o49", &KEY, t0).is_none() && cache.get(2, "o", &KEY, t0).is_some());
        assert!(cache.organizations(1).is_empty());
        cache.insert(2, "big", KEY, page(&[&"x".repeat(20_000)]), Some("e".into()), t0);
        assert!(cache.get(2, "big", &KEY, t0).is_none(), "a read larger than the budget is not kept");
        cache.forget();
        assert_eq!(cache.bytes(), 0);
        assert!(ReadCache::new(0).is_none());
    }
}
