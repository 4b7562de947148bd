//! What a test of Redis faults needs: a projector and an API on a Redis (or cluster) of the test's own, a
//! prober that keeps asking the API for every organization's studies with every valid key and writes down
//! every answer, a publisher that keeps events flowing through the fault, and the checks that the read
//! model healed and no answer was wrong once the loss was known.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::connection::{Connection, Settings};
use shared::redis_url::Target;
use shared::Keyspace;

use crate::api::{self, TestApp};
use crate::events::key_sha256;
use crate::kafka::Topics;
use crate::metrics::sample;
use crate::runner::{self, Running};
use crate::scenario::Scenario;
use crate::{eventually, unique};

/// A projector and an API of the test's own on a Redis of its own.
pub struct Healing {
    pub projector: Running,
    pub app: TestApp,
    pub conn: Connection,
    prefix: String,
    config: projector::Config,
}

impl Healing {
    /// Starts both on `redis_url` (the nodes of a cluster when `cluster`).
    pub async fn start(topics: &Topics, redis_url: &str, cluster: bool) -> Self {
        Self::start_under(&unique("heal"), topics, redis_url, cluster).await
    }

    /// [`Self::start`], with the key prefix `prefix`.
    pub async fn start_under(prefix: &str, topics: &Topics, redis_url: &str, cluster: bool) -> Self {
        Self::start_configured(prefix, topics, redis_url, cluster, |_| {}).await
    }

    /// [`Self::start_under`], the projector's configuration changed by `configure` (its Redis user, say).
    pub async fn start_configured(
        prefix: &str,
        topics: &Topics,
        redis_url: &str,
        cluster: bool,
        configure: impl FnOnce(&mut projector::Config),
    ) -> Self {
        let prefix = prefix.to_string();
        let mut config = runner::config(topics, &prefix, &unique("g"));
        config.redis.url = redis_url.into();
        config.redis.cluster = cluster;
        config.redis.timeout_ms = 1000;
        configure(&mut config);
        let projector = spawn(&config).await;
        let mut api = api::config(&prefix, redis_url);
        api.redis.cluster = cluster;
        let app = api::spawn_app(api).await;
        let target = Target::new(redis_url, cluster);
        let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 12 };
        let conn = Connection::connect(&target, settings).await.expect("own redis reachable");
        Self { projector, app, conn, prefix, config }
    }

    /// Stops the projector (it commits and leaves), runs `fault` while none runs, and starts it again
    /// with the same group and prefix; returns when it started (its start's check done).
    pub async fn with_projector_down(self, fault: impl FnOnce()) -> (Self, Instant) {
        let Self { projector, app, conn, prefix, config } = self;
        projector.stop().await;
        fault();
        let projector = spawn(&config).await;
        (Self { projector, app, conn, prefix, config }, Instant::now())
    }

    /// [`Self::with_projector_down`], with `during` run (and awaited) while none runs: what the API answers
    /// meanwhile, when no projector can mark a loss.
    pub async fn with_projector_down_for(self, during: impl AsyncFnOnce()) -> (Self, Instant) {
        let Self { projector, app, conn, prefix, config } = self;
        projector.stop().await;
        during().await;
        let projector = spawn(&config).await;
        (Self { projector, app, conn, prefix, config }, Instant::now())
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The projector's configuration (a rebuild runs with it).
    pub fn config(&self) -> &projector::Config {
        &self.config
    }

    /// The active generation, as Redis holds it now.
    pub async fn active_generation(&self) -> Option<u64> {
        let mut conn = self.conn.clone();
        redis::cmd("GET").arg(Keyspace::active_generation(&self.prefix)).query_async(&mut conn).await.ok().flatten()
    }

    /// Waits until the API is ready (the read model complete) after `total` messages were consumed.
    pub async fn wait_ready(&self, total: u64, timeout: Duration) {
        self.projector.wait_until_consumed(total, timeout).await;
        self.app.wait_serving(timeout).await;
    }

    /// Losses of data the projector detected so far.
    pub fn losses(&self) -> f64 {
        sample(&self.projector.metrics_text(), "projector_redis_losses_total", &[])
    }

    /// Waits until the projector detected a loss; returns when it did, as close as polling tells.
    pub async fn wait_detected(&self, within: Duration) -> Instant {
        self.wait_detection(within).await.seen
    }

    /// Waits until the projector detected a loss, and brackets when it did.
    pub async fn wait_detection(&self, within: Duration) -> Detection {
        self.wait_losses_above(0.0, within).await
    }

    /// Waits until the projector counted more losses than `losses`, and brackets when it did: polling
    /// on a busy machine can see a count late, after a short heal is already over.
    pub async fn wait_losses_above(&self, losses: f64, within: Duration) -> Detection {
        let before = Instant::now();
        let mut unseen = before;
        eventually(within, "the projector to detect the loss", || {
            let looked = Instant::now();
            let counted = self.losses() > losses;
            if !counted {
                unseen = looked;
            }
            async move { counted.then_some(()) }
        })
        .await;
        let detection = Detection { unseen, seen: Instant::now() };
        println!(
            "loss detected between {:?} and {:?} after the fault",
            detection.unseen - before,
            detection.seen - before
        );
        detection
    }

    /// Stops `publisher` once it published a few more events, then waits until everything on `topics`
    /// (the `initial` messages and what was published) is consumed and the active generation digests like
    /// a from-scratch build of it. Returns how many events were published.
    pub async fn converge_after(&mut self, publisher: Publisher, topics: &Topics, initial: usize) -> u64 {
        publisher.wait_more(20).await;
        let published = publisher.finish().await;
        let total = initial as u64 + published;
        self.projector.wait_until_consumed(total, CONVERGENCE).await;
        let expected = reference_of(topics, total).await;
        self.wait_converged(&expected, CONVERGENCE).await;
        published
    }

    /// Waits until the active generation digests like `reference` and the API is ready again.
    pub async fn wait_converged(&mut self, reference: &str, timeout: Duration) -> Duration {
        let started = Instant::now();
        eventually(timeout, "the read model to converge", || async {
            let mut conn = self.conn.clone();
            let generation: Option<u64> = redis::cmd("GET")
                .arg(Keyspace::active_generation(&self.prefix))
                .query_async(&mut conn)
                .await
                .ok()
                .flatten();
            let keys = Keyspace::new(self.prefix.clone(), generation?);
            let digest = runner::digest_of(&mut conn, &keys).await.ok()?;
            let readyz = self.app.admin_get("/readyz").await;
            let ready = readyz.status() == 200;
            let converged = digest.to_string() == reference;
            if !ready || !converged {
                let why = readyz.text().await.unwrap_or_default();
                let ended = if self.projector.has_ended() { "; the projector's task has ENDED" } else { "" };
                eprintln!(
                    "not converged yet: generation {generation:?}, {digest} (want {reference}), api {why}{ended}"
                );
            }
            (converged && ready).then_some(())
        })
        .await;
        let took = started.elapsed();
        println!("converged {took:?} after the detection");
        took
    }
}

async fn spawn(config: &projector::Config) -> Running {
    eventually(Duration::from_secs(20), "the projector to connect", || {
        let config = config.clone();
        async move { Some(runner::spawn(config).await) }
    })
    .await
}

/// One answer of the API to the prober.
#[derive(Debug, Clone)]
pub struct Probe {
    pub at: Instant,
    pub org: String,
    pub status: u16,
    pub total: Option<u64>,
    pub expected: u64,
}

impl Probe {
    /// A valid key refused, or a list shorter than the organization's.
    pub fn is_wrong(&self) -> bool {
        self.status == 401 || (self.status == 200 && self.total.is_some_and(|t| t < self.expected))
    }
}

/// Asks the API for every organization's studies with one valid key each, again and again.
pub struct Prober {
    stop: Arc<AtomicBool>,
    probes: Arc<Mutex<Vec<Probe>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    pub fn start(app: &TestApp, scenario: &Scenario) -> Self {
        let mut targets = Vec::new();
        for org in scenario.organizations() {
            let expected = scenario.expected(&org);
            let secret =
                (0..3).map(|k| format!("{org}-secret{k}")).find(|s| expected.live_keys.contains(&key_sha256(s)));
            if let Some(secret) = secret {
                targets.push((org, secret, expected.studies.len() as u64));
            }
        }
        assert!(!targets.is_empty(), "the scenario has organizations with a live key");
        let (address, client) = (app.address.clone(), app.client.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let heard = Arc::new(Mutex::new(Vec::<Probe>::new()));
        let probes = heard.clone();
        let task = tokio::spawn(async move {
            // Told to stop, it goes on until it has one 200 given at least the grace after being told (so
            // that an API that has just healed is heard answering past the grace that
            // [`assert_no_wrong_answer_after`] gives a detection: a heal can be over within it), or for at
            // most 5 s.
            let mut told: Option<Instant> = None;
            loop {
                if told.is_none() && stopping.load(Ordering::Relaxed) {
                    told = Some(Instant::now());
                }
                if let Some(at) = told {
                    let answered = probes.lock().unwrap().iter().any(|p| p.at > at + GRACE && p.status == 200);
                    if answered || at.elapsed() > Duration::from_secs(5) {
                        break;
                    }
                }
                for (org, secret, expected) in &targets {
                    let url = format!("{address}/v1/studies?pageSize=1");
                    let Ok(response) = client.get(url).bearer_auth(secret).send().await else { continue };
                    let status = response.status().as_u16();
                    let body: serde_json::Value = response.json().await.unwrap_or_default();
                    let total = body["pagination"]["total"].as_u64();
                    let probe = Probe { at: Instant::now(), org: org.clone(), status, total, expected: *expected };
                    probes.lock().unwrap().push(probe);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        Self { stop, probes: heard, task }
    }

    /// Waits until every organization probed was answered 200 after `since` (a healed API heard by the
    /// prober itself, before the next fault).
    pub async fn wait_answered(&self, since: Instant, within: Duration) {
        eventually(within, "the prober to hear the API answer again", || async {
            let probes = self.probes.lock().unwrap();
            let unanswered = probes
                .iter()
                .filter(|p| p.at < since)
                .map(|p| &p.org)
                .any(|org| !probes.iter().any(|p| p.at >= since && p.status == 200 && &p.org == org));
            (!unanswered && probes.iter().any(|p| p.at >= since)).then_some(())
        })
        .await;
    }

    /// Waits until every organization probed was answered (whatever the status) `times` times after `since`.
    pub async fn wait_rounds(&self, since: Instant, times: usize, within: Duration) {
        eventually(within, "the prober to hear every organization answered again", || async {
            let probes = self.probes.lock().unwrap();
            let mut orgs: Vec<&String> = probes.iter().map(|p| &p.org).collect();
            orgs.sort();
            orgs.dedup();
            let answered = |org: &String| probes.iter().filter(|p| p.at >= since && &p.org == org).count();
            (!orgs.is_empty() && orgs.into_iter().all(|org| answered(org) >= times)).then_some(())
        })
        .await;
    }

    /// Stops probing, once it has heard a 200 given [`GRACE`] or more after this call (or after 5 s), and
    /// returns every answer.
    pub async fn finish(self) -> Vec<Probe> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("prober");
        std::mem::take(&mut *self.probes.lock().unwrap())
    }
}

/// When the projector detected a loss, as closely as polling its metrics tells: not yet counted when it
/// looked at `unseen`, counted by `seen`. An `Instant` is a detection known to the instant.
#[derive(Debug, Clone, Copy)]
pub struct Detection {
    pub unseen: Instant,
    pub seen: Instant,
}

impl From<Instant> for Detection {
    fn from(at: Instant) -> Self {
        Self { unseen: at, seen: at }
    }
}

/// Asserts that no answer given from [`GRACE`] after the loss was `detected` on was wrong, and that the API
/// did say it was not ready around then (the heal was seen, not missed: a heal may be over in less than
/// the grace, or before polling saw the count, so its 503s are looked for from the last look that did not
/// see it on, within the grace that polling it takes).
pub fn assert_no_wrong_answer_after(probes: &[Probe], detected: impl Into<Detection>) {
    let Detection { unseen, seen } = detected.into();
    let after = seen + GRACE;
    let later: Vec<&Probe> = probes.iter().filter(|p| p.at >= after).collect();
    let wrong: Vec<&&Probe> = later.iter().filter(|p| p.is_wrong()).collect();
    assert!(wrong.is_empty(), "{} wrong answers after the loss was detected, first: {:?}", wrong.len(), wrong[0]);
    let waiting: Vec<&Probe> = probes.iter().filter(|p| p.at + GRACE >= unseen && p.status == 503).collect();
    if let (Some(first), Some(last)) = (waiting.first(), waiting.last()) {
        let since = |p: &Probe| p.at.saturating_duration_since(unseen);
        println!("{} answers 503 from {:?} to {:?} after the loss", waiting.len(), since(first), since(last));
    }
    assert!(!waiting.is_empty(), "the API said 503 while the read model healed");
    assert!(
        later.iter().any(|p| p.status == 200),
        "the API answered again once healed; answers from the detection on: {:?}",
        later.iter().map(|p| (p.org.as_str(), p.status, p.at.duration_since(seen))).collect::<Vec<_>>()
    );
    let before = probes.iter().filter(|p| p.at < after && p.is_wrong()).count();
    println!("{} answers after the detection, none wrong; {before} wrong before it", later.len());
}

/// Publishes `study.retitled` to the scenario's studies in turn, each with its study's next sequence,
/// until told to stop: events that flow while a fault happens.
pub struct Publisher {
    stop: Arc<AtomicBool>,
    /// Set to pause; the task answers by setting `resting` once it publishes nothing more.
    paused: Arc<AtomicBool>,
    resting: Arc<AtomicBool>,
    published: Arc<std::sync::atomic::AtomicU64>,
    task: tokio::task::JoinHandle<u64>,
}

impl Publisher {
    pub fn start(topics: &Topics, scenario: &Scenario) -> Self {
        let mut studies: std::collections::BTreeMap<String, (String, u64)> = Default::default();
        for message in scenario.messages.iter().filter(|m| m.topic == shared::Topic::Study) {
            let event: serde_json::Value = serde_json::from_slice(&message.value).expect("an event");
            let (org, sequence) = (event["organizationId"].as_str().unwrap_or_default(), event["sequence"].as_u64());
            let last = studies.entry(message.key.clone()).or_insert((org.to_string(), 0));
            last.1 = last.1.max(sequence.unwrap_or(0));
        }
        assert!(!studies.is_empty(), "the scenario has studies to retitle");
        let (topics, stop) = (topics.clone(), Arc::new(AtomicBool::new(false)));
        let stopping = stop.clone();
        let (paused, resting) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (pausing, rests) = (paused.clone(), resting.clone());
        let published = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = published.clone();
        let task = tokio::spawn(async move {
            let producer = crate::kafka::producer();
            let mut published = 0;
            while !stopping.load(Ordering::Relaxed) {
                // Every event published so far is delivered here: resting says so.
                if pausing.load(Ordering::Relaxed) {
                    rests.store(true, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                rests.store(false, Ordering::Relaxed);
                for (study, (org, sequence)) in studies.iter_mut() {
                    *sequence += 1;
                    let title = serde_json::json!({"internalTitle": format!("Retitled {sequence}")});
                    let at = "2026-06-01T00:00:00Z";
                    let event =
                        crate::events::event(shared::Topic::Study, org, study, *sequence, "study.retitled", at, title);
                    crate::kafka::publish(&producer, &topics, &[event]).await;
                    published += 1;
                    counted.store(published, Ordering::Relaxed);
                    if stopping.load(Ordering::Relaxed) || pausing.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            published
        });
        Self { stop, paused, resting, published, task }
    }

    /// Stops publishing until [`Self::resume`], once the event in flight is published; how many events
    /// were published so far.
    pub async fn pause(&self) -> u64 {
        self.paused.store(true, Ordering::Relaxed);
        crate::eventually(Duration::from_secs(30), "the publisher to rest", || async {
            self.resting.load(Ordering::Relaxed).then_some(())
        })
        .await;
        self.published.load(Ordering::Relaxed)
    }

    /// Publishes again after [`Self::pause`] (returns once the publisher has taken it in, so that the next
    /// pause waits for a rest of its own).
    pub async fn resume(&self) {
        self.paused.store(false, Ordering::Relaxed);
        crate::eventually(Duration::from_secs(30), "the publisher to go on", || async {
            (!self.resting.load(Ordering::Relaxed)).then_some(())
        })
        .await;
    }

    /// Waits until `more` events were published after this call: events flow across whatever comes next.
    pub async fn wait_more(&self, more: u64) {
        let target = self.published.load(Ordering::Relaxed) + more;
        crate::eventually(Duration::from_secs(30), "events to be published", || async {
            (self.published.load(Ordering::Relaxed) >= target).then_some(())
        })
        .await;
    }

    /// Stops publishing; how many events it published.
    pub async fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("publisher")
    }
}

/// How long the API may go on answering from a lost read model after the projector detected the loss:
/// its next reading of the generation's condition (every 100 ms in the tests), and the polling.
pub const GRACE: Duration = Duration::from_millis(300);
/// How long a loss may take to be detected.
pub const DETECTION: Duration = Duration::from_secs(5);
/// How long the read model may take to converge once the loss was detected.
pub const CONVERGENCE: Duration = Duration::from_secs(120);

/// The reference digest of `scenario`, built from scratch on the stack's Redis.
pub async fn reference(topics: &Topics, scenario: &Scenario) -> String {
    reference_of(topics, scenario.messages.len() as u64).await
}

/// The reference digest of the first `total` messages of `topics` (all of them), built from scratch.
pub async fn reference_of(topics: &Topics, total: u64) -> String {
    let keys = runner::build_from_scratch(topics, total).await;
    runner::digest(&keys).await
}
