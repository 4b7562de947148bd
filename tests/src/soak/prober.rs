//! The soak's reader: asks the API, again and again, for every organization's studies with a live key and
//! with a revoked one, and writes down every answer, to be classified once the faults are over.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::TestApp;
use crate::events::key_sha256;
use crate::scenario::Scenario;

/// What an answer was, seen from the key that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Answer {
    /// A live key, the whole list.
    Served,
    /// 503: the read model is not ready for this organization (healing, rebuilding its data, or Redis away).
    Waiting,
    /// A revoked key refused, as it must be.
    Revoked,
    /// 429 from the throttle of unknown keys, with Retry-After: the prober is one client that sends revoked
    /// keys many times a second, so that each API-key event (which ends the invalid keys kept in memory)
    /// costs it lookups that find no key; past `UNKNOWN_KEYS_PER_SECOND` the API answers that client's keys
    /// not kept in memory 429, as configured. Neither served nor refused: counted apart, not wrong.
    Throttled,
    /// Wrong: a live key refused.
    LiveKeyRefused,
    /// Wrong: a list shorter than the organization's.
    ShortList,
    /// Wrong: a revoked key opened the organization's data.
    RevokedKeyOpened,
    /// Wrong: any other status (a 500, say).
    Unexpected(u16),
    /// The API could not be reached (it runs in this process: never expected).
    Unreachable,
}

impl Answer {
    pub fn is_wrong(self) -> bool {
        !matches!(self, Answer::Served | Answer::Waiting | Answer::Revoked | Answer::Throttled)
    }
}

/// One answer, and when it came.
#[derive(Debug, Clone)]
pub struct Heard {
    pub at: Instant,
    /// When, to read beside the logs.
    pub when: chrono::DateTime<chrono::Utc>,
    pub org: String,
    pub answer: Answer,
    /// The list's total, when the answer had one.
    pub total: Option<u64>,
}

/// A key to ask with: its secret, whether it is live, and the organization's number of studies.
struct Asker {
    org: String,
    secret: String,
    live: bool,
    studies: u64,
}

pub struct Prober {
    stop: Arc<AtomicBool>,
    heard: Arc<Mutex<Vec<Heard>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    pub fn start(app: &TestApp, scenario: &Scenario) -> Self {
        let mut askers = Vec::new();
        for org in scenario.organizations() {
            let expected = scenario.expected(&org);
            let secrets = (0..3).map(|k| format!("{org}-secret{k}"));
            let live = secrets.clone().find(|s| expected.live_keys.contains(&key_sha256(s)));
            let revoked = secrets.clone().find(|s| expected.revoked_keys.contains(&key_sha256(s)));
            let studies = expected.studies.len() as u64;
            askers.extend(live.map(|secret| Asker { org: org.clone(), secret, live: true, studies }));
            askers.extend(revoked.map(|secret| Asker { org: org.clone(), secret, live: false, studies }));
        }
        assert!(askers.iter().any(|a| a.live) && askers.iter().any(|a| !a.live), "live and revoked keys to ask with");
        let (address, client) = (app.address.clone(), app.client.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let heard = Arc::new(Mutex::new(Vec::new()));
        let (stopping, writing) = (stop.clone(), heard.clone());
        let task = tokio::spawn(async move {
            while !stopping.load(Ordering::Relaxed) {
                for asker in &askers {
                    let (answer, total) = ask(&client, &address, asker).await;
                    let (at, when) = (Instant::now(), chrono::Utc::now());
                    let heard = Heard { at, when, org: asker.org.clone(), answer, total };
                    writing.lock().unwrap().push(heard);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Self { stop, heard, task }
    }

    /// Stops asking; every answer heard.
    pub async fn finish(self) -> Vec<Heard> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("prober");
        std::mem::take(&mut *self.heard.lock().unwrap())
    }
}

async fn ask(client: &reqwest::Client, address: &str, asker: &Asker) -> (Answer, Option<u64>) {
    let url = format!("{address}/v1/studies?pageSize=1");
    let Ok(response) = client.get(url).bearer_auth(&asker.secret).send().await else {
        return (Answer::Unreachable, None);
    };
    let status = response.status().as_u16();
    let retry_after = response.headers().contains_key("retry-after");
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    let unknown_keys = body["error"] == "too many unknown API keys from this client";
    let total = body["pagination"]["total"].as_u64();
    let answer = match (status, asker.live) {
        (200, true) if total.is_some_and(|t| t >= asker.studies) => Answer::Served,
        (200, true) => Answer::ShortList,
        (200, false) => Answer::RevokedKeyOpened,
        (401, true) => Answer::LiveKeyRefused,
        (401, false) => Answer::Revoked,
        (503, _) => Answer::Waiting,
        (429, _) if unknown_keys && retry_after => Answer::Throttled,
        (other, _) => Answer::Unexpected(other),
    };
    (answer, total)
}

/// Answers counted by kind.
pub fn tally(heard: &[Heard]) -> BTreeMap<Answer, u64> {
    let mut counts = BTreeMap::new();
    for h in heard {
        *counts.entry(h.answer).or_insert(0) += 1;
    }
    counts
}
