//! The key layout's rules: slots, escaping, bookkeeping, staged copies.

use super::*;

#[test]
fn a_key_is_named_by_the_lowercase_hex_sha256_of_its_bytes() {
    assert_eq!(key_sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_eq!(hex::encode(key_digest("abc")), key_sha256("abc"));
}

#[test]
fn every_key_of_an_organization_shares_its_hash_tag() {
    let ks = Keyspace::new("rm", 3);
    for org in ["org_1", "a}b", "x:{y}", "%7D"] {
        let keys = [
            ks.aggregate(Topic::Study, org, "s"),
            ks.studies(org),
            ks.study_documents(org),
            ks.aggregate(Topic::Interview, org, "i"),
            ks.interview_documents(org),
            ks.transcript(org, "i"),
            ks.interviews(org, "s"),
            ks.org_epoch(org),
            ks.transcripts_rewritten(org),
        ];
        for key in &keys {
            assert_eq!(hash_tag(key), escape(org), "{key}");
        }
    }
}

#[test]
fn organizations_that_differ_get_different_tags() {
    let ks = Keyspace::new("rm", 1);
    let tags: std::collections::HashSet<_> =
        ["a}b", "a", "a%7Db", "a:b", "a%3Ab"].iter().map(|org| hash_tag(&ks.studies(org)).to_string()).collect();
    assert_eq!(tags.len(), 5);
}

#[test]
fn slots_are_those_redis_cluster_computes() {
    // Values from `CLUSTER KEYSLOT`.
    assert_eq!(slot("foo"), 12182);
    assert_eq!(slot("{user1000}.following"), slot("user1000"));
    assert_eq!(slot("123456789"), 0x31C3);
}

#[test]
fn a_position_tag_exists_for_every_range_and_bookkeeping_is_told_apart() {
    for range in [(0, 0), (5461, 10922), (16383, 16383)] {
        let tag = position_tag(&[range]).unwrap();
        assert!((range.0..=range.1).contains(&slot(&tag)), "{tag}");
    }
    let ks = Keyspace::new("rm", 2);
    assert!(ks.is_bookkeeping(&ks.position("position-3")));
    assert!(ks.is_bookkeeping(&ks.healing()) && ks.is_bookkeeping(&ks.meta()));
    assert!(ks.is_bookkeeping(&ks.api_key_epoch()) && !ks.is_bookkeeping(&ks.api_key_sha("ab")));
    assert!(ks.is_bookkeeping(&ks.org_epoch("o}:epoch")));
    assert!(ks.is_bookkeeping(&ks.transcripts_rewritten("o}:rewritten")));
    assert!(ks.is_position(&ks.positions_on(&[(0, 16383)])) && !ks.at(3).is_position(&ks.position("position-3")));
    assert!(!ks.is_position(&ks.org_epoch("o")) && !ks.is_position(&ks.healing()));
    for id in ["x}:epoch", "x}:position", "}:epoch", "x}:rewritten"] {
        assert!(!ks.is_position(&ks.aggregate(Topic::Study, "o", id)), "{id}");
        assert!(!ks.is_bookkeeping(&ks.aggregate(Topic::Study, "o", id)), "{id}");
        assert!(!ks.is_bookkeeping(&ks.transcript("o", id)), "{id}");
    }
    assert!(!ks.is_bookkeeping(&ks.studies("o")) && !ks.is_bookkeeping(&ks.at(3).healing()));
    assert!(ks.is_bookkeeping(&ks.late()) && ks.is_bookkeeping(&ks.hold("o")));
    assert!(ks.is_bookkeeping(&ks.api_key_hold("k")) && !ks.is_bookkeeping(&ks.aggregate(Topic::ApiKey, "o", "k")));
    let staged = ks.staged(&ks.transcript("o}:x", "i"), "r1").unwrap();
    assert_eq!(hash_tag(&staged), hash_tag(&ks.transcript("o}:x", "i")));
    assert!(ks.is_bookkeeping(&staged) && staged.ends_with(":repair:r1:transcript:i"), "{staged}");
    assert_eq!(ks.staged_by(&staged), Some("r1"));
    assert_eq!(ks.staged(&ks.api_key_sha("ab"), "r1"), None);
    assert_eq!(ks.staged(&ks.late(), "r1"), None);
    assert!(ks.is_bookkeeping(&ks.repair_lease("o")) && ks.staged_by(&ks.repair_lease("o")).is_none());
    assert!(ks.is_bookkeeping(&ks.swapped("o")) && hash_tag(&ks.swapped("o")) == hash_tag(&ks.hold("o")));
    for id in ["x}:hold", "x}:repair:studies", "x}:repairing", "x}:swapped"] {
        assert_eq!(ks.staged_by(&ks.aggregate(Topic::Study, "o", id)), None, "{id}");
        assert!(!ks.is_bookkeeping(&ks.aggregate(Topic::Study, "o", id)), "{id}");
    }
}

#[test]
fn an_organization_pattern_matches_its_keys_only() {
    let ks = Keyspace::new("rm", 2);
    assert_eq!(ks.org_pattern("a*b?[c]"), "rm:g2:{a\\*b\\?\\[c\\]}:*");
    assert_eq!(ks.org_pattern("o"), "rm:g2:{o}:*");
}

#[test]
fn api_keys_live_in_their_own_slot_and_keys_carry_the_generation() {
    let ks = Keyspace::new("rm", 7);
    assert_eq!(hash_tag(&ks.api_key_sha("ab")), "apikeys");
    assert_eq!(hash_tag(&ks.api_key_epoch()), "apikeys");
    assert_eq!(hash_tag(&ks.aggregate(Topic::ApiKey, "org", "k")), "apikeys");
    assert_eq!(ks.aggregate(Topic::Study, "o", "s"), "rm:g7:{o}:study:s");
    assert_eq!(ks.transcript("o", "i:1"), "rm:g7:{o}:transcript:i:1");
    assert!(ks.owner(Topic::Interview, "i").starts_with("rm:g7:"));
    assert_eq!(ks.owners(Topic::Interview, 31), "rm:g7:owners:interview:31");
    for topic in Topic::ALL {
        assert_eq!(ks.owners_of(&ks.owners(topic, 32_767)), Some(topic));
        assert_eq!(ks.owners_of(&ks.at(8).owners(topic, 0)), None, "another generation's");
        assert_eq!(ks.owners_of(&ks.owner(topic, "1")), None);
        assert_eq!(ks.owner_of(&ks.owner(topic, "a:1")), Some((topic, "a:1")));
        assert_eq!(ks.owner_of(&ks.owners(topic, 3)), None);
    }
    assert_eq!(ks.owners_of("rm:g7:owners:interview:x"), None);
    for (org, id) in [("o", "i:1"), ("a}b{c", "x}y"), ("%7D", "")] {
        let state = ks.aggregate(Topic::Interview, org, id);
        assert_eq!(ks.documents_of_interview_state(&state), Some((ks.interview_documents(org), id)), "{state}");
    }
    for other in [ks.aggregate(Topic::Study, "o", "s"), ks.interview_documents("o"), ks.transcript("o", "i")] {
        assert_eq!(ks.documents_of_interview_state(&other), None, "{other}");
    }
    for org in ["o", "a}b{c", "%7D"] {
        assert!(ks.is_documents(&ks.study_documents(org)) && ks.is_documents(&ks.interview_documents(org)), "{org}");
    }
    for other in
        [ks.studies("o"), ks.aggregate(Topic::Interview, "o", "x:interview-docs"), ks.at(8).study_documents("o")]
    {
        assert!(!ks.is_documents(&other), "{other}");
    }
    assert_ne!(ks.at(8).studies("o"), ks.studies("o"));
}
