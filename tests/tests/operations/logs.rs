//! What the API writes to its logs, read from the real binary's JSON lines: one access line per request,
//! with its id, route, status and its key's organization, never the key; and refusals during an outage
//! logged once a second at most, not once per request.

use end_to_end::api::{ApiProcess, World};
use end_to_end::fixture::{self, ACME, ACME_KEY};
use end_to_end::unique;
use serde_json::Value;

/// The JSON lines the process wrote to `path`.
fn lines(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("the log file");
    text.lines().map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"))).collect()
}

fn log_file(label: &str) -> (std::path::PathBuf, std::fs::File) {
    let path = std::env::temp_dir().join(format!("{}.log", unique(label)));
    let file = std::fs::File::create(&path).expect("a log file");
    (path, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_has_one_access_line_with_its_id_route_status_and_organization_and_never_its_key() {
    let world = World::start(&fixture::dataset()).await;
    let (path, file) = log_file("access");
    let api = ApiProcess::spawn_logging(&world.prefix, &end_to_end::env("REDIS_URL"), file).await;
    let served = api.get("/v1/studies", ACME_KEY).await;
    assert_eq!(served.status(), 200);
    let served_id = served.headers()["x-request-id"].to_str().unwrap().to_string();
    let refused = api.get("/v1/studies/s_a", "not-a-key-of-anyone").await;
    assert_eq!(refused.status(), 401);
    let refused_id = refused.headers()["x-request-id"].to_str().unwrap().to_string();
    drop(api);

    let logs = lines(&path);
    let access = |id: &str| -> Vec<&Value> {
        logs.iter().filter(|l| l["target"] == "access" && l["span"]["id"] == id).collect()
    };
    let served = access(&served_id);
    assert_eq!(served.len(), 1, "one line per request: {logs:#?}");
    let (fields, span) = (served[0], &served[0]["span"]);
    assert_eq!(served[0]["level"], "INFO");
    assert_eq!(
        (&fields["method"], &fields["route"], &fields["status"]),
        (&"GET".into(), &"/v1/studies".into(), &200.into())
    );
    assert!(fields["latency_ms"].as_f64().is_some(), "{fields}");
    assert_eq!(span["organization"], ACME);
    let refused = access(&refused_id);
    assert_eq!(refused.len(), 1);
    assert_eq!((&refused[0]["route"], &refused[0]["status"]), (&"/v1/studies/{id}".into(), &401.into()));
    assert!(refused[0]["span"].get("organization").is_none(), "no organization for an unknown key");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(ACME_KEY) && !text.contains("not-a-key-of-anyone"), "no key in the logs");
    std::fs::remove_file(&path).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_redis_outage_refusals_are_logged_once_a_second_at_most_and_every_request_has_its_access_line() {
    let (path, file) = log_file("outage");
    let api = ApiProcess::spawn_logging(&unique("outage"), "redis://127.0.0.1:1", file).await;
    let started = std::time::Instant::now();
    for _ in 0..30 {
        assert_eq!(api.get("/v1/studies", ACME_KEY).await.status(), 503);
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(api);

    let logs = lines(&path);
    let access = logs.iter().filter(|l| l["target"] == "access" && l["status"] == 503).count();
    assert_eq!(access, 30, "one access line per request");
    // The service's own lines; the Redis client's (one per connection attempt on a cluster) are its own.
    let ours =
        |l: &&Value| l["target"].as_str().is_some_and(|t| t.starts_with("query_api") || t.starts_with("tower_http"));
    let alarms: Vec<&Value> =
        logs.iter().filter(ours).filter(|l| l["level"] == "ERROR" || l["level"] == "WARN").collect();
    let allowed = (seconds.ceil() as usize + 1) * 4;
    assert!(alarms.len() <= allowed, "{} error lines in {seconds:.1}s: {alarms:#?}", alarms.len());
    assert!(
        alarms.iter().any(|l| l["skipped"].as_u64().is_some_and(|n| n > 0)) || seconds < 1.0,
        "the lines say how many were left out: {alarms:#?}"
    );
    std::fs::remove_file(&path).ok();
}
