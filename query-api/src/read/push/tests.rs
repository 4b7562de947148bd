use super::*;

fn entry(kind: Kind, state: State, node: u64) -> Entry {
    Entry { kind, state, node, read_ms: 0, used_ms: AtomicU64::new(0) }
}

fn add(entries: &mut Entries, key: &str, kind: Kind, state: State, node: u64) {
    entries.bytes += weight(key, &state);
    *entries.counts.entry(kind).or_default() += 1;
    entries.map.insert(key.into(), entry(kind, state, node));
}

#[test]
fn what_is_kept_is_counted_by_kind_and_bytes_and_uncounted_when_it_goes() {
    let mut entries = Entries::default();
    add(&mut entries, "rm:g1:{a}:epoch", Kind::Org, State::Pending(1), 7);
    add(&mut entries, "rm:g1:{apikeys}:sha:ab", Kind::Key, State::Known(Some("org_a".into())), 7);
    add(&mut entries, "rm:g1:{b}:epoch", Kind::Org, State::Known(None), 8);
    assert_eq!((entries.counts[&Kind::Org], entries.counts[&Kind::Key]), (2, 1));
    let pending = weight("rm:g1:{a}:epoch", &State::Pending(1));
    entries.set("rm:g1:{a}:epoch", State::Known(Some("e1:1700000000000000".into())));
    assert_eq!(weight("rm:g1:{a}:epoch", &State::Known(Some("e1:1700000000000000".into()))), pending + 19);
    entries.retain(|e| e.node != 7);
    assert_eq!((entries.counts[&Kind::Org], entries.counts[&Kind::Key]), (1, 0));
    assert_eq!(entries.bytes, weight("rm:g1:{b}:epoch", &State::Known(None)));
    entries.remove("rm:g1:{b}:epoch");
    entries.remove("rm:g1:{b}:epoch");
    assert_eq!((entries.bytes, entries.counts[&Kind::Org], entries.map.len()), (0, 0, 0));
}
