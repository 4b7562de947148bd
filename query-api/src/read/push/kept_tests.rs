use super::*;
use crate::held::held;

fn entry(kind: Kind, state: State, node: u64) -> Entry {
    Entry { kind, state, node, read_ms: 0, used_ms: AtomicU64::new(0) }
}

fn add(entries: &mut Entries, key: &str, kind: Kind, state: State, node: u64) {
    entries.insert(key, entry(kind, state, node));
}

#[test]
fn what_is_kept_is_counted_by_kind_and_bytes_and_uncounted_when_it_goes() {
    let mut entries = Entries::default();
    add(&mut entries, "rm:g1:{a}:epoch", Kind::Org, State::Pending(1), 7);
    add(&mut entries, "rm:g1:{apikeys}:sha:ab", Kind::Key, State::Known(Known::Value("org_a".into())), 7);
    add(&mut entries, "rm:g1:{b}:epoch", Kind::Org, State::Known(Known::Absent), 8);
    assert_eq!((entries.counts[&Kind::Org], entries.counts[&Kind::Key]), (2, 1));
    let pending = weight("rm:g1:{a}:epoch", &State::Pending(1));
    entries.set("rm:g1:{a}:epoch", State::Known(Known::Value("e1:1700000000000000".into())));
    let known = State::Known(Known::Value("e1:1700000000000000".into()));
    assert_eq!(weight("rm:g1:{a}:epoch", &known), pending + 16 + 19, "the value: two counts and its text");
    entries.retain(|e| e.node != 7);
    assert_eq!((entries.counts[&Kind::Org], entries.counts[&Kind::Key]), (1, 0));
    assert_eq!(entries.bytes, weight("rm:g1:{b}:epoch", &State::Known(Known::Absent)));
    entries.remove("rm:g1:{b}:epoch");
    entries.remove("rm:g1:{b}:epoch");
    assert_eq!((entries.bytes, entries.counts[&Kind::Org], entries.map.len()), (0, 0, 0));
}

/// An API key's entry as the tracker names it, `i` making each its own.
fn api_key(i: usize) -> String {
    format!("bench-scale-100000-1795782629:g1:{{apikeys}}:sha:{:0>64x}", i)
}

#[test]
fn the_bytes_counted_are_the_bytes_held_for_keys_and_epochs_the_table_s_free_room_included() {
    let before = held();
    let mut entries = Entries::default();
    // 120,000: the table has just grown, and is less than half full.
    for i in 0..120_000 {
        let (key, kind) =
            if i % 4 == 0 { (format!("rm:g1:{{org_{i}}}:epoch"), Kind::Org) } else { (api_key(i), Kind::Key) };
        entries.insert(&key, entry(kind, State::Pending(i as u64), 1));
        let value = if kind == Kind::Key { format!("org_{i:0>32}") } else { format!("{:0>32}:1700000000000000", i) };
        entries.set(&key, State::Known(Known::Value(value.into())));
    }
    let measured = (held() - before) as f64;
    let counted = entries.held() as f64;
    assert!(counted >= measured * 0.97 && counted <= measured * 1.03, "counted {counted} bytes, holds {measured}");
    entries.retain(|e| e.kind == Kind::Watch);
    assert_eq!(entries.bytes, 0, "what goes is uncounted");
}

#[test]
fn keeping_stops_before_the_budget_however_the_table_grows() {
    let mut entries = Entries::default();
    // The table would grow from 4,096 buckets to 8,192 (300 KB more) when 3,584 keys are kept.
    let budget = 900_000;
    let mut kept = 0;
    while entries.room_for(&api_key(kept), budget) {
        entries.insert(&api_key(kept), entry(Kind::Key, State::Known(Known::Value("org".into())), 1));
        kept += 1;
        assert!(entries.held() <= budget + kept * 19, "{} bytes held for {kept} keys", entries.held());
    }
    assert!(kept > 1_000, "900 KB hold thousands of keys: {kept}");
    assert!(entries.held() > budget / 2, "the budget is used, not kept away: {} bytes", entries.held());
}

/// The connection serving the key now: `node`, alive, its last answered probe sent at `vouched_ms`.
fn serving(node: u64, vouched_ms: u64) -> Option<Serving> {
    Some(Serving { node, alive: true, vouched_ms })
}

#[test]
fn a_value_is_vouched_for_only_while_its_connection_answered_a_probe_sent_less_than_half_a_second_ago() {
    let value = Known::Value("org_a".into());
    // Read at 1,000 ms on connection 7, whose last answered probe was sent at 1,200 ms.
    assert!(vouched(&value, 7, 1_000, serving(7, 1_200), 1_300));
    assert!(vouched(&value, 7, 1_000, serving(7, 1_200), 1_699), "499 ms after the probe was sent");
    assert!(!vouched(&value, 7, 1_000, serving(7, 1_200), 1_700), "500 ms: the bound");
    // A process that did not run for a minute stops trusting at once, whatever its timers did meanwhile.
    assert!(!vouched(&value, 7, 1_000, serving(7, 1_200), 61_200));
    // A value (not an absence) does not age by itself: only its connection's answers matter.
    assert!(vouched(&value, 7, 1_000, serving(7, 3_600_000), 3_600_100));
}

#[test]
fn a_value_read_on_another_connection_a_dead_one_or_one_never_probed_is_not_vouched_for() {
    let value = Known::Value("e1:1700000000000000".into());
    assert!(!vouched(&value, 7, 1_000, serving(8, 1_200), 1_300), "the slot is served by another connection now");
    assert!(!vouched(&value, 7, 1_000, None, 1_300), "no connection serves the slot");
    let dead = Some(Serving { node: 7, alive: false, vouched_ms: 1_200 });
    assert!(!vouched(&value, 7, 1_000, dead, 1_300), "the connection was lost");
    assert!(!vouched(&value, 7, 1_000, serving(7, 0), 300), "no probe answered yet");
}

#[test]
fn an_absence_is_vouched_for_less_than_a_second_after_it_was_read() {
    assert!(vouched(&Known::Absent, 7, 1_000, serving(7, 1_900), 1_950));
    assert!(!vouched(&Known::Absent, 7, 1_000, serving(7, 1_900), 2_000), "a second after the read");
}
