//! A deterministic, realistic event stream of any length, generated a few organizations at a time so that
//! a million events never sit in memory as histories.
//!
//! Each organization has two API keys and [`STUDIES_PER_ORG`] studies; each study has 5 to 15 interviews;
//! each interview is started, usually identified, records 4 to 12 messages (half of them the
//! participant's, with timings), usually gets facets and a video, and is usually completed. A few
//! interviews are hidden or deleted, a few studies never complete. The histories of a few organizations
//! at a time are interleaved at random (each aggregate's own order kept), and [`DUPLICATE_PERCENT`] of
//! the events are delivered a second time, byte for byte, later in their aggregate's stream.
//! The same seed and length give the same bytes.

use end_to_end::events::{envelope, Envelope};
use serde_json::{json, Value};
use shared::Topic;

/// Studies of each organization.
pub const STUDIES_PER_ORG: usize = 50;
/// Share of events delivered twice.
pub const DUPLICATE_PERCENT: u64 = 3;
/// Organizations whose histories are interleaved together.
const ORGS_PER_CHUNK: usize = 4;

/// The same deterministic random source as the end-to-end tests' scenarios.
pub use end_to_end::scenario::Rng;

/// One message as the product publishes it.
#[derive(Debug, Clone)]
pub struct Message {
    pub topic: Topic,
    pub key: String,
    pub value: Vec<u8>,
}

/// One aggregate's serialized events, in sequence order.
struct History {
    topic: Topic,
    id: String,
    events: Vec<Vec<u8>>,
}

struct Builder<'a> {
    org: &'a str,
    history: History,
    /// Milliseconds since 2026-01-01T00:00:00Z of the last event.
    at_ms: i64,
}

impl<'a> Builder<'a> {
    fn new(topic: Topic, org: &'a str, id: String, at_ms: i64) -> Self {
        Self { org, history: History { topic, id, events: Vec::new() }, at_ms }
    }

    fn push(&mut self, rng: &mut Rng, kind: &str, data: Value) {
        self.at_ms += 1 + rng.below(60_000) as i64;
        let sequence = self.history.events.len() as u64 + 1;
        let id = &self.history.id;
        let (event_id, at) = (format!("{id}-{sequence}"), timestamp(self.at_ms));
        let fields = Envelope { event_id: &event_id, kind, org: self.org, aggregate: id, sequence, at: &at };
        self.history.events.push(envelope(&fields, data).to_string().into_bytes());
    }
}

/// An RFC 3339 UTC time with milliseconds, `ms` after 2026-01-01.
fn timestamp(ms: i64) -> String {
    let base = chrono::DateTime::from_timestamp(1_767_225_600, 0).expect("valid base time");
    (base + chrono::TimeDelta::milliseconds(ms)).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

const WORDS: [&str; 16] = [
    "the",
    "checkout",
    "was",
    "confusing",
    "and",
    "I",
    "liked",
    "how",
    "quickly",
    "search",
    "found",
    "what",
    "needed",
    "price",
    "felt",
    "fair",
];

fn sentence(rng: &mut Rng, words: u64) -> String {
    let n = words + rng.below(words);
    (0..n).map(|_| WORDS[rng.below(WORDS.len() as u64) as usize]).collect::<Vec<_>>().join(" ")
}

fn api_keys(rng: &mut Rng, org: &str, out: &mut Vec<History>) {
    for k in 0..2 {
        let mut b = Builder::new(Topic::ApiKey, org, format!("{org}-key{k}"), 0);
        let sha = shared::keys::key_sha256(&format!("{org}-secret{k}"));
        b.push(rng, "api_key.created", json!({"name": format!("key {k}"), "keySha256": sha}));
        out.push(b.history);
    }
}

fn study(rng: &mut Rng, org: &str, s: usize, out: &mut Vec<History>) {
    let id = format!("{org}-s{s:03}");
    let start = rng.below(300 * 86_400_000) as i64;
    let mut b = Builder::new(Topic::Study, org, id.clone(), start);
    let title = format!("Study {s}: {}", sentence(rng, 3));
    b.push(rng, "study.created", json!({ "internalTitle": title }));
    if rng.chance(30) {
        let title = format!("Study {s}: {}", sentence(rng, 3));
        b.push(rng, "study.retitled", json!({ "internalTitle": title }));
    }
    b.push(rng, "study.launched", json!({}));
    let interviews = 5 + rng.below(11) as usize;
    for i in 0..interviews {
        out.push(interview(rng, org, &id, i, start, false));
    }
    if rng.chance(85) {
        let completed = timestamp(b.at_ms + 30 * 86_400_000);
        b.push(rng, "study.completed", json!({"completedAt": completed}));
    }
    out.push(b.history);
}

/// One interview's history; `served` makes it one the API lists: identified, with a video, completed.
fn interview(rng: &mut Rng, org: &str, study: &str, i: usize, start: i64, served: bool) -> History {
    let mut b = Builder::new(Topic::Interview, org, format!("{study}-i{i:02}"), start + rng.below(86_400_000) as i64);
    b.push(rng, "interview.started", json!({"studyId": study}));
    if served || rng.chance(90) {
        let last = ["Lovelace", "Ólafsdóttir", "", "Hopper"][rng.below(4) as usize];
        let first = ["Ada", "Jón", "Grace", "Mia"][rng.below(4) as usize];
        let participant = format!("p{}", rng.below(1_000_000));
        b.push(
            rng,
            "interview.participant_identified",
            json!({"participantId": participant, "firstName": first, "lastName": last}),
        );
    }
    let mut clock = 0.0;
    for m in 0..4 + rng.below(9) {
        let role = if m % 2 == 0 { "interviewer" } else { "participant" };
        let start = clock;
        clock += 2.0 + rng.below(20_000) as f64 / 1000.0;
        let text = sentence(rng, 10);
        b.push(
            rng,
            "interview.message_recorded",
            json!({"messageId": format!("m{m}"), "role": role, "text": text, "startSeconds": start, "endSeconds": clock}),
        );
    }
    if rng.chance(70) {
        let sentiment = ["positive", "neutral", "negative"][rng.below(3) as usize];
        let facets = json!([
            {"label": "Sentiment", "values": [sentiment]},
            {"label": "Topics", "values": ["checkout", "search", "pricing"]},
        ]);
        b.push(rng, "interview.facets_updated", json!({ "facets": facets }));
    }
    if served || rng.chance(80) {
        let key = format!("recordings/{}.mp4", b.history.id);
        b.push(rng, "interview.video_stored", json!({ "key": key }));
    }
    if served || rng.chance(85) {
        b.push(rng, "interview.completed", json!({}));
    }
    if served {
        return b.history;
    }
    if rng.chance(5) {
        b.push(rng, "interview.hidden", json!({}));
    }
    if rng.chance(2) {
        b.push(rng, "interview.deleted", json!({}));
    }
    b.history
}

/// The stream, as successive chunks of interleaved messages; ends after exactly `total` messages.
pub struct Stream {
    rng: Rng,
    next_org: usize,
    remaining: usize,
}

impl Stream {
    pub fn new(seed: u64, total: usize) -> Self {
        Self { rng: Rng::new(seed), next_org: 0, remaining: total }
    }

    /// Every message at once.
    pub fn collect_all(seed: u64, total: usize) -> Vec<Message> {
        let mut stream = Self::new(seed, total);
        let mut all = Vec::with_capacity(total);
        while let Some(chunk) = stream.next_chunk() {
            all.extend(chunk);
        }
        all
    }

    /// The next few organizations' messages, interleaved; `None` at the end.
    pub fn next_chunk(&mut self) -> Option<Vec<Message>> {
        if self.remaining == 0 {
            return None;
        }
        let rng = &mut self.rng;
        let mut histories = Vec::new();
        for _ in 0..ORGS_PER_CHUNK {
            let org = format!("org{:05}", self.next_org);
            self.next_org += 1;
            api_keys(rng, &org, &mut histories);
            for s in 0..STUDIES_PER_ORG {
                study(rng, &org, s, &mut histories);
            }
        }
        let mut cursors = vec![0usize; histories.len()];
        let mut open: Vec<usize> = (0..histories.len()).collect();
        let mut out = Vec::new();
        while !open.is_empty() && out.len() < self.remaining {
            let pick = rng.below(open.len() as u64) as usize;
            let h = &histories[open[pick]];
            let cursor = &mut cursors[open[pick]];
            let message = |seq: usize| Message { topic: h.topic, key: h.id.clone(), value: h.events[seq].clone() };
            out.push(message(*cursor));
            if *cursor > 0 && rng.chance(DUPLICATE_PERCENT) && out.len() < self.remaining {
                out.push(message(rng.below(*cursor as u64) as usize));
            }
            *cursor += 1;
            if *cursor == h.events.len() {
                open.swap_remove(pick);
            }
        }
        self.remaining -= out.len();
        Some(out)
    }
}

/// The API benchmark's data set, in order: one organization with an API key whose secret is `secret`,
/// `studies` completed studies, and a first study `<org>-s000` with `interviews` interviews that the API
/// serves, each with a video and a transcript.
pub fn api_dataset(org: &str, secret: &str, studies: usize, interviews: usize) -> Vec<Message> {
    let mut rng = Rng::new(42);
    let mut histories = Vec::new();
    let mut key = Builder::new(Topic::ApiKey, org, format!("{org}-key"), 0);
    let sha = shared::keys::key_sha256(secret);
    key.push(&mut rng, "api_key.created", json!({"name": "benchmark", "keySha256": sha}));
    histories.push(key.history);
    for s in 0..studies {
        let id = format!("{org}-s{s:03}");
        let start = rng.below(300 * 86_400_000) as i64;
        let mut b = Builder::new(Topic::Study, org, id.clone(), start);
        let title = format!("Study {s}: {}", sentence(&mut rng, 3));
        b.push(&mut rng, "study.created", json!({ "internalTitle": title }));
        b.push(&mut rng, "study.launched", json!({}));
        let completed = timestamp(b.at_ms + 30 * 86_400_000);
        b.push(&mut rng, "study.completed", json!({"completedAt": completed}));
        histories.push(b.history);
        if s == 0 {
            for i in 0..interviews {
                histories.push(interview(&mut rng, org, &id, i, start, true));
            }
        }
    }
    let messages = histories
        .iter()
        .flat_map(|h| h.events.iter().map(|value| Message { topic: h.topic, key: h.id.clone(), value: value.clone() }));
    messages.collect()
}
