//! The HTTP edge against hostile and careless input: credentials that are almost Bearer, method tokens
//! made up to grow the metrics, buckets that are hosts, an API that starts before its Redis, and a client
//! that stops reading while the API stops.

use end_to_end::api::{config, spawn_app, spawn_serving_app, World};
use end_to_end::events::key_sha256;
use end_to_end::fixture::{self, interview, ACME, ACME_KEY};
use end_to_end::metrics::sample;
use end_to_end::own_redis::OwnRedis;
use end_to_end::{env, eventually, unique};
use redis::AsyncCommands;
use serde_json::{json, Value};
use shared::Keyspace;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorization_bearer_header_without_a_usable_token_is_401_whatever_service_api_key_says() {
    let world = World::start(&fixture::dataset()).await;
    let url = format!("{}/v1/studies", world.app.address);
    let client = &world.app.client;
    let ok = client.get(&url).header("Service-Api-Key", ACME_KEY).send().await.unwrap();
    assert_eq!(ok.status(), 200, "the other header alone is a valid key");
    for bearer in ["Bearer", "bearer ", format!("Bearer\t{ACME_KEY}").as_str()] {
        let response =
            client.get(&url).header("Authorization", bearer).header("Service-Api-Key", ACME_KEY).send().await.unwrap();
        assert_eq!(response.status(), 401, "Authorization: {bearer:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_method_adds_no_label_to_the_request_metrics() {
    let world = World::start(&fixture::dataset()).await;
    let method = reqwest::Method::from_bytes("X".repeat(2000).as_bytes()).unwrap();
    let url = format!("{}/v1/studies", world.app.address);
    let response = world.app.client.request(method, &url).send().await.unwrap();
    assert_eq!(response.status(), 405);
    let metrics = world.app.admin_get("/metrics").await.text().await.unwrap();
    assert!(!metrics.contains("XXXXXXXX"), "the method token is not a label");
    assert_eq!(sample(&metrics, "api_requests_total", &["method=\"other\"", "status=\"405\""]), 1.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_video_whose_bucket_is_not_a_bucket_name_gets_no_link_and_an_empty_bucket_is_the_default() {
    let stored = |id: &str, video: Value| {
        fixture::completed(interview(ACME, id, "s_b", "2026-03-02T10:00:00Z").then(
            "interview.video_stored",
            "2026-03-02T10:00:01Z",
            video,
        ))
        .messages
    };
    let messages = [
        fixture::dataset(),
        stored("v_host", json!({"bucket": "attacker.example/", "key": "x.mp4"})),
        stored("v_port", json!({"bucket": "evil.com:443", "key": "x.mp4"})),
        stored("v_empty_key", json!({"key": ""})),
        stored("v_empty_bucket", json!({"bucket": "", "key": "y.mp4"})),
    ]
    .concat();
    let world = World::start(&messages).await;
    for id in ["v_host", "v_port", "v_empty_key"] {
        let (status, body) = world.app.json(&format!("/v1/interviews/{id}"), ACME_KEY).await;
        assert_eq!((status, &body["videoDownloadURL"]), (200, &Value::Null), "{id}");
    }
    let (_, body) = world.app.json("/v1/interviews/v_empty_bucket", ACME_KEY).await;
    let link = body["videoDownloadURL"].as_str().expect("a link to the default bucket");
    let expected = format!("{}/{}/y.mp4?", env("S3_ENDPOINT"), env("S3_BUCKET"));
    assert!(link.starts_with(&expected), "{link}");
    let metrics = world.app.admin_get("/metrics").await.text().await.unwrap();
    assert_eq!(sample(&metrics, "api_video_links_refused_total", &[]), 3.0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_started_while_redis_is_down_answers_503_and_then_serves_the_real_generation() {
    let mut redis = OwnRedis::start();
    let (prefix, secret) = (unique("down"), "started-while-down-key");
    // A read model whose active generation is 2, with one live key there.
    let keys = Keyspace::new(prefix.clone(), 2);
    let mut conn = eventually(Duration::from_secs(10), "redis to answer", || async {
        redis::Client::open(redis.url()).ok()?.get_multiplexed_async_connection().await.ok()
    })
    .await;
    let _: () = conn.set(Keyspace::active_generation(&prefix), 2).await.unwrap();
    let _: () =
        conn.hset_multiple(keys.api_key_sha(&key_sha256(secret)), &[("org", "org"), ("key", "k")]).await.unwrap();
    // And the positions a projector records before it writes anything (the API takes an organization
    // without an epoch, on a primary without them, for a loss).
    let _: () = conn.hset(keys.positions_on(&[(0, 16383)]), "opened", "1").await.unwrap();
    redis.stop();

    let mut api = config(&prefix, &redis.url());
    // A single Redis of the test's own, also in the pass that sets REDIS_CLUSTER for the stack's cluster.
    (api.redis.cluster, api.generation_refresh_ms) = (false, 3_600_000);
    let app = spawn_app(api).await;
    let response = app.get("/v1/studies", Some(secret)).await;
    assert_eq!(response.status(), 503, "Redis is away");
    assert_eq!(response.headers()["retry-after"], "1");

    redis.restart();
    let status = eventually(Duration::from_secs(10), "redis back", || async {
        let status = app.get("/v1/studies", Some(secret)).await.status().as_u16();
        (status != 503).then_some(status)
    })
    .await;
    assert_eq!(status, 200, "a valid key of generation 2, never a 401 from a guessed generation");
}

/// A server that accepts connections and never answers: a Redis that hangs.
async fn black_hole() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (url, task)
}

async fn error_of(response: reqwest::Response) -> (u16, Option<String>, String) {
    let status = response.status().as_u16();
    let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    (status, retry, response.json::<Value>().await.unwrap()["error"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_outlives_its_timeout_is_answered_503_with_retry_after_and_counted() {
    let (hanging, _hole) = black_hole().await;
    let mut api = config(&unique("slow"), &hanging);
    (api.redis.timeout_ms, api.request_timeout_ms) = (30_000, 300);
    let app = spawn_app(api).await;
    let started = std::time::Instant::now();
    let (status, retry, _) = error_of(app.get("/v1/studies", Some("some-key")).await).await;
    assert_eq!((status, retry.as_deref()), (503, Some("1")));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "cut at the request timeout, not Redis's: {:?}",
        started.elapsed()
    );
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    let cut = sample(&metrics, "api_requests_total", &["route=\"/v1/studies\"", "status=\"503\""]);
    assert_eq!(cut, 1.0, "the timed-out request is counted: {metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_concurrency_cap_a_request_is_shed_at_once_with_503_not_queued_counted_and_livez_still_answers() {
    let (hanging, _hole) = black_hole().await;
    let mut api = config(&unique("busy"), &hanging);
    (api.redis.timeout_ms, api.request_timeout_ms, api.max_concurrent_requests) = (30_000, 20_000, 1);
    let app = std::sync::Arc::new(spawn_app(api).await);
    // The holder waits on the hanging Redis; shed itself when a probe below had the slot for a moment, it
    // asks again. Another route than the one whose sheds are counted below.
    let holder = {
        let app = app.clone();
        tokio::spawn(async move {
            loop {
                let status = app.get("/v1/studies/s_held", Some("some-key")).await.status();
                if status != 503 {
                    return status;
                }
            }
        })
    };
    // Once the one slot is held by the request waiting on the hanging Redis, the next is refused at once
    // (a probe that finds the slot free takes it only for as long as a 404 takes).
    eventually(Duration::from_secs(10), "the slot to be held", || async {
        (app.get("/no-such-route", None).await.status() == 503).then_some(())
    })
    .await;
    let started = std::time::Instant::now();
    let shed = error_of(app.get("/v1/studies", Some("other-key")).await).await;
    assert_eq!((shed.0, shed.1.as_deref()), (503, Some("1")), "{shed:?}");
    assert!(started.elapsed() < Duration::from_secs(2), "shed, not queued: {:?}", started.elapsed());
    // Liveness is outside the limits: an overloaded instance is alive, not to be restarted.
    let live = app.get("/livez", None).await;
    assert_eq!(live.status(), 200);
    assert!(live.headers().contains_key("x-request-id"), "the edge's headers are on it all the same");
    let metrics = app.admin_get("/metrics").await.text().await.unwrap();
    let shed = sample(&metrics, "api_requests_total", &["route=\"/v1/studies\"", "status=\"503\""]);
    assert_eq!(shed, 1.0, "the shed request is counted: {metrics}");
    holder.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_request_head_is_disconnected() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut api = config(&unique("slowloris"), "redis://127.0.0.1:1");
    api.header_read_timeout_ms = 300;
    let app = spawn_app(api).await;
    let address = app.address.trim_start_matches("http://").to_string();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    // A request head that never ends (no blank line).
    socket.write_all(b"GET /livez HTTP/1.1\r\nHost: api\r\nX-Slow: 1\r\n").await.unwrap();
    let started = std::time::Instant::now();
    let mut buffer = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut buffer)).await;
    let closed = matches!(read, Ok(Ok(0)) | Ok(Err(_)))
        || matches!(read, Ok(Ok(n)) if String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 408"));
    assert!(closed, "the connection is closed (or answered 408), not held: {read:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    // Others are still served.
    assert_eq!(app.get("/livez", None).await.status(), 200);
}

/// Reads one whole response from `socket` (head and a `Content-Length` body); what it read, or `None` when
/// the server closed the connection first.
async fn read_response(socket: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut read = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&read).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|line| {
                    line.to_ascii_lowercase().strip_prefix("content-length:").map(|n| n.trim().to_string())
                })
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            if read.len() >= end + 4 + length {
                return Some(text);
            }
        }
        match tokio::time::timeout(Duration::from_secs(10), socket.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return None,
            Ok(Ok(n)) => read.extend_from_slice(&buffer[..n]),
            Err(_) => panic!("no response within 10 s: {:?}", String::from_utf8_lossy(&read)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_idle_longer_than_the_header_timeout_is_served_and_closed_past_its_own() {
    use tokio::io::AsyncWriteExt;
    let mut api = config(&unique("keep-alive"), "redis://127.0.0.1:1");
    (api.header_read_timeout_ms, api.keep_alive_timeout_ms) = (300, 2_000);
    let app = spawn_app(api).await;
    let address = app.address.trim_start_matches("http://").to_string();
    let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = b"GET /livez HTTP/1.1\r\nHost: api\r\n\r\n";
    socket.write_all(request).await.unwrap();
    let first = read_response(&mut socket).await.expect("the first response");
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    // A client's pool keeps the connection and reuses it later, as load balancers and HTTP clients do:
    // the time a kept-alive connection waits for its next request is not a slow request head.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let sent = socket.write_all(request).await;
    let second = match sent {
        Ok(()) => read_response(&mut socket).await,
        Err(_) => None,
    };
    assert!(second.as_deref().is_some_and(|r| r.starts_with("HTTP/1.1 200")), "closed while idle: {second:?}");
    // Idle past the keep-alive clock, the connection is closed, quietly (no 408, no reset).
    let idle = std::time::Instant::now();
    assert_eq!(read_response(&mut socket).await, None, "the connection is closed");
    let waited = idle.elapsed();
    assert!(waited >= Duration::from_millis(1_900) && waited < Duration::from_secs(8), "closed after {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_per_key_rate_limit_a_key_past_its_burst_gets_429_with_retry_after_and_others_do_not() {
    let world = World::start(&fixture::dataset()).await;
    let mut limited = config(&world.prefix, &env("REDIS_URL"));
    (limited.rate_limit_per_second, limited.rate_limit_burst) = (1, 3);
    let app = spawn_serving_app(limited).await;
    // The burst of three passes; past it, one token a second, so requests in quick succession are refused.
    for _ in 0..3 {
        assert_eq!(app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);
    }
    let refused = eventually(Duration::from_secs(10), "a refusal past the burst", || async {
        let (status, retry, error) = error_of(app.get("/v1/studies", Some(ACME_KEY)).await).await;
        (status == 429).then_some((retry, error))
    })
    .await;
    assert_eq!(refused.0.as_deref(), Some("1"));
    assert!(refused.1.contains("rate limit"), "{}", refused.1);
    assert_eq!(app.get("/v1/studies", Some(fixture::GLOBEX_KEY)).await.status(), 200, "another key has its own");
    assert_eq!(app.get("/v1/studies", Some("not-a-key")).await.status(), 401, "authentication comes first");
    // Without the setting there is no limit.
    for _ in 0..10 {
        assert_eq!(world.app.get("/v1/studies", Some(ACME_KEY)).await.status(), 200);
    }
}

/// A GET of the studies with `key`, from the client `forwarded_for` names; its status.
async fn studies_for(app: &end_to_end::api::TestApp, key: &str, forwarded_for: &str) -> u16 {
    let url = format!("{}/v1/studies", app.address);
    let request = app.client.get(url).bearer_auth(key).header("X-Forwarded-For", forwarded_for);
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_random_keys_is_throttled_alone_and_valid_keys_of_others_are_looked_up() {
    let world = World::start(&fixture::dataset()).await;
    let mut throttled = config(&world.prefix, &env("REDIS_URL"));
    // Every key is looked up in Redis (none kept in memory); the tests' loopback is the trusted proxy.
    (throttled.api_key_cache_size, throttled.unknown_keys_per_second) = (0, 1);
    throttled.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let app = spawn_serving_app(throttled).await;
    let (abuser, other) = ("203.0.113.7", "198.51.100.1");
    // The abuser's random keys are refused, then throttled with a client error, not a 503; while it is,
    // its own valid key waits too (its bucket refills once a second: asked again if it did meanwhile).
    eventually(Duration::from_secs(20), "the abuser throttled", || async {
        let status = studies_for(&app, &unique("random-key"), &format!("1.2.3.4, {abuser}")).await;
        assert!(status == 401 || status == 429, "{status}");
        (status == 429 && studies_for(&app, ACME_KEY, abuser).await == 429).then_some(())
    })
    .await;
    // Another client's valid key is looked up and served, every time.
    for _ in 0..20 {
        assert_eq!(studies_for(&app, ACME_KEY, other).await, 200, "another client shut out by the abuser");
    }
    // Without a trusted proxy, the header is the client's word: every request is the loopback peer's.
    let mut untrusted = config(&world.prefix, &env("REDIS_URL"));
    (untrusted.api_key_cache_size, untrusted.unknown_keys_per_second) = (0, 1);
    let app = spawn_app(untrusted).await;
    eventually(Duration::from_secs(20), "the peer throttled, whatever it forwards", || async {
        (studies_for(&app, &unique("random-key"), abuser).await == 429
            && studies_for(&app, ACME_KEY, other).await == 429)
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_a_long_answer_holds_a_stopping_api_no_longer_than_its_drain() {
    use end_to_end::api::ApiProcess;
    use end_to_end::fixture::completed;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut messages = fixture::dataset();
    messages.extend(completed(interview(ACME, "i_long", "s1", "2026-03-01T00:00:00Z")).messages);
    let world = World::start(&messages).await;
    let keys = Keyspace::new(world.prefix.clone(), 1);
    let mut conn = end_to_end::redis().await;
    // 40 MB: far more than the socket buffers hold, so a client that stops reading keeps the answer open.
    let _: () =
        conn.set(keys.transcript(ACME, "i_long"), format!("WEBVTT\n\n{}", "x".repeat(40_000_000))).await.unwrap();
    let drain = Duration::from_millis(1500);
    let mut api = ApiProcess::spawn(&world.prefix, &["--max-page-mb", "1", "--shutdown-drain-ms", "1500"]).await;

    let address = api.address.trim_start_matches("http://").to_string();
    let mut stuck = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request =
        format!("GET /v1/interviews/i_long HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {ACME_KEY}\r\n\r\n");
    stuck.write_all(request.as_bytes()).await.unwrap();
    let mut head = vec![0; 4096];
    let read = stuck.read(&mut head).await.unwrap();
    assert!(head[..read].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head[..read]));
    // The client reads no more of it; other clients are answered meanwhile.
    assert_eq!(api.get("/v1/studies", ACME_KEY).await.status(), 200);

    let stopping = std::time::Instant::now();
    api.sigterm();
    let exit = api.wait_exit(drain + Duration::from_secs(10)).await;
    let took = stopping.elapsed();
    eprintln!("the API exited {took:?} after SIGTERM, with {exit:?}");
    let exit = exit.expect("the API exits once its drain is over, though a client still holds an answer");
    assert!(exit.success(), "a drained shutdown exits 0: {exit}");
    assert!(took >= drain - Duration::from_millis(100), "the API waited for the answer in flight: {took:?}");
    let refused = tokio::net::TcpStream::connect(&address).await;
    assert!(refused.is_err(), "a stopped API accepts no connection");
}
