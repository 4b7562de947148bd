//! A value is valid by its type's schema exactly when the decoder does not call it poison. A publisher
//! that checks its messages against `docs/schemas/` must neither get poison through nor be told a
//! message is bad that the projector would take, so the schemas are held to the decoder on generated
//! events: valid ones, and ones with fields removed, replaced by values of another type or out of an
//! enumeration, and added. The checks a schema cannot make (the key, the topic, the spelling `4.0`, the
//! date-time forms RFC 3339 does not have) are kept out of the generated values; `docs/events.md` lists
//! them.

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use shared::events::TYPES;
use shared::{decode, Decoded, Poison, Topic};

use super::{topic_of, SCHEMAS};

const DATES: [&str; 4] = [
    "2026-11-02T16:20:05.120+01:00",
    "2026-11-02T15:20:00Z",
    "2026-02-28T23:59:59.123456789-05:30",
    "1999-12-31T00:00:00Z",
];
/// Strings that are no RFC 3339 date-time, and that the decoder refuses too.
const NOT_DATES: [&str; 5] = ["2026-02-30T00:00:00Z", "2026-11-02", "2026-11-02T25:00:00Z", "yesterday", ""];

fn id() -> BoxedStrategy<String> {
    "[a-z0-9_]{1,12}".boxed()
}

fn text() -> BoxedStrategy<String> {
    "[ -~À-ÿ]{0,16}".boxed()
}

fn date() -> BoxedStrategy<Value> {
    proptest::sample::select(&DATES[..]).prop_map(|d| json!(d)).boxed()
}

/// `value`, `null`, or left out (`None`).
fn optional(value: BoxedStrategy<Value>) -> BoxedStrategy<Option<Value>> {
    prop_oneof![value.prop_map(Some), Just(Some(Value::Null)), Just(None)].boxed()
}

fn seconds() -> BoxedStrategy<Value> {
    prop_oneof![(0u32..100_000).prop_map(|s| json!(s)), (0.0f64..1e6).prop_map(|s| json!(s))].boxed()
}

fn object(fields: Vec<(&'static str, Option<Value>)>) -> Value {
    Value::Object(fields.into_iter().filter_map(|(k, v)| Some((k.to_string(), v?))).collect())
}

/// A valid `data` of `kind`; of any fields for a type the contract does not have.
fn data(kind: &'static str) -> BoxedStrategy<Value> {
    let s = |s: String| json!(s);
    match kind {
        "study.created" | "study.retitled" => text().prop_map(|t| json!({"internalTitle": t})).boxed(),
        "study.completed" => date().prop_map(|d| json!({"completedAt": d})).boxed(),
        "interview.started" => id().prop_map(|i| json!({"studyId": i})).boxed(),
        "interview.participant_identified" => {
            let name = || prop_oneof![text().prop_map(s), Just(Value::Null)];
            (id(), name(), name())
                .prop_map(|(p, f, l)| json!({"participantId": p, "firstName": f, "lastName": l}))
                .boxed()
        }
        "interview.message_recorded" => (
            id(),
            proptest::sample::select(vec!["participant", "interviewer"]),
            text(),
            optional(text().prop_map(s).boxed()),
            optional(seconds()),
            optional(seconds()),
        )
            .prop_map(|(m, role, t, tr, start, end)| {
                object(vec![
                    ("messageId", Some(json!(m))),
                    ("role", Some(json!(role))),
                    ("text", Some(json!(t))),
                    ("translatedText", tr),
                    ("startSeconds", start),
                    ("endSeconds", end),
                ])
            })
            .boxed(),
        "interview.facets_updated" => {
            let facet =
                (text(), proptest::collection::vec(text(), 0..3)).prop_map(|(l, v)| json!({"label": l, "values": v}));
            proptest::collection::vec(facet, 0..3).prop_map(|f| json!({"facets": f})).boxed()
        }
        "interview.video_stored" => (optional(id().prop_map(s).boxed()), text())
            .prop_map(|(bucket, key)| object(vec![("bucket", bucket), ("key", Some(json!(key)))]))
            .boxed(),
        "api_key.created" => (text(), any::<[u8; 32]>())
            .prop_map(
                |(n, sha)| json!({"name": n, "keySha256": sha.iter().map(|b| format!("{b:02x}")).collect::<String>()}),
            )
            .boxed(),
        _ if TYPES.contains(&kind) => Just(json!({})).boxed(),
        _ => proptest::collection::btree_map("[a-z]{1,6}", text(), 0..3).prop_map(|m| json!(m)).boxed(),
    }
}

/// A valid event of any contract type, or a well-formed one of a type the contract does not have.
fn event() -> impl Strategy<Value = Value> {
    let kinds: Vec<&'static str> = TYPES.iter().copied().chain(["study.archived", "survey.created"]).collect();
    proptest::sample::select(kinds).prop_flat_map(|kind| {
        (id(), id(), id(), 1..=u64::MAX, date(), data(kind)).prop_map(move |(e, o, a, seq, at, data)| {
            json!({"eventId": e, "type": kind, "organizationId": o, "aggregateId": a, "sequence": seq,
                "occurredAt": at, "data": data})
        })
    })
}

/// A value put in place of a field, or added: of every JSON type, and enumeration values right and wrong.
fn replacement() -> impl Strategy<Value = Value> {
    let fixed = vec![
        json!(null),
        json!(true),
        json!(0),
        json!(1),
        json!(-1),
        json!(1.5),
        json!(u64::MAX),
        json!(""),
        json!("participant"),
        json!("interviewer"),
        json!("Participant"),
        json!("moderator"),
        json!("study.created"),
        json!("interview.message_recorded"),
        json!("api_key.deleted"),
        json!("study.archived"),
        json!("07c9eb0797b9b1b79f61c93e0e092777b622659777c6534eff5abe9df38dee4e"),
        json!("07C9EB0797B9B1B79F61C93E0E092777B622659777C6534EFF5ABE9DF38DEE4E"),
        json!("07c9eb0797b9b1b79f61c93e0e092777b622659777c6534eff5abe9df38dee4"),
        json!([]),
        json!(["a"]),
        json!([1]),
        json!({}),
        json!({"label": "l", "values": ["v"]}),
        json!({"label": "l"}),
    ];
    let dates: Vec<Value> = DATES.iter().chain(NOT_DATES.iter()).map(|d| json!(d)).collect();
    prop_oneof![proptest::sample::select(fixed), proptest::sample::select(dates), "[a-z]{1,4}".prop_map(|s| json!(s))]
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Removes the n-th member (of an object or an array), counted over the whole value.
    Remove(usize),
    /// Replaces the n-th node (the value itself included).
    Replace(usize, Value),
    /// Adds (or overwrites) a member of the n-th object.
    Add(usize, String, Value),
    /// Changes the n-th node into a near miss of itself (see [`twist`]).
    Twist(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let name = proptest::sample::select(vec!["extra", "x-trace", "eventId", "sequence", "role", "text", "label"]);
    prop_oneof![
        1 => any::<usize>().prop_map(Mutation::Remove),
        1 => (any::<usize>(), replacement()).prop_map(|(n, v)| Mutation::Replace(n, v)),
        1 => (any::<usize>(), name, replacement()).prop_map(|(n, k, v)| Mutation::Add(n, k.to_string(), v)),
        3 => (any::<usize>(), any::<usize>()).prop_map(|(n, k)| Mutation::Twist(n, k)),
    ]
}

/// JSON pointers of every node of `value`, in document order: the value itself first.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match value {
        Value::Object(members) => members.iter().for_each(|(k, v)| pointers(v, format!("{at}/{k}"), out)),
        Value::Array(items) => items.iter().enumerate().for_each(|(i, v)| pointers(v, format!("{at}/{i}"), out)),
        _ => {}
    }
}

/// A value close to `value` that may or may not still fit where it is: a string in another case, cut
/// short, emptied, padded or lengthened; a number negated, made fractional or written as a string; a value wrapped
/// in an array, or an array's first item in its place.
fn twist(value: &Value, k: usize) -> Value {
    match value {
        Value::String(s) => {
            let cut: String = s.chars().take(s.chars().count().saturating_sub(1)).collect();
            let mut twists = vec![s.to_uppercase(), s.to_lowercase(), cut, String::new(), format!("{s}0")];
            // The decoder reads a date-time with spaces around its parts, which RFC 3339 does not have.
            if !s.starts_with(|c: char| c.is_ascii_digit()) {
                twists.push(format!(" {s}"));
            }
            json!(twists[k % twists.len()])
        }
        Value::Number(n) => {
            // No twist writes an integer as a float: `4.0` is an integer to a schema, not to the decoder.
            let f = n.as_f64().unwrap();
            let negated = match n.as_i64() {
                Some(i) => json!(i.checked_neg().unwrap_or(0)),
                None if n.is_u64() => json!(-1),
                None => json!(-f),
            };
            let fraction = [f + 0.5, f + 0.25, 0.5].into_iter().find(|x| x.fract() != 0.0).unwrap();
            [negated, json!(fraction), json!(n.to_string()), json!(0)][k % 4].clone()
        }
        Value::Array(items) if k.is_multiple_of(2) => items.first().cloned().unwrap_or(Value::Null),
        other => json!([other]),
    }
}

fn apply(value: &mut Value, mutation: Mutation) {
    let mut all = Vec::new();
    pointers(value, String::new(), &mut all);
    let pick = |n: usize, of: &[String]| of.get(n % of.len().max(1)).cloned();
    match mutation {
        Mutation::Remove(n) => {
            let Some(at) = pick(n, &all[1..]) else { return };
            let (parent, last) = at.rsplit_once('/').unwrap();
            match value.pointer_mut(parent).unwrap() {
                Value::Object(members) => drop(members.remove(last)),
                Value::Array(items) => drop(items.remove(last.parse::<usize>().unwrap())),
                _ => unreachable!(),
            }
        }
        Mutation::Replace(n, new) => *value.pointer_mut(&pick(n, &all).unwrap()).unwrap() = new,
        Mutation::Twist(n, k) => {
            let node = value.pointer_mut(&pick(n, &all).unwrap()).unwrap();
            *node = twist(node, k);
        }
        Mutation::Add(n, name, new) => {
            let objects: Vec<String> = all.into_iter().filter(|p| value.pointer(p).unwrap().is_object()).collect();
            if let Some(at) = pick(n, &objects) {
                value.pointer_mut(&at).unwrap().as_object_mut().unwrap().insert(name, new);
            }
        }
    }
}

/// What the decoder makes of `value` on its type's topic, keyed by its aggregate.
fn decoded(value: &Value) -> Result<Decoded, Poison> {
    let kind = value.get("type").and_then(Value::as_str).unwrap_or_default();
    let topic = topic_of(kind).unwrap_or(Topic::Study);
    let key = value.get("aggregateId").and_then(Value::as_str).map(str::as_bytes);
    decode(topic, key, &serde_json::to_vec(value).unwrap())
}

fn poison(value: &Value) -> bool {
    decoded(value).is_err()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 20_000, max_shrink_iters: 4096, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn valid_by_its_schema_exactly_when_the_decoder_does_not_call_it_poison(
        mut value in event(),
        mutations in proptest::collection::vec(mutation(), 0..4),
    ) {
        for m in mutations {
            apply(&mut value, m);
        }
        let errors = SCHEMAS.errors(&value);
        let decoded = decoded(&value);
        prop_assert_eq!(errors.is_some(), decoded.is_err(), "{}: schema says {:?}, decoder says {:?}", value, errors, decoded);
    }
}

/// An object with nothing but the envelope, for the cases below.
fn envelope(kind: &str, data: Value) -> Value {
    json!({"eventId": "e", "type": kind, "organizationId": "o", "aggregateId": "a", "sequence": 1,
        "occurredAt": "2026-11-02T15:20:00Z", "data": data})
}

#[test]
fn an_unknown_type_is_checked_by_the_envelope_alone_and_a_known_one_by_its_data() {
    let unknown = envelope("study.archived", json!({"anything": [1, 2]}));
    assert_eq!(SCHEMAS.errors(&unknown), None);
    assert!(!poison(&unknown));
    let known = envelope("study.created", json!({"anything": [1, 2]}));
    assert!(SCHEMAS.errors(&known).is_some());
    assert!(poison(&known));
    let mut extra = Map::new();
    extra.insert("internalTitle".into(), json!("T"));
    extra.insert("addedLater".into(), json!({"nested": true}));
    let extended = envelope("study.created", Value::Object(extra));
    assert_eq!(SCHEMAS.errors(&extended), None);
    assert!(!poison(&extended));
}
