use super::super::document::InterviewDoc;
use super::super::transcript::{Long, Transcript, Whole};
use super::*;
use crate::held::held;

/// A long transcript as a page read would return it.
fn long() -> Long {
    let (key, rewritten_key) = ("t:".repeat(40), "r:".repeat(20));
    Long { key, length: 1 << 30, rewritten_key, rewritten: "0123456789abcdef0123456789abcdef".into() }
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

fn epoch(token: &str) -> Arc<str> {
    Arc::from(token)
}

fn kept(found: Option<(Stored, Arc<str>)>) -> Option<String> {
    first(found.map(|(stored, _)| stored))
}

#[test]
fn a_read_is_served_only_while_its_epoch_is_the_organizations_current_one() {
    let cache = ReadCache::new(1 << 20).unwrap();
    cache.insert(1, "o", KEY, page(&["a"]), Some(&epoch("e1")));
    let (stored, at) = cache.get(1, "o", &KEY, "e1").unwrap();
    assert_eq!((first(Some(stored)).as_deref(), &*at), (Some("a"), "e1"));
    assert!(cache.get(1, "o", &KEY, "e2").is_none(), "the organization changed since");
    assert!(cache.get(2, "o", &KEY, "e1").is_none() && cache.get(1, "p", &KEY, "e1").is_none());
    assert!(cache.get(1, "o", &ReadKey::Studies { start: 20, stop: 39 }, "e1").is_none());
    // A later read replaces what was kept for the same page.
    cache.insert(1, "o", KEY, page(&["b"]), Some(&epoch("e2")));
    assert_eq!(kept(cache.get(1, "o", &KEY, "e2")).as_deref(), Some("b"));
    assert!(cache.get(1, "o", &KEY, "e1").is_none());
    // Without an epoch, nothing is kept.
    cache.insert(1, "p", KEY, page(&["x"]), None);
    assert!(cache.get(1, "p", &KEY, "").is_none());
}

#[test]
fn when_full_the_cache_evicts_some_reads_and_keeps_the_rest() {
    let doc = "d".repeat(1000);
    let budget = 256 * 1024;
    let cache = ReadCache::new(budget).unwrap();
    let e = epoch("e");
    for i in 0..1000 {
        cache.insert(1, &format!("o{}", i % 10), ReadKey::Study(format!("s{i}").into()), page(&[&doc]), Some(&e));
        assert!(cache.bytes() <= budget, "{}", cache.bytes());
    }
    let kept = (0..1000)
        .filter(|i| cache.get(1, &format!("o{}", i % 10), &ReadKey::Study(format!("s{i}").into()), "e").is_some())
        .count();
    assert!(kept > 100, "evicting keeps most of what fits: {kept} of about 200 kept");
    assert!(cache.get(1, "o9", &ReadKey::Study("s999".into()), "e").is_some(), "the latest read is kept");
}

#[test]
fn another_generation_starts_afresh_and_a_read_larger_than_the_budget_is_not_kept() {
    let cache = ReadCache::new(64 * 1024).unwrap();
    let e = epoch("e");
    cache.insert(1, "o", KEY, page(&["a"]), Some(&e));
    cache.insert(2, "o", KEY, page(&["b"]), Some(&e));
    assert!(cache.get(1, "o", &KEY, "e").is_none());
    assert_eq!(kept(cache.get(2, "o", &KEY, "e")).as_deref(), Some("b"));
    cache.insert(2, "big", KEY, page(&[&"x".repeat(100_000)]), Some(&e));
    assert!(cache.get(2, "big", &KEY, "e").is_none(), "a read larger than the budget is not kept");
    cache.forget();
    assert_eq!(cache.reads.weight(), 0);
    assert!(ReadCache::new(0).is_none());
}

#[test]
fn the_bytes_counted_are_the_bytes_the_cache_holds_keys_included() {
    let cache = ReadCache::new(64 << 20).unwrap();
    let e = epoch("epoch-token");
    let before = held();
    // Kept 404s of the longest ids a read may ask for (what a made-up id costs), pages, one interview.
    for i in 0..2000 {
        let id = format!("{i:0>256}");
        cache.insert(1, "org", ReadKey::Interview(id.into()), Stored::Interview(Arc::new(None)), Some(&e));
    }
    for i in 0..50 {
        let docs: Vec<String> = (0..20).map(|j| format!("{{\"id\":\"s{i}-{j}\"}}").repeat(10)).collect();
        let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
        cache.insert(1, &format!("org{i}"), KEY, page(&docs), Some(&e));
    }
    let stored = format!(
        r#"{{"id":"i","participant":null,"facets":[],"video":{{"bucket":"{}","key":"{}"}},"createdAt":"a","updatedAt":"b"}}"#,
        "b".repeat(200),
        "k".repeat(800)
    );
    let interview = (InterviewDoc::new(stored), Transcript::Whole(Whole::of("WEBVTT".repeat(10_000))));
    let long = (InterviewDoc::new("{}".repeat(500)), Transcript::Long(long()));
    for (id, read) in [("i", interview), ("long", long)] {
        let (key, stored) = (ReadKey::Interview(id.into()), Stored::Interview(Arc::new(Some(read))));
        cache.insert(1, "org", key, stored, Some(&e));
    }
    let measured = (held() - before) as f64;
    let counted = cache.bytes() as f64;
    // Never less than held; more by the epoch, shared by every read and counted with each, and by the
    // slots' vector's free room, counted at its most.
    assert!(counted >= measured && counted <= measured * 1.3, "counted {counted} bytes, holds {measured}");
    cache.forget();
    assert_eq!(cache.bytes(), cache.structures(), "the structures stay");
}

#[test]
fn many_small_reads_are_kept_within_the_budget_the_cache_s_own_table_and_slots_included() {
    let budget = 4 << 20;
    let before = held();
    let cache = ReadCache::new(budget).unwrap();
    let e = epoch("epoch-token");
    // 404s of short ids: the smallest reads, so that the cache's slots and table weigh the most.
    for i in 0..300_000 {
        cache.insert(1, "org", ReadKey::Interview(format!("i{i}").into()), Stored::Interview(Arc::new(None)), Some(&e));
    }
    let measured = (held() - before) as usize;
    assert!(cache.bytes() <= budget, "counted {} bytes against a budget of {budget}", cache.bytes());
    assert!(measured <= budget + budget / 20, "holds {measured} bytes against a budget of {budget}");
    assert!(cache.get(1, "org", &ReadKey::Interview("i299999".into()), "epoch-token").is_some());
    assert!(measured > budget / 2, "the budget is used: {measured} bytes held");
}
