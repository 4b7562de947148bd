//! The sample dataset: three organizations' studies, interviews and API keys as contract events.
//!
//! Everything is deterministic (ids, event ids, times, texts), so publishing it again only produces
//! duplicates (same aggregate, same sequence) that the projector ignores.

use chrono::{DateTime, Duration, FixedOffset, SecondsFormat, TimeZone};
use end_to_end::events::{envelope, key_sha256, Envelope, Outgoing};
use serde_json::{json, Value};
use shared::Topic;

use super::content::{ANSWERS, EXTRA_ANSWERS, ORGS, PEOPLE, QUESTIONS, TRICKY_ANSWER};

/// What the sample-data binary publishes and uploads.
#[derive(Default)]
pub struct Dataset {
    pub messages: Vec<Outgoing>,
    /// Object keys of the videos to upload (the events refer to them).
    pub videos: Vec<String>,
    /// (organization, key, live): the plain API keys whose SHA-256 is published.
    pub keys: Vec<(String, String, bool)>,
}

/// The events of one aggregate, with its running sequence and clock (in the offset its writer used).
struct Aggregate {
    topic: Topic,
    org: String,
    id: String,
    seq: u64,
    at: DateTime<FixedOffset>,
    out: Vec<Outgoing>,
}

impl Aggregate {
    fn new(topic: Topic, org: &str, id: &str, at: DateTime<FixedOffset>) -> Self {
        Self { topic, org: org.into(), id: id.into(), seq: 0, at, out: Vec::new() }
    }

    /// The next event, `after` seconds after the previous one.
    fn emit(&mut self, after: i64, kind: &str, data: Value) -> &mut Self {
        self.seq += 1;
        self.at += Duration::seconds(after) + Duration::milliseconds((self.seq as i64 * 137) % 1000);
        let digest = key_sha256(&format!("sample-data/{}/{}", self.id, self.seq));
        let event_id =
            format!("{}-{}-{}-{}-{}", &digest[0..8], &digest[8..12], &digest[12..16], &digest[16..20], &digest[20..32]);
        let at = self.at.to_rfc3339_opts(SecondsFormat::Millis, true);
        let fields =
            Envelope { event_id: &event_id, kind, org: &self.org, aggregate: &self.id, sequence: self.seq, at: &at };
        let value = envelope(&fields, data);
        self.out.push(Outgoing { topic: self.topic, key: self.id.clone(), value: value.to_string().into_bytes() });
        self
    }
}

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;

/// What is special about one interview.
#[derive(PartialEq, Clone, Copy)]
enum Twist {
    Plain,
    /// Timings past an hour and the escaping/blank-line answer.
    Tricky,
    Hidden,
    HiddenThenUnhidden,
    Deleted,
    VideoDeleted,
    InProgress,
    FirstNameOnly,
    NoName,
    NoParticipant,
    NoParticipantMessages,
    ExplicitBucket,
    Reidentified,
}

fn twist(study: usize, n: usize) -> Twist {
    use Twist::*;
    match (study, n) {
        (0, 0) => Tricky,
        (0, 1) | (1, 1) => Hidden,
        (0, 2) => HiddenThenUnhidden,
        (0, 3) => Deleted,
        (0, 4) => VideoDeleted,
        (0, 5) => InProgress,
        (0, 6) => FirstNameOnly,
        (0, 7) => NoName,
        (0, 8) => ExplicitBucket,
        (1, 0) => Reidentified,
        (2, 0) => NoParticipant,
        (2, 1) => NoParticipantMessages,
        _ => Plain,
    }
}

/// The whole dataset; `bucket` is the one the explicit-bucket video names.
pub fn build(bucket: &str) -> Dataset {
    let mut ds = Dataset::default();
    let mut person = 0;
    for (o, (org, short, offset, titles)) in ORGS.iter().enumerate() {
        let tz = FixedOffset::east_opt(offset * HOUR as i32).expect("valid offset");
        let base = tz.with_ymd_and_hms(2026, 1, 5 + 3 * o as u32, 9, 0, 0).single().expect("valid date");
        for (s, title) in titles.iter().enumerate() {
            let id = format!("std_{short}_{:02}", s + 1);
            // Alternate the writers' offsets: some events in UTC, some in the organization's own.
            let writer = if s % 2 == 0 { tz } else { FixedOffset::east_opt(0).expect("utc") };
            let created = base.with_timezone(&writer) + Duration::seconds(s as i64 * DAY + 1234 * s as i64);
            let mut study = Aggregate::new(Topic::Study, org, &id, created);
            let launch = 26 * HOUR;
            if s == 1 {
                study.emit(0, "study.created", json!({ "internalTitle": format!("{title} (working title)") }));
                study.emit(2 * HOUR, "study.retitled", json!({ "internalTitle": title }));
            } else {
                study.emit(0, "study.created", json!({ "internalTitle": title }));
            }
            if s == 4 {
                ds.messages.append(&mut study.out); // draft
                continue;
            }
            study.emit(launch, "study.launched", json!({}));
            let launched = study.at;
            let interviews = match s {
                0 => 10 + o % 3,
                1 => 7 + o,
                2 => 6,
                3 => 12 - o,
                5 | 6 => 1, // orphans: completed interviews of a study that is not completed
                _ => 0,
            };
            for n in 0..interviews {
                let iid = format!("int_{short}_{:02}_{:02}", s + 1, n + 1);
                let tw = if s < 4 { twist(s, n) } else { Twist::Plain };
                // The last two interviews of each study start at the same instant (tie order by id).
                let k = n.min(interviews.saturating_sub(2)) as i64;
                let start = launched + Duration::seconds(DAY + 5 * HOUR * k + 61 * k % 7);
                interview(&mut ds, org, &iid, &id, start, tw, PEOPLE[person % PEOPLE.len()], bucket);
                person += 1;
            }
            if s == 5 {
                ds.messages.append(&mut study.out); // in progress
                continue;
            }
            let completed_at = match s {
                0 => base + Duration::days(10) + Duration::hours(7),
                // 21:15 at -05:00 is the next day in UTC: completedOn is the UTC date.
                1 => base + Duration::days(24) + Duration::hours(12) + Duration::minutes(15),
                // Two studies completed at the same instant, written with different offsets.
                2 => (base + Duration::days(38)).with_timezone(&FixedOffset::east_opt(0).expect("utc")),
                3 => base + Duration::days(38),
                _ => base + Duration::days(30),
            };
            study.at = study.at.max(completed_at.with_timezone(&writer));
            study.emit(
                4,
                "study.completed",
                json!({ "completedAt": completed_at.to_rfc3339_opts(SecondsFormat::Secs, true) }),
            );
            match s {
                6 => study.emit(3 * DAY, "study.reopened", json!({})),
                7 => study.emit(DAY + 300, "study.deleted", json!({})),
                _ => &mut study,
            };
            ds.messages.append(&mut study.out);
        }
        keys(&mut ds, org, short, tz);
    }
    ds
}

/// One interview's events, and its video object if it has one.
#[allow(clippy::too_many_arguments)]
fn interview(
    ds: &mut Dataset,
    org: &str,
    id: &str,
    study: &str,
    start: DateTime<FixedOffset>,
    tw: Twist,
    (first, last, lang): (&str, &str, usize),
    bucket: &str,
) {
    let mut it = Aggregate::new(Topic::Interview, org, id, start);
    it.emit(0, "interview.started", json!({ "studyId": study }));
    let participant = format!("ptc_{}", &key_sha256(id)[..10]);
    let (first, last) = match tw {
        Twist::FirstNameOnly => (Value::from(first), Value::Null),
        Twist::NoName => (Value::Null, Value::Null),
        _ => (Value::from(first), Value::from(last)),
    };
    if tw == Twist::Reidentified {
        let data = json!({ "participantId": "ptc_unknown", "firstName": "Guest", "lastName": null });
        it.emit(20, "interview.participant_identified", data);
    }
    if tw != Twist::NoParticipant {
        let data = json!({ "participantId": participant, "firstName": first, "lastName": last });
        it.emit(45, "interview.participant_identified", data);
    }
    let seed = usize::from_str_radix(&key_sha256(id)[..12], 16).expect("hex");
    let pairs = if lang == 0 { 3 + seed % 3 } else { 3 };
    let mut t = if tw == Twist::Tricky { 3700.25 } else { 4.5 + (seed % 9) as f64 };
    for k in 0..pairs {
        let q = json!({ "messageId": format!("msg_{id}_{:02}", 2 * k + 1), "role": "interviewer",
            "text": QUESTIONS[k], "startSeconds": t, "endSeconds": t + 5.5 });
        it.emit(30, "interview.message_recorded", q);
        if tw == Twist::NoParticipantMessages {
            continue;
        }
        let (text, translated) = if k < 3 { ANSWERS[lang][k] } else { (EXTRA_ANSWERS[k - 3], "") };
        let text = if tw == Twist::Tricky && k == 1 { TRICKY_ANSWER } else { text };
        // 01:02:03.004 for the first answer of the long interview.
        let start = if tw == Twist::Tricky && k == 0 { 3723.004 } else { t + 7.0 };
        let end = start + 9.75 + (k as f64) * 4.0;
        let mut a = json!({ "messageId": format!("msg_{id}_{:02}", 2 * k + 2), "role": "participant", "text": text });
        if (seed + k) % 5 == 1 && tw != Twist::Tricky {
            // timing missing: zero start, end equal to the start
        } else if (seed + k) % 5 == 2 {
            a["startSeconds"] = json!(start);
            a["endSeconds"] = Value::Null;
        } else {
            a["startSeconds"] = json!(start);
            a["endSeconds"] = json!(end);
        }
        if !translated.is_empty() {
            a["translatedText"] = json!(translated);
        }
        it.emit(40, "interview.message_recorded", a);
        t = end + 3.0;
    }
    let segment = ["SMB", "Mid-market", "Enterprise"][seed % 3];
    let sentiment = ["positive", "neutral", "negative", "mixed"][seed % 4];
    if seed % 9 != 4 || tw == Twist::Tricky {
        let mut facets = vec![
            json!({ "label": "Segment", "values": [segment] }),
            json!({ "label": "Sentiment", "values": [sentiment] }),
        ];
        if seed.is_multiple_of(2) {
            facets.push(json!({ "label": "Features mentioned", "values": ["Export", "Dashboard", "Bookmarks"] }));
        }
        it.emit(600, "interview.facets_updated", json!({ "facets": facets }));
    }
    let key = format!("interviews/{id}.mp4");
    let has_video = seed % 7 != 5 || matches!(tw, Twist::Tricky | Twist::VideoDeleted | Twist::ExplicitBucket);
    if has_video {
        let data =
            if tw == Twist::ExplicitBucket { json!({ "bucket": bucket, "key": key }) } else { json!({ "key": key }) };
        it.emit(900, "interview.video_stored", data);
        ds.videos.push(key);
    }
    if tw != Twist::InProgress {
        it.emit(120, "interview.completed", json!({}));
    }
    match tw {
        Twist::Hidden => it.emit(2 * HOUR, "interview.hidden", json!({})),
        Twist::HiddenThenUnhidden => {
            it.emit(HOUR, "interview.hidden", json!({})).emit(DAY, "interview.unhidden", json!({}))
        }
        Twist::Deleted => it.emit(3 * HOUR, "interview.deleted", json!({})),
        Twist::VideoDeleted => it.emit(DAY, "interview.video_deleted", json!({})),
        _ => &mut it,
    };
    ds.messages.append(&mut it.out);
}

/// One live key per organization; for the first a rotation (old key created, new one created, old one deleted).
fn keys(ds: &mut Dataset, org: &str, short: &str, tz: FixedOffset) {
    let live = format!("demo-{short}-2026-key");
    let at = tz.with_ymd_and_hms(2026, 1, 2, 10, 30, 0).single().expect("valid date");
    if short == "acme" {
        let old = format!("demo-{short}-2025-key");
        let mut k = Aggregate::new(Topic::ApiKey, org, &format!("key_{short}_2025"), at - Duration::days(60));
        k.emit(0, "api_key.created", json!({ "name": "CRM sync (2025)", "keySha256": key_sha256(&old) }));
        k.emit(62 * DAY, "api_key.deleted", json!({}));
        ds.messages.append(&mut k.out);
        ds.keys.push((org.into(), old, false));
    }
    let mut k = Aggregate::new(Topic::ApiKey, org, &format!("key_{short}_2026"), at);
    k.emit(0, "api_key.created", json!({ "name": "CRM sync", "keySha256": key_sha256(&live) }));
    ds.messages.append(&mut k.out);
    ds.keys.push((org.into(), live, true));
}
