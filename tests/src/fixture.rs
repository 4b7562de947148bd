//! A small, hand-written dataset whose every expected answer is known: two organizations, studies in
//! every state, interviews completed or not, hidden, unhidden, deleted and orphaned, and API keys.

use serde_json::{json, Value};
use shared::Topic;

use crate::events::{event, key_sha256, Outgoing};

pub const ACME: &str = "org_acme";
pub const GLOBEX: &str = "org_globex";
pub const ACME_KEY: &str = "acme-live-key-0001";
pub const ACME_OLD_KEY: &str = "acme-revoked-key-0000";
pub const GLOBEX_KEY: &str = "globex-live-key-0001";

/// Builds one aggregate's events with sequences 1, 2, 3 ...
#[derive(Debug, Clone)]
pub struct Aggregate {
    topic: Topic,
    org: String,
    id: String,
    seq: u64,
    pub messages: Vec<Outgoing>,
}

impl Aggregate {
    pub fn new(topic: Topic, org: &str, id: &str) -> Self {
        Self { topic, org: org.into(), id: id.into(), seq: 0, messages: Vec::new() }
    }

    pub fn then(mut self, kind: &str, at: &str, data: Value) -> Self {
        self.seq += 1;
        self.messages.push(event(self.topic, &self.org, &self.id, self.seq, kind, at, data));
        self
    }
}

pub fn study(org: &str, id: &str, title: &str) -> Aggregate {
    Aggregate::new(Topic::Study, org, id).then("study.created", "2026-02-01T09:00:00Z", json!({"internalTitle": title}))
}

pub fn completed_study(org: &str, id: &str, completed_at: &str) -> Aggregate {
    study(org, id, &format!("Title of {id}")).then("study.launched", "2026-02-02T09:00:00Z", json!({})).then(
        "study.completed",
        "2026-03-05T12:00:00.250+01:00",
        json!({"completedAt": completed_at}),
    )
}

pub fn interview(org: &str, id: &str, study: &str, started: &str) -> Aggregate {
    Aggregate::new(Topic::Interview, org, id).then("interview.started", started, json!({"studyId": study}))
}

/// When the fixture's keys are created.
const KEY_CREATED_AT: &str = "2026-01-01T00:00:00Z";

/// The data of an `api_key.created` event for `secret`.
fn key_data(secret: &str) -> Value {
    json!({"name": "integration", "keySha256": key_sha256(secret)})
}

pub fn key(org: &str, id: &str, secret: &str) -> Aggregate {
    Aggregate::new(Topic::ApiKey, org, id).then("api_key.created", KEY_CREATED_AT, key_data(secret))
}

/// `api_key.created` for `secret` at any sequence of key `id`, as when a key is created again.
pub fn key_created(org: &str, id: &str, sequence: u64, secret: &str) -> Outgoing {
    event(Topic::ApiKey, org, id, sequence, "api_key.created", KEY_CREATED_AT, key_data(secret))
}

/// `api_key.deleted` of key `id` at `sequence`.
pub fn key_deleted(org: &str, id: &str, sequence: u64) -> Outgoing {
    event(Topic::ApiKey, org, id, sequence, "api_key.deleted", "2026-05-01T00:00:00Z", json!({}))
}

pub fn completed(a: Aggregate) -> Aggregate {
    a.then("interview.completed", "2026-03-01T11:00:00Z", json!({}))
}

/// The dataset. Expected answers for ACME:
/// - `/studies`: `s_c`, `s_b` (same completedAt, ties by id descending), then `s_a`.
/// - `/studies/s_b/interviews`: `i4` (latest start), then `i2`, `i1` (same start, ties by id descending).
/// - `/interviews/i_orphan` is served though its study `s_prog` is in progress.
pub fn dataset() -> Vec<Outgoing> {
    let mut all = vec![
        completed_study(ACME, "s_a", "2026-03-01T10:00:00Z"),
        completed_study(ACME, "s_b", "2026-03-02T09:00:00Z"),
        completed_study(ACME, "s_c", "2026-03-02T10:00:00+01:00"),
        study(ACME, "s_draft", "Draft"),
        study(ACME, "s_prog", "In progress").then("study.launched", "2026-02-02T09:00:00Z", json!({})),
        completed_study(ACME, "s_reopened", "2026-03-03T00:00:00Z").then(
            "study.reopened",
            "2026-03-06T00:00:00Z",
            json!({}),
        ),
        completed_study(ACME, "s_deleted", "2026-03-03T00:00:00Z").then(
            "study.deleted",
            "2026-03-06T00:00:00Z",
            json!({}),
        ),
        completed(
            interview(ACME, "i1", "s_b", "2026-03-01T10:00:00Z")
                .then(
                    "interview.participant_identified",
                    "2026-03-01T10:00:01Z",
                    json!({"participantId": "p1", "firstName": "Ólafur", "lastName": "Jónsson"}),
                )
                .then(
                    "interview.message_recorded",
                    "2026-03-01T10:01:00Z",
                    json!({"messageId": "m1", "role": "interviewer", "text": "What did you think?", "startSeconds": 0.5, "endSeconds": 2}),
                )
                .then(
                    "interview.message_recorded",
                    "2026-03-01T10:02:00Z",
                    json!({"messageId": "m2", "role": "participant", "text": "Fish & chips <3 --> great\n\nReally.",
                        "translatedText": "Poisson", "startSeconds": 3723.004, "endSeconds": 3725.5}),
                )
                .then(
                    "interview.message_recorded",
                    "2026-03-01T10:03:00Z",
                    json!({"messageId": "m3", "role": "participant", "text": "No timing here"}),
                )
                .then(
                    "interview.facets_updated",
                    "2026-03-01T10:04:00Z",
                    json!({"facets": [{"label": "Sentiment", "values": ["positive"]}, {"label": "Topics", "values": []}]}),
                ),
        ),
        completed(interview(ACME, "i2", "s_b", "2026-03-01T10:00:00Z")),
        completed(interview(ACME, "i3", "s_b", "2026-03-01T10:30:00Z")).then(
            "interview.hidden",
            "2026-03-01T12:00:00Z",
            json!({}),
        ),
        completed(
            interview(ACME, "i4", "s_b", "2026-03-01T11:00:00Z").then(
                "interview.hidden",
                "2026-03-01T11:10:00Z",
                json!({}),
            ),
        )
        .then("interview.unhidden", "2026-03-01T12:00:00Z", json!({})),
        completed(interview(ACME, "i5", "s_b", "2026-03-01T10:40:00Z")).then(
            "interview.deleted",
            "2026-03-01T12:00:00Z",
            json!({}),
        ),
        interview(ACME, "i6", "s_b", "2026-03-01T10:50:00Z"),
        completed(interview(ACME, "i_orphan", "s_prog", "2026-03-01T10:00:00Z")),
        key(ACME, "k_live", ACME_KEY),
        key(ACME, "k_old", ACME_OLD_KEY).then("api_key.deleted", "2026-01-02T00:00:00Z", json!({})),
        completed_study(GLOBEX, "g1", "2026-03-01T10:00:00Z"),
        completed(interview(GLOBEX, "gi1", "g1", "2026-03-01T10:00:00Z")),
        key(GLOBEX, "gk", GLOBEX_KEY),
    ];
    all.iter_mut().flat_map(|a| std::mem::take(&mut a.messages)).collect()
}
