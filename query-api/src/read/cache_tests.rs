use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use super::super::transcript::Transcript;
use super::super::trust::TRUSTED_FOR;
use super::*;

/// Counts the bytes this thread has allocated and not freed, so that a test can see what a cache holds.
struct Counting;

thread_local! {
    static HELD: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = HELD.try_with(|held| held.set(held.get() + layout.size() as isize));
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = HELD.try_with(|held| held.set(held.get() - layout.size() as isize));
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn held() -> isize {
    HELD.with(Cell::get)
}

fn page(docs: &[&str]) -> Stored {
    Stored::Studies(Arc::new(Page { total: docs.len() as u64, items: docs.iter().map(|d| d.to_string()).collect() }))
}

fn first(stored: Option<Stored>) -> Option<String> {
    match stored? {
        Stored::Studies(page) => page.items.first().cloned(),
        _ => None,
    }
}

const KEY: ReadKey = ReadKey::Studies { start: 0, stop: 19 };

fn org(name: &str) -> Arc<str> {
    Arc::from(name)
}

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
    cache.refreshed(1, vec![(org("o"), Some("e1".into()))], t0 + TRUSTED_FOR);
    assert!(cache.get(1, "o", &KEY, t0 + TRUSTED_FOR).is_some());
    assert_eq!(cache.organizations(1), vec![org("o")]);
}

#[test]
fn another_epoch_drops_the_organization_and_an_older_read_never_replaces_a_newer_one() {
    let cache = ReadCache::new(1 << 20).unwrap();
    let t0 = Instant::now();
    let t = |ms| t0 + Duration::from_millis(ms);
    cache.insert(1, "o", KEY, page(&["a"]), Some("e1".into()), t(0));
    cache.refreshed(1, vec![(org("o"), Some("e2".into()))], t(10));
    assert!(cache.get(1, "o", &KEY, t(20)).is_none());
    assert!(cache.reads.is_empty(), "the reads of the old epoch are dropped");
    // A read that started before a newer epoch was seen is not kept under its older epoch.
    cache.insert(1, "o", KEY, page(&["new"]), Some("e2".into()), t(30));
    cache.insert(1, "o", KEY, page(&["old"]), Some("e1".into()), t(25));
    assert_eq!(first(cache.get(1, "o", &KEY, t(40))).as_deref(), Some("new"));
    // A newer read that found another epoch replaces what was kept.
    cache.insert(1, "o", KEY, page(&["newer"]), Some("e3".into()), t(50));
    assert_eq!(first(cache.get(1, "o", &KEY, t(60))).as_deref(), Some("newer"));
    // A refresh that started before that read does not drop it.
    cache.refreshed(1, vec![(org("o"), Some("e2".into()))], t(45));
    assert!(cache.get(1, "o", &KEY, t(60)).is_some());
    // Without an epoch, nothing is kept; an organization whose epoch is gone is dropped.
    cache.insert(1, "p", KEY, page(&["x"]), None, t(60));
    assert!(cache.get(1, "p", &KEY, t(60)).is_none());
    cache.refreshed(1, vec![(org("o"), None)], t(70));
    assert!(cache.get(1, "o", &KEY, t(70)).is_none());
    assert_eq!(cache.bytes(), 0, "nothing is kept, nothing is counted");
}

#[test]
fn when_full_the_cache_evicts_some_reads_and_keeps_the_rest() {
    let doc = "d".repeat(1000);
    let budget = 256 * 1024;
    let cache = ReadCache::new(budget).unwrap();
    let t0 = Instant::now();
    for i in 0..1000 {
        cache.insert(
            1,
            &format!("o{}", i % 10),
            ReadKey::Study(format!("s{i}").into()),
            page(&[&doc]),
            Some("e".into()),
            t0,
        );
        assert!(cache.bytes() <= budget, "{}", cache.bytes());
    }
    let kept = (0..1000)
        .filter(|i| cache.get(1, &format!("o{}", i % 10), &ReadKey::Study(format!("s{i}").into()), t0).is_some())
        .count();
    assert!(kept > 100, "evicting keeps most of what fits: {kept} of about 200 kept");
    assert!(cache.get(1, "o9", &ReadKey::Study("s999".into()), t0).is_some(), "the latest read is kept");
}

#[test]
fn another_generation_starts_afresh_and_a_read_larger_than_the_budget_is_not_kept() {
    let cache = ReadCache::new(64 * 1024).unwrap();
    let t0 = Instant::now();
    cache.insert(1, "o", KEY, page(&["a"]), Some("e".into()), t0);
    cache.insert(2, "o", KEY, page(&["b"]), Some("e".into()), t0);
    assert!(cache.get(1, "o", &KEY, t0).is_none());
    assert_eq!(first(cache.get(2, "o", &KEY, t0)).as_deref(), Some("b"));
    assert!(cache.organizations(1).is_empty());
    cache.insert(2, "big", KEY, page(&[&"x".repeat(100_000)]), Some("e".into()), t0);
    assert!(cache.get(2, "big", &KEY, t0).is_none(), "a read larger than the budget is not kept");
    cache.forget();
    assert_eq!(cache.bytes(), 0);
    assert!(ReadCache::new(0).is_none());
}

#[test]
fn the_bytes_counted_are_the_bytes_the_cache_holds_keys_included() {
    let cache = ReadCache::new(64 << 20).unwrap();
    let t0 = Instant::now();
    let before = held();
    // Kept 404s of the longest ids a read may ask for (what a made-up id costs), pages, one interview.
    for i in 0..2000 {
        let id = format!("{i:0>256}");
        cache.insert(1, "org", ReadKey::Interview(id.into()), Stored::Interview(Arc::new(None)), Some("e".into()), t0);
    }
    for i in 0..50 {
        let docs: Vec<String> = (0..20).map(|j| format!("{{\"id\":\"s{i}-{j}\"}}").repeat(10)).collect();
        let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
        cache.insert(1, &format!("org{i}"), KEY, page(&docs), Some("epoch-token".into()), t0);
    }
    let interview = ("{}".repeat(500), Transcript::Whole("WEBVTT".repeat(10_000)));
    let long = ("{}".repeat(500), Transcript::Long { key: "t:".repeat(40), length: 1 << 30 });
    for (id, read) in [("i", interview), ("long", long)] {
        let (key, stored) = (ReadKey::Interview(id.into()), Stored::Interview(Arc::new(Some(read))));
        cache.insert(1, "org", key, stored, Some("e".into()), t0);
    }
    let measured = (held() - before) as f64;
    let counted = cache.bytes() as f64;
    // The cache's table was allocated when it was made: what it holds since is the entries.
    assert!(counted >= measured * 0.95 && counted <= measured * 1.1, "counted {counted} bytes, holds {measured}");
    eprintln!("counted {counted} bytes, holds {measured}");
    cache.forget();
    assert_eq!(cache.bytes(), 0);
}
