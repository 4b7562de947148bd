//! Reads what the projector wrote for one organization back into the shape of [`Expected`], through the
//! shared key layout, so a test compares the two with one assertion.

use redis::AsyncCommands;
use serde_json::Value;
use shared::{Keyspace, Topic};

use crate::scenario::{Expected, Scenario};

pub async fn read(
    conn: &mut shared::connection::Connection,
    keys: &Keyspace,
    scenario: &Scenario,
    org: &str,
) -> Expected {
    let mut actual = Expected::default();
    let ids: Vec<String> = conn.zrevrange(keys.studies(org), 0, -1).await.expect("studies");
    for id in ids {
        let doc: Option<String> = conn.hget(keys.study_documents(org), &id).await.expect("study doc");
        actual.studies.push((id, parse(doc)));
    }
    for study in scenario.ids(org, Topic::Study) {
        let ids: Vec<String> = conn.zrevrange(keys.interviews(org, &study), 0, -1).await.expect("interviews");
        let mut list = Vec::new();
        for id in ids {
            let doc: Option<String> = conn.hget(keys.interview_documents(org), &id).await.expect("interview doc");
            let transcript: Option<String> = conn.hget(keys.transcripts(org), &id).await.expect("transcript");
            list.push((id, parse(doc), transcript));
        }
        if !list.is_empty() {
            actual.interviews.insert(study, list);
        }
    }
    for id in scenario.ids(org, Topic::Interview) {
        let doc: Option<String> = conn.hget(keys.interview_documents(org), &id).await.expect("interview doc");
        if doc.is_none() {
            actual.invisible_interviews.push(id);
        }
    }
    for sha in scenario.key_hashes(org) {
        let owner: Option<String> = conn.hget(keys.api_key_sha(&sha), "org").await.expect("key");
        if owner.as_deref() == Some(org) {
            actual.live_keys.push(sha);
        } else {
            actual.revoked_keys.push(sha);
        }
    }
    actual
}

fn parse(doc: Option<String>) -> Value {
    doc.map(|d| serde_json::from_str(&d).expect("document is JSON")).unwrap_or(Value::Null)
}
