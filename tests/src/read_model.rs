//! Reads what the projector wrote for one organization back into the shape of [`Expected`], through the
//! shared key layout, so a test compares the two with one assertion; and waits on the projector's
//! progress as the read model shows it, for tests where no in-process count is at hand.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use serde_json::Value;
use shared::codec::StoredDocument;
use shared::connection::Connection;
use shared::owners::Record;
use shared::{Keyspace, Topic};

use crate::events::Outgoing;
use crate::eventually;
use crate::scenario::{Expected, Scenario};

/// A stored transcript's WebVTT, however it is stored (a served interview's compressed from layout 6).
pub async fn transcript(conn: &mut (impl redis::aio::ConnectionLike + Send), key: &str) -> Option<String> {
    let stored: Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(conn).await.expect("transcript");
    stored.map(|bytes| shared::codec::transcript_owned(bytes).expect("a transcript that reads"))
}

pub async fn read(conn: &mut Connection, keys: &Keyspace, scenario: &Scenario, org: &str) -> Expected {
    let mut actual = Expected::default();
    let ids: Vec<String> = conn.zrevrange(keys.studies(org), 0, -1).await.expect("studies");
    for id in ids {
        let doc: Option<StoredDocument> = conn.hget(keys.study_documents(org), &id).await.expect("study doc");
        actual.studies.push((id, parse(doc)));
    }
    for study in scenario.ids(org, Topic::Study) {
        let ids: Vec<String> = conn.zrevrange(keys.interviews(org, &study), 0, -1).await.expect("interviews");
        let mut list = Vec::new();
        for id in ids {
            let doc: Option<StoredDocument> =
                conn.hget(keys.interview_documents(org), &id).await.expect("interview doc");
            let transcript = transcript(conn, &keys.transcript(org, &id)).await;
            list.push((id, parse(doc), transcript));
        }
        if !list.is_empty() {
            actual.interviews.insert(study, list);
        }
    }
    for id in scenario.ids(org, Topic::Interview) {
        let doc: Option<StoredDocument> = conn.hget(keys.interview_documents(org), &id).await.expect("interview doc");
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

fn parse(doc: Option<StoredDocument>) -> Value {
    doc.map(|d| serde_json::from_str(&d.0).expect("document is JSON")).unwrap_or(Value::Null)
}

/// Waits until the projector writing `keys` (in this build's layout) has reached the aggregate of
/// `message` (its owner is recorded), or fails the test, saying it waited for `what`, after `timeout`.
pub async fn wait_until_reached(conn: &Connection, keys: &Keyspace, message: &Outgoing, timeout: Duration, what: &str) {
    let read = match Record::of(keys, message.topic, &message.key, shared::layout::LAYOUT) {
        Record::Key(key) => redis::cmd("GET").arg(key).clone(),
        Record::Field { hash, id } => redis::cmd("HGET").arg(hash).arg(id).clone(),
    };
    eventually(timeout, what, || async {
        let owner: Option<String> = read.query_async(&mut conn.clone()).await.unwrap();
        owner.map(|_| ())
    })
    .await
}

/// Waits until every aggregate of `scenario` is at its last sequence in `keys`, or fails the test after
/// `timeout`.
pub async fn wait_until_applied_everything(conn: &Connection, keys: &Keyspace, scenario: &Scenario, timeout: Duration) {
    eventually(timeout, "every aggregate at its last sequence", || async {
        applied_everything(&mut conn.clone(), keys, scenario).await.then_some(())
    })
    .await
}

/// Whether every aggregate's stored sequence is the last one the scenario published for it: one pipelined
/// read, cheap enough to poll, unlike a full dump.
async fn applied_everything(conn: &mut Connection, keys: &Keyspace, scenario: &Scenario) -> bool {
    let mut last: HashMap<String, u64> = HashMap::new();
    for message in &scenario.messages {
        let value: Value = serde_json::from_slice(&message.value).unwrap();
        let org = value["organizationId"].as_str().unwrap();
        let key = keys.aggregate(message.topic, org, &message.key);
        let seq = value["sequence"].as_u64().unwrap();
        let entry = last.entry(key).or_default();
        *entry = (*entry).max(seq);
    }
    let reads: Vec<redis::Cmd> = last
        .keys()
        .map(|key| {
            let mut cmd = redis::cmd("HGET");
            cmd.arg(key).arg("seq");
            cmd
        })
        .collect();
    let stored = conn.query_all(&reads).await.unwrap();
    last.values().zip(stored).all(|(want, got)| redis::from_redis_value::<Option<u64>>(got).unwrap() == Some(*want))
}
