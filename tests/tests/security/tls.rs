//! `rediss://` as managed services offer it, against the stack's Redis on its TLS port and a Redis Cluster
//! of the test's own that speaks TLS only: both binaries run the core cases as the users of
//! deploy/redis/users.acl, trusting the stack's CA, and on a Redis of the test's own that requires a client
//! certificate, refused without one and served presenting one; and a CA
//! that did not sign the server's certificate, a CA file that cannot be read, or a client certificate the
//! server does not trust stops either binary at start with one line, without a password in it.

use std::process::Command;
use std::time::Duration;

use end_to_end::api::World;
use end_to_end::fixture::{self, key_deleted, ACME, ACME_KEY, ACME_OLD_KEY};
use end_to_end::kafka::Topics;
use end_to_end::rediss::{password, prefix, run_api, run_projector, the_one_line, tls, TlsCluster, TlsServer, USERS};
use end_to_end::stall::Stalling;
use end_to_end::{env, runner, unique};
use shared::redis_tls::TlsOptions;
use tokio::time::Instant;

/// The core cases through the users' URLs (the nodes of a cluster when `cluster`), trusting what `tls`
/// says: events published to fresh topics are projected, the API lists the organization's studies and
/// returns an interview, and a key revoked by an event is refused.
async fn core_cases(projector_url: String, api_url: String, cluster: bool, tls: TlsOptions) {
    let api_tls = tls.clone();
    let mut world = World::start_configured(
        &fixture::dataset(),
        &prefix(),
        |projector| {
            (projector.redis.url, projector.redis.cluster, projector.redis.tls) = (projector_url.into(), cluster, tls);
        },
        |api| (api.redis.url, api.redis.cluster, api.redis.tls) = (api_url.into(), cluster, api_tls),
    )
    .await;
    let (status, body) = world.app.json("/v1/studies", ACME_KEY).await;
    assert_eq!(status, 200, "{body}");
    let ids: Vec<&str> = body["items"].as_array().expect("items").iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["s_c", "s_b", "s_a"]);
    let (status, body) = world.app.json("/v1/studies/s_b/interviews", ACME_KEY).await;
    assert_eq!((status, body["pagination"]["total"].as_u64()), (200, Some(3)), "{body}");
    let (status, body) = world.app.json("/v1/interviews/i1", ACME_KEY).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["transcriptAsWebVTT"].as_str().is_some_and(|vtt| vtt.contains("Fish &amp; chips")), "{body}");
    assert_eq!(world.app.json("/v1/studies", ACME_OLD_KEY).await.0, 401, "a key revoked by an event");
    world.publish(&[key_deleted(ACME, "k_live", 2)]).await;
    world.app.refused_within_a_second(ACME_KEY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_binaries_serve_through_rediss_as_their_own_restricted_users_trusting_the_stacks_ca() {
    core_cases(env("REDIS_PROJECTOR_TLS_URL"), env("REDIS_QUERY_API_TLS_URL"), false, tls(false)).await;
}

/// The server requires a client certificate: without one, neither binary gets in; with the one the CA
/// signed, both serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_requires_a_client_certificate_refuses_both_binaries_without_one_and_serves_them_with_it() {
    const PASSWORD: &str = "client-cert-password-1";
    let users: Vec<String> = USERS.lines().map(|line| line.replace("CHANGE-ME", PASSWORD)).collect();
    let server = TlsServer::start(&users).await;
    let (projector_url, api_url) = (server.url("projector", PASSWORD), server.url("query-api", PASSWORD));
    let ca = env("TLS_CA_FILE");
    let topics = Topics::create().await;
    let projector = run_projector(&topics, &prefix(), &projector_url, &["--redis-ca-file", &ca]).await;
    let api = run_api(&api_url, &["--redis-ca-file", &ca]).await;
    for (binary, output) in [("projector", projector), ("query-api", api)] {
        let line = the_one_line(binary, &output, PASSWORD);
        assert!(line.contains("certificate"), "{binary} said why: {line}");
    }
    core_cases(projector_url, api_url, false, tls(true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_redis_cluster_that_speaks_only_tls_both_binaries_serve_as_their_users_and_a_wrong_ca_is_refused() {
    const PASSWORD: &str = "cluster-password-1";
    let users: Vec<String> = USERS.lines().map(|line| line.replace("CHANGE-ME", PASSWORD)).collect();
    let cluster = TlsCluster::start(&users).await;
    let (projector, api) = (cluster.urls("projector", PASSWORD), cluster.urls("query-api", PASSWORD));
    core_cases(projector.clone(), api, true, tls(false)).await;
    assert_eq!(cluster.denials(), "", "the users were refused nothing they needed");

    let topics = Topics::create().await;
    let mut config = runner::config(&topics, &prefix(), &unique("g"));
    (config.redis.url, config.redis.cluster) = (projector.into(), true);
    config.redis.tls.ca_file = Some(env("TLS_OTHER_CA_FILE").into());
    let refused = tokio::time::timeout(Duration::from_secs(30), runner::run(config)).await.expect("no hang");
    let line = refused.expect_err("the projector refuses to start").to_string();
    let why = "the TLS handshake failed (invalid peer certificate: UnknownIssuer): REDIS_CA_FILE";
    assert!(line.contains(why) && !line.contains(PASSWORD) && line.lines().count() == 1, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_that_did_not_sign_the_servers_certificate_stops_either_binary_at_start_with_one_line() {
    let topics = Topics::create().await;
    let other = env("TLS_OTHER_CA_FILE");
    let (projector_url, api_url) = (env("REDIS_PROJECTOR_TLS_URL"), env("REDIS_QUERY_API_TLS_URL"));
    let projector = run_projector(&topics, &prefix(), &projector_url, &["--redis-ca-file", &other]).await;
    let api = run_api(&api_url, &["--redis-ca-file", &other]).await;
    for (binary, output, url) in [("projector", projector, &projector_url), ("query-api", api, &api_url)] {
        let line = the_one_line(binary, &output, &password(url));
        let why = "the TLS handshake failed (invalid peer certificate: UnknownIssuer): REDIS_CA_FILE";
        assert!(line.contains(why) && line.contains(":***@127.0.0.1:"), "{binary}: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_ca_file_or_a_client_certificate_the_server_does_not_trust_stops_the_start_with_one_line() {
    let topics = Topics::create().await;
    let (projector_url, api_url) = (env("REDIS_PROJECTOR_TLS_URL"), env("REDIS_QUERY_API_TLS_URL"));
    let missing = ["--redis-ca-file", "/nonexistent/ca.pem"];
    let outputs =
        [run_projector(&topics, &prefix(), &projector_url, &missing).await, run_api(&api_url, &missing).await];
    for ((binary, output), url) in ["projector", "query-api"].into_iter().zip(outputs).zip([&projector_url, &api_url]) {
        let line = the_one_line(binary, &output, &password(url));
        assert!(line.contains("cannot read REDIS_CA_FILE /nonexistent/ca.pem: No such file"), "{binary}: {line}");
    }

    // A certificate of its own making, which the server's CA did not sign: the server ends the handshake.
    let dir = std::env::temp_dir().join(unique("stranger"));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=stranger"])
        .args(["-keyout", key.to_str().unwrap(), "-out", cert.to_str().unwrap()])
        .output()
        .expect("openssl runs");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let (ca, cert, key) = (env("TLS_CA_FILE"), cert.to_str().unwrap().to_string(), key.to_str().unwrap().to_string());
    let stranger = ["--redis-ca-file", &ca, "--redis-client-cert-file", &cert, "--redis-client-key-file", &key];
    let outputs =
        [run_projector(&topics, &prefix(), &projector_url, &stranger).await, run_api(&api_url, &stranger).await];
    for ((binary, output), url) in ["projector", "query-api"].into_iter().zip(outputs).zip([&projector_url, &api_url]) {
        let line = the_one_line(binary, &output, &password(url));
        assert!(line.contains("the TLS handshake failed (received fatal alert"), "{binary}: {line}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// How long the stalling proxy of the next two tests holds each connection without a byte: two or three
/// attempts to connect time out meanwhile.
const SILENT: Duration = Duration::from_secs(3);

/// On a busy machine a first attempt to connect can time out before Redis has said anything: that proves
/// nothing either way, so the check goes on, and the refusal that comes after still stops either binary and
/// an operator command with its one line (behind a proxy that is silent for a while, then forwards to the
/// stack's TLS Redis, trusted with a CA that did not sign its certificate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_met_after_attempts_that_timed_out_still_stops_either_binary_and_an_operator_command() {
    let topics = Topics::create().await;
    let other = env("TLS_OTHER_CA_FILE");
    let (projector_url, api_url) = (env("REDIS_PROJECTOR_TLS_URL"), env("REDIS_QUERY_API_TLS_URL"));
    let why = "the TLS handshake failed (invalid peer certificate: UnknownIssuer): REDIS_CA_FILE";
    let ca = ["--redis-ca-file", other.as_str()];
    for (binary, url) in [("projector", &projector_url), ("projector status", &projector_url), ("query-api", &api_url)]
    {
        let (stalling, proxied) = Stalling::before(url, SILENT).await;
        let output = match binary {
            "query-api" => run_api(&proxied, &ca).await,
            "projector" => run_projector(&topics, &prefix(), &proxied, &ca).await,
            _ => run_projector(&topics, &prefix(), &proxied, &[ca[0], ca[1], "status"]).await,
        };
        let line = the_one_line(binary, &output, &password(url));
        assert!(line.starts_with("Error: ") && line.contains(why), "{binary}: {line}");
        assert!(Instant::now() >= stalling.opens, "{binary} stopped at the refusal, not before the proxy forwarded");
    }
}

/// The same on a Redis Cluster that speaks TLS only, reached through one seed behind the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_refusal_met_after_attempts_that_timed_out_still_stops_either_binary() {
    const PASSWORD: &str = "cluster-password-2";
    let users: Vec<String> = USERS.lines().map(|line| line.replace("CHANGE-ME", PASSWORD)).collect();
    let cluster = TlsCluster::start(&users).await;
    let seed = |user: &str| cluster.urls(user, PASSWORD).split(',').next().expect("a node").to_string();
    let other = env("TLS_OTHER_CA_FILE");
    let why = "the TLS handshake failed (invalid peer certificate: UnknownIssuer): REDIS_CA_FILE";

    let (stalling, proxied) = Stalling::before(&seed("projector"), SILENT).await;
    let topics = Topics::create().await;
    let mut config = runner::config(&topics, &prefix(), &unique("g"));
    (config.redis.url, config.redis.cluster, config.redis.timeout_ms) = (proxied.into(), true, 500);
    config.redis.tls.ca_file = Some(other.clone().into());
    let refused = tokio::time::timeout(Duration::from_secs(30), runner::run(config)).await.expect("no hang");
    let line = refused.expect_err("the projector refuses to start").to_string();
    assert!(line.contains(why) && !line.contains(PASSWORD) && line.lines().count() == 1, "{line}");
    assert!(Instant::now() >= stalling.opens, "the projector stopped at the refusal, once the proxy forwarded");

    let (stalling, proxied) = Stalling::before(&seed("query-api"), SILENT).await;
    let mut config = end_to_end::api::config(&prefix(), &proxied);
    config.redis.cluster = true;
    config.redis.tls.ca_file = Some(other.into());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let run = query_api::run(listener, None, config, std::future::pending());
    let refused = tokio::time::timeout(Duration::from_secs(30), run).await.expect("the API stops at the refusal");
    let line = refused.expect_err("the API refuses to start").to_string();
    assert!(line.contains(why) && !line.contains(PASSWORD) && line.lines().count() == 1, "{line}");
    assert!(Instant::now() >= stalling.opens, "the API stopped at the refusal, once the proxy forwarded");
}
