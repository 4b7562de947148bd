//! Traces across the bus: the real binaries export to a receiver of the test's own (`otlp`) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` names it. A request carrying a W3C `traceparent` is traced under the
//! caller's trace, and its JSON access line carries that trace's id and its span's; a batch of the projector links to the trace of each message whose headers carry one;
//! and a dead letter keeps the headers of its message, through a replay too.

use std::process::{Command, Stdio};
use std::time::Duration;

use end_to_end::events::{event, raw, Outgoing};
use end_to_end::kafka::{self, Topics};
use end_to_end::otlp::Receiver;
use end_to_end::runner::{self, KillOnDrop};
use end_to_end::{env, eventually, redis_cluster, unique};
use serde_json::json;
use shared::Topic;

const WAIT: Duration = Duration::from_secs(60);

/// A fresh `traceparent` (version 00, sampled): the caller's trace id and span id, and the header.
fn traceparent() -> (String, String, String) {
    let trace_id = uuid::Uuid::new_v4().simple().to_string();
    let span_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
    let header = format!("00-{trace_id}-{span_id}-01");
    (trace_id, span_id, header)
}

/// A binary's settings to export to `receiver`, over its transport, without waiting long between batches
/// of spans.
fn exporting_to(command: &mut Command, receiver: &Receiver) {
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint).env("OTEL_BSP_SCHEDULE_DELAY", "100");
    command.env("OTEL_EXPORTER_OTLP_PROTOCOL", receiver.protocol);
}

fn study(id: &str) -> Outgoing {
    event(Topic::Study, "org", id, 1, "study.created", "2026-05-01T10:00:00Z", json!({"internalTitle": "A"}))
}

/// The API binary on `redis_url`, exporting to `receiver`, its JSON log lines written to `logs`; once it
/// answers `/livez`: the process and its address.
async fn api_exporting(receiver: &Receiver, redis_url: &str, logs: &std::path::Path) -> (KillOnDrop, String) {
    let exe = std::env::current_exe().expect("test binary path");
    let binary = exe.parent().and_then(|deps| deps.parent()).expect("target dir").join("query-api");
    assert!(binary.exists(), "{} is missing: run `cargo build -p query-api` first", binary.display());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("http://127.0.0.1:{port}");
    let mut command = Command::new(binary);
    command
        .args(["--listen-addr", &format!("127.0.0.1:{port}"), "--admin-addr", "off", "--key-prefix", &unique("api")])
        .args(["--redis-url", redis_url, "--s3-disabled", "true"])
        .arg(format!("--redis-cluster={}", redis_cluster()))
        .stdout(Stdio::null());
    let file = std::fs::File::create(logs).expect("a log file");
    command.env("RUST_LOG", "info").env("LOG_FORMAT", "json").stderr(file);
    exporting_to(&mut command, receiver);
    let api = KillOnDrop(command.spawn().expect("query-api starts"));
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    eventually(Duration::from_secs(10), "the API to answer /livez", || async {
        let live = client.get(format!("{address}/livez")).send().await;
        live.is_ok_and(|r| r.status() == 200).then_some(())
    })
    .await;
    (api, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_traceparent_is_traced_under_the_callers_trace_id_and_logged_with_its_ids() {
    let receiver = Receiver::start().await;
    let logs = std::env::temp_dir().join(format!("{}.log", unique("traced")));
    let (api, address) = api_exporting(&receiver, &env("REDIS_URL"), &logs).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();

    let (trace_id, caller, header) = traceparent();
    let response = client
        .get(format!("{address}/v1/studies"))
        .header("traceparent", &header)
        .header("tracestate", "product=1")
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), 401, "no key: still a request, still traced");

    let span = receiver
        .wait_for(WAIT, "the request's span under the caller's trace id", |span| span.trace_id == trace_id)
        .await;
    assert_eq!(span.service, "query-api", "{span:?}");
    assert_eq!(span.parent_span_id, caller, "a child of the caller's span: {span:?}");
    // OpenTelemetry's HTTP server conventions: a 4xx is the client's error, not the server's.
    assert_eq!((span.name.as_str(), span.kind.as_str()), ("GET /v1/studies", "SPAN_KIND_SERVER"), "{span:?}");
    let attribute = |key: &str| span.attributes.get(key).map(String::as_str);
    assert_eq!(attribute("http.request.method"), Some("GET"), "{span:?}");
    assert_eq!(attribute("url.path"), Some("/v1/studies"), "{span:?}");
    assert_eq!(attribute("http.route"), Some("/v1/studies"), "{span:?}");
    assert_eq!(attribute("http.response.status_code"), Some("401"), "{span:?}");
    assert_ne!(span.status, "STATUS_CODE_ERROR", "{span:?}");

    // Its access line, flat, with the ids of the span it was written in.
    drop(api);
    let text = std::fs::read_to_string(&logs).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
    let access: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["target"] == "access" && l["route"] == "/v1/studies").collect();
    assert_eq!(access.len(), 1, "{text}");
    assert_eq!((&access[0]["trace_id"], &access[0]["span_id"]), (&trace_id.into(), &span.span_id.into()), "{text}");
    assert_eq!((&access[0]["status"], &access[0]["span"]["name"]), (&401.into(), &"request".into()), "{text}");
    std::fs::remove_file(&logs).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_answered_503_is_a_server_span_with_an_error_status_named_by_its_route() {
    let receiver = Receiver::start().await;
    let logs = std::env::temp_dir().join(format!("{}.log", unique("traced")));
    let (_api, address) = api_exporting(&receiver, "redis://127.0.0.1:1", &logs).await;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    let (trace_id, _, header) = traceparent();
    let response = client
        .get(format!("{address}/v1/studies/s-1"))
        .header("traceparent", &header)
        .header("authorization", "Bearer some-key")
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), 503, "Redis is away");
    let span = receiver.wait_for(WAIT, "the request's span", |span| span.trace_id == trace_id).await;
    assert_eq!((span.name.as_str(), span.kind.as_str()), ("GET /v1/studies/{id}", "SPAN_KIND_SERVER"), "{span:?}");
    assert_eq!(span.attributes.get("http.route").map(String::as_str), Some("/v1/studies/{id}"), "{span:?}");
    assert_eq!(span.attributes.get("url.path").map(String::as_str), Some("/v1/studies/s-1"), "{span:?}");
    assert_eq!(span.attributes.get("http.response.status_code").map(String::as_str), Some("503"), "{span:?}");
    assert_eq!(span.status, "STATUS_CODE_ERROR", "{span:?}");
    std::fs::remove_file(&logs).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_grpc_or_http_json_as_otel_exporter_otlp_protocol_says() {
    // Each receiver takes its own transport only: a span arrives only if it was sent over that one.
    for protocol in ["grpc", "http/json"] {
        let receiver = Receiver::start_for(protocol).await;
        let logs = std::env::temp_dir().join(format!("{}.log", unique("traced")));
        let (_api, address) = api_exporting(&receiver, "redis://127.0.0.1:1", &logs).await;
        let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
        let (trace_id, caller, header) = traceparent();
        let response = client
            .get(format!("{address}/v1/studies/s-1"))
            .header("traceparent", &header)
            .header("authorization", "Bearer some-key")
            .send()
            .await
            .expect("request sent");
        assert_eq!(response.status(), 503, "Redis is away");
        let span = receiver.wait_for(WAIT, protocol, |span| span.trace_id == trace_id).await;
        assert_eq!((span.service.as_str(), span.parent_span_id.as_str()), ("query-api", caller.as_str()), "{span:?}");
        assert_eq!((span.name.as_str(), span.kind.as_str()), ("GET /v1/studies/{id}", "SPAN_KIND_SERVER"), "{span:?}");
        assert_eq!(span.attributes.get("http.response.status_code").map(String::as_str), Some("503"), "{span:?}");
        assert_eq!(span.status, "STATUS_CODE_ERROR", "{protocol}: {span:?}");
        std::fs::remove_file(&logs).ok();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_events_trace_reaches_the_projectors_batch_span() {
    let receiver = Receiver::start().await;
    let topics = Topics::create().await;
    let (trace_id, producer_span, header) = traceparent();
    kafka::publish_with_headers(&kafka::producer(), &topics, &study("s1"), &[("traceparent", &header)]).await;

    let group = unique("g");
    let mut command = runner::command(&topics, &unique("rm"), &group, &[]);
    command.stdout(Stdio::null());
    exporting_to(&mut command, &receiver);
    let _projector = KillOnDrop(command.spawn().expect("projector starts"));

    let links_the_event = |span: &end_to_end::otlp::Span| span.links.iter().any(|(trace, _)| *trace == trace_id);
    let span = receiver.wait_for(WAIT, "a batch span linked to the event's trace", links_the_event).await;
    assert_eq!(span.service, "projector", "{span:?}");
    // OpenTelemetry's messaging conventions: a consumer processing a batch of one topic's partition.
    assert_eq!((span.name.as_str(), span.kind.as_str()), (&*format!("process {}", topics.study), "SPAN_KIND_CONSUMER"));
    let attribute = |key: &str| span.attributes.get(key).map(String::as_str);
    assert_eq!(attribute("messaging.system"), Some("kafka"), "{span:?}");
    assert_eq!(attribute("messaging.operation.type"), Some("process"), "{span:?}");
    assert_eq!(attribute("messaging.batch.message_count"), Some("1"), "{span:?}");
    assert_eq!(attribute("messaging.consumer.group.name"), Some(group.as_str()), "{span:?}");
    assert_eq!(attribute("messaging.destination.name"), Some(topics.study.as_str()), "{span:?}");
    assert!(attribute("messaging.destination.partition.id").is_some_and(|p| p.parse::<u32>().is_ok()), "{span:?}");
    assert_ne!(span.trace_id, trace_id, "linked, not joined: a batch holds many messages' traces");
    assert!(span.links.contains(&(trace_id.clone(), producer_span)), "the link names the producer's span: {span:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_keeps_its_messages_headers_and_a_replay_publishes_them_back() {
    let topics = Topics::create().await;
    let (_, _, header) = traceparent();
    let poison = raw(Topic::Study, "s1", "{broken");
    let headers = [("traceparent", header.as_str()), ("origin", "product")];
    kafka::publish_with_headers(&kafka::producer(), &topics, &poison, &headers).await;
    let running = runner::spawn_caught_up(&topics, 1, WAIT).await;

    let dlq = kafka::read(&format!("{}.dlq", topics.study), 1, WAIT).await;
    assert_eq!(dlq.len(), 1, "{dlq:?}");
    let letter = &dlq[0];
    assert_eq!(letter.header("traceparent"), Some(header.as_str()), "{letter:?}");
    assert_eq!(letter.header("origin"), Some("product"), "{letter:?}");
    assert!(letter.header("dlq-reason").is_some_and(|r| r.contains("invalid envelope")), "{letter:?}");

    let replayed = runner::succeed(&topics, running.prefix(), running.group(), &["dlq", "replay"], WAIT).await;
    assert!(
        replayed.starts_with("replayed 1 dead letters: 0 applied in order, 0 repaired, 1 still poison"),
        "{replayed}"
    );
    let study = kafka::read(&topics.study, 2, WAIT).await;
    assert_eq!(study.len(), 2, "the message and its replay: {study:?}");
    for message in &study {
        assert_eq!(message.header("traceparent"), Some(header.as_str()), "{message:?}");
        assert_eq!(message.header("origin"), Some("product"), "{message:?}");
        assert!(message.headers.iter().all(|(key, _)| !key.starts_with("dlq-")), "{message:?}");
    }
    running.stop().await;
}
