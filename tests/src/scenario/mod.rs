//! A generated stream of lifecycle events, and a straightforward in-memory model of what the read model
//! must hold after it, written from the spec independently of the projector's code.
//!
//! Each aggregate gets a random but valid history; the histories are interleaved at random across
//! aggregates and topics, and some events are delivered again later (at least once delivery).

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};
use shared::Topic;

use crate::events::Outgoing;
use crate::events::{event, key_sha256};
use crate::kafka::Topics;
pub use crate::rng::Rng;

mod expected;

/// What one aggregate's history is, as the model reads it.
struct History {
    topic: Topic,
    org: String,
    id: String,
    /// (kind, occurredAt, data), sequence = index + 1.
    events: Vec<(&'static str, DateTime<Utc>, Value)>,
}

impl History {
    fn push(&mut self, kind: &'static str, at: DateTime<Utc>, data: Value) {
        self.events.push((kind, at, data));
    }
}

/// The expected read model of one organization.
#[derive(Debug, Default, PartialEq)]
pub struct Expected {
    /// Completed study ids, in `GET /studies` order, with their documents.
    pub studies: Vec<(String, Value)>,
    /// Per study id: visible interview ids in `GET /studies/{id}/interviews` order, with document and transcript.
    pub interviews: BTreeMap<String, Vec<(String, Value, Option<String>)>>,
    /// Interview ids that must have no document.
    pub invisible_interviews: Vec<String>,
    /// SHA-256 of live keys.
    pub live_keys: Vec<String>,
    pub revoked_keys: Vec<String>,
}

/// An interview in its study's list: createdAt, id, document, transcript.
pub(super) type Listed = (DateTime<Utc>, String, Value, Option<String>);

pub struct Scenario {
    histories: Vec<History>,
    pub messages: Vec<Outgoing>,
}

fn fmt(at: &DateTime<Utc>) -> String {
    shared::time::format_utc(at)
}

impl Scenario {
    /// `orgs` organizations with `studies` studies each and `interviews` interviews per study.
    pub fn generate(seed: u64, orgs: usize, studies: usize, interviews: usize) -> Self {
        let mut rng = Rng::new(seed);
        let base: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut histories = Vec::new();
        let run = uuid::Uuid::new_v4().simple().to_string();
        for o in 0..orgs {
            let org = format!("org{o}-{}", &run[..8]);
            for k in 0..3 {
                let mut h =
                    History { topic: Topic::ApiKey, org: org.clone(), id: format!("{org}-key{k}"), events: vec![] };
                h.push(
                    "api_key.created",
                    base,
                    json!({"name": "k", "keySha256": key_sha256(&format!("{org}-secret{k}"))}),
                );
                if rng.chance(40) {
                    h.push("api_key.deleted", base + Duration::hours(1), json!({}));
                }
                histories.push(h);
            }
            for s in 0..studies {
                let id = format!("{org}-s{s:02}");
                let mut at = base + Duration::minutes(rng.below(1000) as i64);
                let mut next = |rng: &mut Rng| {
                    at += Duration::milliseconds(1 + rng.below(100_000) as i64);
                    at
                };
                let mut h = History { topic: Topic::Study, org: org.clone(), id: id.clone(), events: vec![] };
                h.push("study.created", next(&mut rng), json!({"internalTitle": format!("Study {s} <draft>")}));
                if rng.chance(50) {
                    h.push("study.retitled", next(&mut rng), json!({"internalTitle": format!("Study {s} — final")}));
                }
                h.push("study.launched", next(&mut rng), json!({}));
                // Few distinct completion times, so that ties (ordered by id) happen.
                let completed_at = base + Duration::days(rng.below(4) as i64);
                if rng.chance(75) {
                    h.push("study.completed", next(&mut rng), json!({"completedAt": fmt(&completed_at)}));
                    if rng.chance(20) {
                        h.push("study.reopened", next(&mut rng), json!({}));
                        if rng.chance(50) {
                            let again = completed_at + Duration::hours(5);
                            h.push("study.completed", next(&mut rng), json!({"completedAt": fmt(&again)}));
                        }
                    }
                }
                if rng.chance(10) {
                    h.push("study.deleted", next(&mut rng), json!({}));
                }
                histories.push(h);
                for i in 0..interviews {
                    histories.push(interview(&mut rng, &org, &id, i, base));
                }
            }
        }
        let messages = interleave(&mut rng, &histories);
        Self { histories, messages }
    }

    pub fn organizations(&self) -> Vec<String> {
        let mut orgs: Vec<String> = self.histories.iter().map(|h| h.org.clone()).collect();
        orgs.dedup();
        orgs
    }

    /// Ids of the aggregates of one organization and topic, in generation order.
    pub fn ids(&self, org: &str, topic: Topic) -> Vec<String> {
        self.histories.iter().filter(|h| h.org == org && h.topic == topic).map(|h| h.id.clone()).collect()
    }

    /// The key hashes of one organization, in generation order.
    pub fn key_hashes(&self, org: &str) -> Vec<String> {
        let keys = self.histories.iter().filter(|h| h.org == org && h.topic == Topic::ApiKey);
        keys.map(|h| h.events[0].2["keySha256"].as_str().unwrap().to_string()).collect()
    }
}

fn interview(rng: &mut Rng, org: &str, study: &str, i: usize, base: DateTime<Utc>) -> History {
    let id = format!("{study}-i{i:02}");
    let mut h = History { topic: Topic::Interview, org: org.to_string(), id, events: vec![] };
    // Few distinct start times, so that ties (ordered by id) happen.
    let mut at = base + Duration::seconds(rng.below(6) as i64 * 30);
    h.push("interview.started", at, json!({"studyId": study}));
    let mut next = |rng: &mut Rng| {
        at += Duration::milliseconds(1 + rng.below(5000) as i64);
        at
    };
    if rng.chance(80) {
        let last = [json!("Lovelace"), json!("Ólafsdóttir"), json!(null), json!("")][rng.below(4) as usize].clone();
        let first = [json!("Ada"), json!("Jón"), json!(null)][rng.below(3) as usize].clone();
        h.push(
            "interview.participant_identified",
            next(rng),
            json!({"participantId": format!("p{}", rng.below(1000)), "firstName": first, "lastName": last}),
        );
    }
    for m in 0..rng.below(5) {
        let role = if rng.chance(50) { "participant" } else { "interviewer" };
        let mut data = json!({"messageId": format!("m{m}"), "role": role, "text": format!("Answer {m} & <more> à côté"), "translatedText": "translated"});
        if rng.chance(70) {
            let start = rng.below(4_000_000) as f64 / 1000.0;
            data["startSeconds"] = json!(start);
            data["endSeconds"] = if rng.chance(80) { json!(start + 2.5) } else { json!(null) };
        }
        h.push("interview.message_recorded", next(rng), data);
    }
    if rng.chance(60) {
        h.push(
            "interview.facets_updated",
            next(rng),
            json!({"facets": [{"label": "Sentiment", "values": ["positive", "calm"]}]}),
        );
    }
    if rng.chance(60) {
        h.push("interview.video_stored", next(rng), json!({"key": format!("{}.mp4", h.id)}));
        if rng.chance(15) {
            h.push("interview.video_deleted", next(rng), json!({}));
        }
    }
    if rng.chance(80) {
        h.push("interview.completed", next(rng), json!({}));
    }
    if rng.chance(20) {
        h.push("interview.hidden", next(rng), json!({}));
        if rng.chance(50) {
            h.push("interview.unhidden", next(rng), json!({}));
        }
    }
    if rng.chance(8) {
        h.push("interview.deleted", next(rng), json!({}));
    }
    h
}

/// Interleaves the histories at random, keeping each aggregate's order, and delivers about one event in
/// ten a second time later in its aggregate's stream.
fn interleave(rng: &mut Rng, histories: &[History]) -> Vec<Outgoing> {
    let mut cursors = vec![0usize; histories.len()];
    let mut open: Vec<usize> = (0..histories.len()).collect();
    let mut out = Vec::new();
    while !open.is_empty() {
        let pick = rng.below(open.len() as u64) as usize;
        let h = &histories[open[pick]];
        let cursor = &mut cursors[open[pick]];
        let message = |seq: usize| {
            let (kind, at, data) = &h.events[seq];
            event(h.topic, &h.org, &h.id, seq as u64 + 1, kind, &fmt(at), data.clone())
        };
        out.push(message(*cursor));
        if *cursor > 0 && rng.chance(10) {
            out.push(message(rng.below(*cursor as u64) as usize));
        }
        *cursor += 1;
        if *cursor == h.events.len() {
            open.swap_remove(pick);
        }
    }
    out
}

/// Topics of a test's own holding a generated stream (see [`Scenario::generate`]), all of it published.
pub async fn published(seed: u64, orgs: usize, studies: usize, interviews: usize) -> (Topics, Scenario) {
    let scenario = Scenario::generate(seed, orgs, studies, interviews);
    (Topics::holding(&scenario.messages).await, scenario)
}
