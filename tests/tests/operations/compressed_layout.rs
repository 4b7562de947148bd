//! Layout 5 stores documents compressed, layout 6 served interviews' transcripts too (`shared::codec`). A
//! read model of layout 4 (every document whole) or of layout 5 (every transcript whole), as the releases
//! before wrote them, is served as it is by this build and projected in its own layout by this projector;
//! a rebuild moves it to this build's layout while clients read it, and no answer changes. A document
//! compressed with a dictionary this build lacks is refused by name, never served.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use end_to_end::api::{self, spawn_app, ApiProcess, TestApp, World};
use end_to_end::fixture::{ACME, ACME_KEY};
use end_to_end::kafka::{self, Topics};
use end_to_end::scenario::Scenario;
use end_to_end::{env, eventually, fixture, redis, runner, unique};
use serde_json::{json, Value};
use shared::codec::StoredDocument;
use shared::Keyspace;

const SECRET: &str = "layout-five-key-0001";
const WAIT: Duration = Duration::from_secs(60);

/// How many of an organization's documents are stored whole and how many compressed.
async fn forms(keys: &Keyspace, org: &str) -> (usize, usize) {
    let mut conn = redis().await;
    let (mut whole, mut compressed) = (0, 0);
    for hash in [keys.study_documents(org), keys.interview_documents(org)] {
        let fields: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL").arg(&hash).query_async(&mut conn).await.unwrap();
        for (_, value) in fields {
            if shared::codec::is_compressed(&value) {
                compressed += 1;
            } else {
                whole += 1;
            }
        }
    }
    (whole, compressed)
}

/// How many of an organization's served interviews' transcripts are stored whole and how many compressed.
async fn transcript_forms(keys: &Keyspace, org: &str) -> (usize, usize) {
    let mut conn = redis().await;
    let (mut whole, mut compressed) = (0, 0);
    for list in conn.scan(&keys.interviews(org, "*")).await.unwrap() {
        let ids: Vec<String> = redis::cmd("ZRANGE").arg(&list).arg(0).arg(-1).query_async(&mut conn).await.unwrap();
        for id in ids {
            let stored: Option<Vec<u8>> =
                redis::cmd("GET").arg(keys.transcript(org, &id)).query_async(&mut conn).await.unwrap();
            match stored {
                Some(value) if shared::codec::is_compressed(&value) => compressed += 1,
                Some(_) => whole += 1,
                None => {}
            }
        }
    }
    (whole, compressed)
}

/// Turns generation `keys` into what a release before wrote: `layout` in its meta and beside its
/// positions, `org`'s documents stored whole before layout 5, its transcripts whole before layout 6.
async fn as_layout(keys: &Keyspace, org: &str, layout: u32) {
    let mut conn = redis().await;
    if layout < 5 {
        for hash in [keys.study_documents(org), keys.interview_documents(org)] {
            let fields: Vec<(String, Vec<u8>)> = redis::cmd("HGETALL").arg(&hash).query_async(&mut conn).await.unwrap();
            for (id, value) in fields {
                let json = shared::codec::document(&value).expect("a document this build wrote").into_owned();
                let _: () = redis::cmd("HSET").arg(&hash).arg(id).arg(json).query_async(&mut conn).await.unwrap();
            }
        }
    }
    if layout < 6 {
        for key in conn.scan(&keys.transcript(org, "*")).await.unwrap() {
            let value: Vec<u8> = redis::cmd("GET").arg(&key).query_async(&mut conn).await.unwrap();
            let webvtt = shared::codec::transcript(&value).expect("a transcript this build wrote").into_owned();
            let _: () = redis::cmd("SET").arg(&key).arg(webvtt).query_async(&mut conn).await.unwrap();
        }
    }
    let _: () = redis::cmd("HSET").arg(keys.meta()).arg("layout").arg(layout).query_async(&mut conn).await.unwrap();
    let positions = conn.scan(&keys.position("*")).await.unwrap();
    assert!(!positions.is_empty());
    for hash in positions {
        let _: () = redis::cmd("HSET").arg(&hash).arg("layout").arg(layout).query_async(&mut conn).await.unwrap();
    }
}

/// One organization of scenario `seed` with an API key, projected by this build, its projector stopped.
struct Projected {
    org: String,
    topics: Topics,
    published: u64,
    prefix: String,
    group: String,
    keys: Keyspace,
}

async fn projected(seed: u64) -> Projected {
    let scenario = Scenario::generate(seed, 1, 6, 4);
    let org = scenario.organizations()[0].clone();
    let mut messages = scenario.messages.clone();
    messages.extend(fixture::key(&org, "layout-key", SECRET).messages);
    let topics = Topics::holding(&messages).await;
    let published = messages.len() as u64;
    let first = runner::spawn_caught_up(&topics, published, WAIT).await;
    let (prefix, group) = (first.prefix().to_string(), first.group().to_string());
    first.stop().await;
    let keys = Keyspace::new(prefix.clone(), 1);
    Projected { org, topics, published, prefix, group, keys }
}

/// Every answer about the organization: its studies, each one's interviews, and each interview alone;
/// the video links (signed anew by every request) as whether there is one.
async fn answers(app: &TestApp) -> Vec<(String, Value)> {
    let mut all = Vec::new();
    let mut read = async |path: String| {
        let (status, mut body) = app.json(&path, SECRET).await;
        assert_eq!(status, 200, "{path}: {body}");
        for item in body.get_mut("items").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(url) = item.get_mut("videoDownloadURL") {
                *url = Value::Bool(url.is_string());
            }
        }
        if let Some(url) = body.get_mut("videoDownloadURL") {
            *url = Value::Bool(url.is_string());
        }
        all.push((path, body.clone()));
        body
    };
    let studies = read("/v1/studies?pageSize=100".into()).await;
    for study in studies["items"].as_array().unwrap() {
        let interviews = read(format!("/v1/studies/{}/interviews?pageSize=100", study["id"].as_str().unwrap())).await;
        for interview in interviews["items"].as_array().unwrap() {
            read(format!("/v1/interviews/{}", interview["id"].as_str().unwrap())).await;
        }
    }
    all
}

/// Fails on the first answer that differs, naming its path.
fn same(now: &[(String, Value)], before: &[(String, Value)], when: &str) {
    assert_eq!(now.len(), before.len(), "{when}: {} answers where there were {}", now.len(), before.len());
    for ((path, body), (_, was)) in now.iter().zip(before) {
        assert_eq!(body, was, "{when}: {path} changed");
    }
}

/// Rebuilds the read model into a new generation of this build's layout while clients read every answer,
/// each the same as `before`, until the API serves the new generation; returns its keys.
async fn rebuild_while_reading(
    app: &Arc<TestApp>,
    topics: &Topics,
    prefix: &str,
    group: &str,
    before: &[(String, Value)],
) -> Keyspace {
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (app, stop, before) = (app.clone(), stop.clone(), before.to_vec());
        tokio::spawn(async move {
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) {
                same(&answers(&app).await, &before, "during the rebuild");
                reads += 1;
            }
            reads
        })
    };
    let rebuilt = runner::rebuild(runner::config(topics, prefix, group)).await.expect("the rebuild succeeds");
    assert_eq!(rebuilt, Some(2));
    let next = Keyspace::new(prefix.to_string(), 2);
    let layout: Option<String> =
        redis::cmd("HGET").arg(next.meta()).arg("layout").query_async(&mut redis().await).await.unwrap();
    assert_eq!(layout, Some(shared::layout::LAYOUT.to_string()));
    eventually(Duration::from_secs(5), "the API to follow the switch", || async {
        let ready: Value = app.admin_get("/readyz").await.json().await.unwrap();
        (ready["generation"] == 2).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    let reads = reader.await.expect("every answer stayed the same");
    assert!(reads > 0);
    same(&answers(app).await, before, "this layout answers as the one before did");
    next
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_model_of_layout_four_is_served_as_it_is_and_rebuilt_into_this_layout_with_no_answer_changing() {
    let Projected { org, topics, mut published, prefix, group, keys } = projected(0x5eed_0050).await;
    let (whole, compressed) = forms(&keys, &org).await;
    assert!(whole == 0 && compressed > 0, "layout 5 stores documents compressed: {whole} whole, {compressed}");
    as_layout(&keys, &org, 4).await;

    // This build serves layout 4 and projects it in its own layout: a new study's document whole.
    let live = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    let app = Arc::new(spawn_app(api::config(&prefix, &env("REDIS_URL"))).await);
    let late = fixture::completed_study(&org, "zz-late", "2027-01-01T00:00:00Z").messages;
    kafka::publish(&kafka::producer(), &topics, &late).await;
    published += late.len() as u64;
    live.wait_until_consumed(late.len() as u64, WAIT).await;
    assert_eq!(forms(&keys, &org).await, (compressed + 1, 0), "a generation of layout 4 gets whole documents");
    let before = answers(&app).await;
    assert!(before.len() > 10, "studies, interviews and each interview: {}", before.len());

    let next = rebuild_while_reading(&app, &topics, &prefix, &group, &before).await;
    assert_eq!(forms(&next, &org).await, (0, compressed + 1), "the rebuilt generation's documents compressed");
    assert_eq!(
        runner::digest(&next).await,
        runner::digest(&runner::build_from_scratch(&topics, published).await).await
    );
    live.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_model_of_layout_five_is_served_as_it_is_and_rebuilt_with_its_transcripts_compressed() {
    let Projected { org, topics, mut published, prefix, group, keys } = projected(0x5eed_0060).await;
    let (whole, compressed) = transcript_forms(&keys, &org).await;
    assert!(whole == 0 && compressed > 0, "served transcripts compressed: {whole} whole, {compressed}");
    as_layout(&keys, &org, 5).await;
    assert_eq!(transcript_forms(&keys, &org).await, (compressed, 0));

    // This build serves layout 5 and projects it in its own layout: a new interview's transcript whole.
    let live = runner::spawn(runner::config(&topics, &prefix, &group)).await;
    let app = Arc::new(spawn_app(api::config(&prefix, &env("REDIS_URL"))).await);
    let mut late = fixture::completed_study(&org, "zz-late", "2027-01-01T00:00:00Z").messages;
    let said = fixture::interview(&org, "zz-talk", "zz-late", "2026-12-31T10:00:00Z").then(
        "interview.message_recorded",
        "2026-12-31T10:01:00Z",
        json!({"messageId": "m1", "role": "participant", "text": "Said in layout 5", "startSeconds": 1}),
    );
    late.extend(fixture::completed(said).messages);
    kafka::publish(&kafka::producer(), &topics, &late).await;
    published += late.len() as u64;
    live.wait_until_consumed(late.len() as u64, WAIT).await;
    assert_eq!(transcript_forms(&keys, &org).await, (compressed + 1, 0), "layout 5 gets whole transcripts");
    let before = answers(&app).await;
    assert!(before.iter().any(|(_, body)| body.to_string().contains("Said in layout 5")));

    let next = rebuild_while_reading(&app, &topics, &prefix, &group, &before).await;
    assert_eq!(transcript_forms(&next, &org).await, (0, compressed + 1), "the rebuilt generation's compressed");
    assert_eq!(
        runner::digest(&next).await,
        runner::digest(&runner::build_from_scratch(&topics, published).await).await
    );
    live.stop().await;
}

/// A later release's document: compressed with the dictionary this build ships, under another id (9), as
/// a new dictionary would be. This build has no dictionary 9: the API answers 503 for what holds it (never
/// a 500, never the frame's bytes as JSON), says why in its log, and serves the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_document_compressed_with_a_dictionary_this_build_lacks_is_a_503_that_names_the_dictionary() {
    let world = World::start(&fixture::dataset()).await;
    let keys = Keyspace::new(world.prefix.clone(), 1);
    let mut conn = redis().await;
    let documents = keys.study_documents(ACME);
    let StoredDocument(json) = redis::cmd("HGET").arg(&documents).arg("s_a").query_async(&mut conn).await.unwrap();
    let mut later = include_bytes!("../../../shared/dictionaries/documents-1.zdict").to_vec();
    later[4..8].copy_from_slice(&9u32.to_le_bytes());
    let frame = zstd::bulk::Compressor::with_dictionary(3, &later).unwrap().compress(json.as_bytes()).unwrap();
    let _: () = redis::cmd("HSET").arg(&documents).arg("s_a").arg(&frame).query_async(&mut conn).await.unwrap();

    let path = std::env::temp_dir().join(format!("{}.log", unique("dictionary")));
    let file = std::fs::File::create(&path).unwrap();
    let api = ApiProcess::spawn_logging(&world.prefix, &env("REDIS_URL"), file).await;
    for route in ["/v1/studies/s_a", "/v1/studies"] {
        let refused = api.get(route, ACME_KEY).await;
        assert_eq!(refused.status(), 503, "{route}");
        assert!(refused.headers().contains_key("retry-after"), "{route}");
    }
    assert_eq!(api.get("/v1/studies/s_b", ACME_KEY).await.status(), 200, "the other documents are served");
    drop(api);
    // Counted apart from Redis failing.
    let app = spawn_app(api::config(&world.prefix, &env("REDIS_URL"))).await;
    assert_eq!(app.get("/v1/studies/s_a", Some(ACME_KEY)).await.status(), 503);
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    let refused =
        |cause: &str| end_to_end::metrics::sample(&metrics, "api_refused_total", &[&format!("cause=\"{cause}\"")]);
    assert_eq!((refused("unreadable"), refused("redis")), (1.0, 0.0), "{metrics}");
    let logs = std::fs::read_to_string(&path).unwrap();
    let said = "compressed with zstd dictionary 9, which this build does not have";
    assert!(logs.lines().any(|line| line.contains(said) && line.contains("\"ERROR\"")), "{logs}");
    assert!(logs.contains("a record of the read model does not read"), "{logs}");
}
