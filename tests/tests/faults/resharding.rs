//! A Redis Cluster slot moving between primaries (held half moved) while the projector writes to it and
//! clients read from it: redirections and retries, never an error returned to a client and never a lost event (against the
//! stack's cluster, whichever Redis the rest of the suite uses); and one batch on a half-moved slot of a
//! cluster of the test's own, each command answered where its key is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use end_to_end::api::{config, spawn_app, TestApp};
use end_to_end::cluster::{self, Primary, SlotMove};
use end_to_end::events::Outgoing;
use end_to_end::fixture::{completed, completed_study, interview, key};
use end_to_end::kafka::{self, Topics};
use end_to_end::{env, eventually, eventually_showing, runner, unique};
use serde_json::json;

const SECRET: &str = "resharding-key-000001";
const INTERVIEWS: usize = 10;
/// Studies before the move; as many again arrive during it.
const BEFORE: usize = 30;
const CHUNKS: usize = 10;
const TOTAL: usize = BEFORE + CHUNKS * 4;

/// An organization whose keys hash to `slot`.
fn organization_in(slot: u16) -> String {
    let run = unique("org");
    (0u64..).map(|n| format!("{run}-{n}")).find(|org| cluster::slot(org) == slot).expect("some name hashes there")
}

/// Completed studies `from..to` of `org`, each with completed interviews that have a transcript.
fn studies(org: &str, from: usize, to: usize) -> Vec<Outgoing> {
    let mut all = Vec::new();
    for s in from..to {
        let study = format!("s{s:03}");
        all.extend(completed_study(org, &study, &format!("2026-03-01T10:{:02}:{:02}Z", s / 60, s % 60)).messages);
        for i in 0..INTERVIEWS {
            let id = format!("{study}-i{i}");
            let started = format!("2026-02-10T09:{:02}:00Z", i);
            let message = json!({"messageId": "m1", "role": "participant", "text": format!("answer {id}")});
            let history = interview(org, &id, &study, &started).then(
                "interview.message_recorded",
                "2026-02-10T09:30:00Z",
                message,
            );
            all.extend(completed(history).messages);
        }
    }
    all
}

/// Requests in a loop until `stop`, recording every answer that is not a 200.
async fn load(app: Arc<TestApp>, stop: Arc<AtomicBool>, done: Arc<AtomicU64>, failures: Arc<Mutex<Vec<String>>>) {
    let paths =
        ["/v1/studies?pageSize=100", "/v1/studies/s001/interviews", "/v1/interviews/s002-i3", "/v1/studies/s000"];
    while !stop.load(Ordering::Relaxed) {
        for path in paths {
            let response = app.get(path, Some(SECRET)).await;
            let status = response.status().as_u16();
            if status != 200 {
                let body = response.text().await.unwrap_or_default();
                failures.lock().unwrap().push(format!("{path}: {status} {body}"));
            }
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moving_an_organizations_slot_under_load_returns_no_error_and_loses_no_event() {
    // The organization lives in the lowest slot of the primary with the most slots.
    let primaries = cluster::primaries();
    let source: &Primary =
        primaries.iter().max_by_key(|p| p.slots.iter().map(|(l, h)| h - l + 1).sum::<u16>()).unwrap();
    let target = primaries.iter().find(|p| p.id != source.id).expect("another primary");
    let slot = source.slots.iter().map(|(low, _)| *low).min().unwrap();
    let org = organization_in(slot);
    assert_eq!(cluster::cli(&["cluster", "keyslot", &format!("{{{org}}}")]).trim(), slot.to_string());

    let topics = Topics::holding(&[key(&org, "k", SECRET).messages, studies(&org, 0, BEFORE)].concat()).await;
    let prefix = unique("rs");
    let mut projector_config = runner::config(&topics, &prefix, &unique("g"));
    projector_config.redis.url = env("REDIS_CLUSTER_URLS").into();
    projector_config.redis.cluster = true;
    let projector = runner::spawn(projector_config).await;
    let mut api_config = config(&prefix, &env("REDIS_CLUSTER_URLS"));
    api_config.redis.cluster = true;
    let app = Arc::new(spawn_app(api_config).await);
    eventually(Duration::from_secs(60), "the first studies to be served", || async {
        let (status, body) = app.json("/v1/studies?pageSize=100", SECRET).await;
        (status == 200 && body["pagination"]["total"] == BEFORE).then_some(())
    })
    .await;

    let (stop, done, failures) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::default());
    let clients: Vec<_> =
        (0..4).map(|_| tokio::spawn(load(app.clone(), stop.clone(), done.clone(), Arc::clone(&failures)))).collect();
    // The slot is half moved (some keys on each primary) before the new studies are published, and stays so
    // until the clients have had many answers in it. The projector's writes, each on several of the
    // organization's keys, are refused with TRYAGAIN until the move ends: they must wait, not be lost.
    let moving = SlotMove::begin(slot, source, target);
    assert!(moving.migrate(10) > 0, "the slot holds the organization's keys");
    let publisher = {
        let (producer, topics, org) = (kafka::producer(), topics.clone(), org.clone());
        tokio::spawn(async move {
            for chunk in 0..CHUNKS {
                kafka::publish(&producer, &topics, &studies(&org, BEFORE + chunk * 4, BEFORE + chunk * 4 + 4)).await;
            }
        })
    };
    let asked = done.load(Ordering::Relaxed);
    eventually_showing(Duration::from_secs(60), "answers while the slot is half moved", || async {
        let answers = done.load(Ordering::Relaxed) - asked;
        if answers >= 200 {
            Ok(())
        } else {
            Err(format!("{answers} answers"))
        }
    })
    .await;
    publisher.await.expect("published while the slot is half moved");
    tokio::task::spawn_blocking(move || moving.finish()).await.expect("the move ends");
    let owner = cluster::primaries().into_iter().find(|p| p.serves(slot)).expect("someone serves the slot");
    assert_eq!(owner.id, target.id, "the organization's slot moved");

    eventually(Duration::from_secs(120), "every study and interview to be served", || async {
        let (status, body) = app.json("/v1/studies?pageSize=100", SECRET).await;
        if status != 200 || body["pagination"]["total"] != TOTAL {
            return None;
        }
        for s in [0, BEFORE - 1, BEFORE, TOTAL - 1] {
            let (status, page) = app.json(&format!("/v1/studies/s{s:03}/interviews"), SECRET).await;
            if status != 200 || page["pagination"]["total"] != INTERVIEWS {
                return None;
            }
        }
        Some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.expect("client task");
    }
    let failures = failures.lock().unwrap().clone();
    assert!(failures.is_empty(), "{} failed requests, e.g. {:?}", failures.len(), &failures[..failures.len().min(5)]);

    // Every event is there: each study lists all its interviews, each with its transcript.
    for s in 0..TOTAL {
        let (status, page) = app.json(&format!("/v1/studies/s{s:03}/interviews?pageSize=100"), SECRET).await;
        assert_eq!(status, 200);
        let items = page["items"].as_array().unwrap();
        assert_eq!(items.len(), INTERVIEWS, "study s{s:03}");
        for item in items {
            let id = item["id"].as_str().unwrap();
            assert!(item["transcriptAsWebVTT"].as_str().unwrap().contains(&format!("answer {id}")), "{item}");
        }
    }
    projector.stop().await;
}

/// One batch on a slot half moved between two primaries of a cluster of the test's own: a key already on
/// the importing primary, one still on the migrating one, and one that does not exist yet (the migrating
/// primary sends it on with ASK) are all answered in that one call, each from where it is; then, the move
/// over, from the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_on_a_half_moved_slot_is_answered_whole_each_command_where_its_key_is() {
    use end_to_end::own_redis::{OwnCluster, Persistence};
    use shared::connection::{Connection, Settings};
    use shared::redis_url::Target;

    let own = OwnCluster::start(Persistence::Snapshots).await;
    let settings = Settings { timeout: Duration::from_secs(5), cluster_retries: 3 };
    let mut conn = Connection::connect(&Target::new(&own.urls(), true), settings).await.unwrap();
    let org = unique("half");
    let slot = cluster::slot(&org);
    let key = |name: &str| format!("rm:{{{org}}}:{name}");
    let set = |name: &str, value: &str| redis::cmd("SET").arg(key(name)).arg(value).to_owned();
    let get = |name: &str| redis::cmd("GET").arg(key(name)).to_owned();
    conn.query_all(&[set("moved", "m"), set("staying", "s")]).await.unwrap();

    let source = own.primary_of(slot);
    let target = (0..3).find(|n| *n != source).unwrap();
    let (source_id, target_id) =
        (own.nodes[source].cli(&["CLUSTER", "MYID"]), own.nodes[target].cli(&["CLUSTER", "MYID"]));
    let slot = slot.to_string();
    assert_eq!(own.nodes[target].cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]), "OK");
    assert_eq!(own.nodes[source].cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]), "OK");
    let port = own.nodes[target].port().to_string();
    let migrated = own.nodes[source].cli(&["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", &key("moved")]);
    assert_eq!(migrated, "OK");

    let replies = conn.query_all(&[get("moved"), get("staying"), set("new", "n"), get("missing")]).await.unwrap();
    let values: Vec<Option<String>> = replies.into_iter().map(|r| redis::from_redis_value(r).unwrap()).collect();
    assert_eq!(values, [Some("m".into()), Some("s".into()), Some("OK".into()), None]);
    // The new key went to the importing primary: only it holds it once the move ends.

    // The move ends: the slot map is read again after MOVED, and everything is where it now is.
    let rest = own.nodes[source].cli(&["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS", &key("staying")]);
    assert_eq!(rest, "OK");
    for node in &own.nodes {
        node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &target_id]);
    }
    let replies = conn.query_all(&[get("moved"), get("staying"), get("new")]).await.unwrap();
    let values: Vec<Option<String>> = replies.into_iter().map(|r| redis::from_redis_value(r).unwrap()).collect();
    assert_eq!(values, [Some("m".into()), Some("s".into()), Some("n".into())]);
}

/// While an organization's slot is marked as moving between two primaries of a cluster of the test's own
/// (no key moved yet), one of its interviews and its pages are served. A script declaring a key that does
/// not exist (an interview without a transcript, an organization without a transcript rewrite) is answered
/// TRYAGAIN for as long as the move lasts, on either primary: such a read goes key by key instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_an_organizations_slot_is_moving_its_interviews_and_pages_are_served() {
    use end_to_end::faults::Healing;
    use end_to_end::fixture::{self, ACME, ACME_KEY};
    use end_to_end::own_redis::{OwnCluster, Persistence};

    let own = OwnCluster::start(Persistence::Snapshots).await;
    let messages = fixture::dataset();
    let topics = Topics::holding(&messages).await;
    let world = Healing::start(&topics, &own.urls(), true).await;
    world.wait_ready(messages.len() as u64, Duration::from_secs(60)).await;
    let slot = shared::keys::slot(&shared::Keyspace::new(world.prefix(), 1).org_epoch(ACME));
    let source = own.primary_of(slot);
    let target = (0..3).find(|n| *n != source).unwrap();
    let (source_id, target_id) =
        (own.nodes[source].cli(&["CLUSTER", "MYID"]), own.nodes[target].cli(&["CLUSTER", "MYID"]));
    let slot = slot.to_string();
    assert_eq!(own.nodes[target].cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id]), "OK");
    assert_eq!(own.nodes[source].cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id]), "OK");

    for path in ["/v1/interviews/i1", "/v1/interviews/i2", "/v1/studies/s_b/interviews", "/v1/studies"] {
        let response = world.app.get(path, Some(ACME_KEY)).await;
        let status = response.status();
        assert_eq!(status, 200, "{path}: {}", response.text().await.unwrap());
    }
}
