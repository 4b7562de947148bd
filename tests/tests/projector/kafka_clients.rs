//! The projector against Kafka as operators run it: TLS configured only by a `client.properties` file
//! (through a TLS terminator in front of the local broker, which has no TLS of its own), a CA that does
//! not verify, topics compressed with zstd, a dead-letter topic nobody created, OIDC and MSK IAM logins.

use std::time::Duration;

use end_to_end::events::{event, Outgoing};
use end_to_end::kafka::{self, Topics};
use end_to_end::{env, runner, unique};
use serde_json::json;
use shared::Topic;

const WAIT: Duration = Duration::from_secs(60);

fn studies(count: usize) -> Vec<Outgoing> {
    (0..count)
        .map(|i| {
            let data = json!({ "internalTitle": format!("Study {i}") });
            event(Topic::Study, "org", &format!("s{i}"), 1, "study.created", "2026-05-01T10:00:00Z", data)
        })
        .collect()
}

/// A `client.properties` file as a managed Kafka hands it out, in a directory of its own.
fn properties_file(lines: &[String]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique("kafka-props"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("client.properties");
    std::fs::write(&path, format!("# written by a test\n{}\n", lines.join("\n"))).unwrap();
    path
}

/// The projector's configuration for `topics`, its brokers and TLS given only by the file at `path`.
fn configured_by_file(topics: &Topics, path: std::path::PathBuf) -> projector::Config {
    let mut config = runner::config(topics, &unique("rm"), &unique("g"));
    config.brokers = None;
    config.kafka.kafka_properties_file = Some(path);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_projector_reads_a_broker_over_tls_configured_only_by_a_client_properties_file() {
    let topics = Topics::create_on(kafka::tls_client(), kafka::PARTITIONS, true).await;
    let messages = studies(12);
    kafka::publish(&kafka::producer_on(kafka::tls_client()), &topics, &messages).await;
    let path = properties_file(&[
        format!("bootstrap.servers={}", env("KAFKA_TLS_BROKERS")),
        "security.protocol=SSL".into(),
        format!("ssl.ca.location={}", env("TLS_CA_FILE")),
        "client.dns.lookup=use_all_dns_ips".into(),
    ]);
    let running = runner::spawn(configured_by_file(&topics, path)).await;
    running.wait_until_consumed(messages.len() as u64, WAIT).await;
    assert_eq!(running.snapshot().applied, messages.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_that_does_not_verify_the_brokers_fails_the_start_with_one_line_that_says_so() {
    let topics = Topics::create_on(kafka::tls_client(), 1, true).await;
    let path = properties_file(&[
        format!("bootstrap.servers={}", env("KAFKA_TLS_BROKERS")),
        "security.protocol=SSL".into(),
        format!("ssl.ca.location={}", env("TLS_OTHER_CA_FILE")),
    ]);
    let mut args = runner::args(&topics, &unique("rm"), &unique("g"));
    let at = args.iter().position(|a| a == "--brokers").unwrap();
    args.drain(at..at + 2);
    let mut command = std::process::Command::new(runner::binary());
    command.args(&args).env_remove("KAFKA_BROKERS").env("KAFKA_PROPERTIES_FILE", &path).env("RUST_LOG", "error");
    // As a deployment runs it: without a backtrace after the line.
    command.env("RUST_BACKTRACE", "0").env("RUST_LIB_BACKTRACE", "0");
    let output = tokio::task::spawn_blocking(move || runner::output_within(command, WAIT)).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the projector started with a CA that signed nothing: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line, not a log of retries: {stderr}");
    assert!(lines[0].contains(&env("KAFKA_TLS_BROKERS")), "{stderr}");
    assert!(lines[0].contains("certificate verify failed"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_compressed_with_zstd_is_projected() {
    let topics = Topics::create().await;
    let mut settings = kafka::client();
    settings.set("compression.type", "zstd");
    let messages = studies(30);
    kafka::publish(&kafka::producer_on(settings), &topics, &messages).await;
    let running = runner::spawn_caught_up(&topics, messages.len() as u64, WAIT).await;
    assert_eq!(running.snapshot().applied, messages.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_dead_letter_topic_fails_the_start_and_is_named() {
    let topics = Topics::create_on(kafka::client(), 1, false).await;
    let config = runner::config(&topics, &unique("rm"), &unique("g"));
    let error = tokio::time::timeout(WAIT, runner::run(config)).await.expect("the start ends").unwrap_err();
    let message = error.to_string();
    for topic in Topic::ALL {
        assert!(message.contains(&format!("{}.dlq", topics.name(topic))), "{message}");
    }
    assert!(!message.contains(&format!("{},", topics.study)), "the source topics exist: {message}");
}

/// A token endpoint of an OAuth/OIDC provider: answers every request with a bearer token (a JWT that
/// librdkafka reads, not checks) and keeps what it was asked.
async fn token_endpoint() -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/oauth2/token", listener.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = asked.clone();
    tokio::spawn(async move {
        let b64 = |json: &str| {
            use base64::Engine;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
        };
        let expires = chrono::Utc::now().timestamp() + 3600;
        let claims = format!(r#"{{"sub":"projector","iat":{},"exp":{expires}}}"#, expires - 3600);
        let jwt = format!("{}.{}.{}", b64(r#"{"alg":"RS256","typ":"JWT"}"#), b64(&claims), b64("signature"));
        let body = format!(r#"{{"access_token":"{jwt}","token_type":"Bearer","expires_in":3600}}"#);
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = vec![0; 16 * 1024];
            let n = socket.read(&mut request).await.unwrap_or(0);
            kept.lock().unwrap().push(String::from_utf8_lossy(&request[..n]).into_owned());
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    (url, asked)
}

/// Confluent Cloud and Azure Event Hubs offer OAuth/OIDC: with `sasl.oauthbearer.method=oidc` the
/// projector's Kafka clients fetch their token from the provider's endpoint with the client credentials
/// the properties give (librdkafka's OIDC method, which needs it built with libcurl). The local broker
/// has no SASL of its own, so what is checked is the provider being asked as OAuth says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_oidc_method_the_projector_asks_the_providers_token_endpoint_with_its_client_credentials() {
    let topics = Topics::create_on(kafka::client(), 1, true).await;
    let (endpoint, asked) = token_endpoint().await;
    let mut command = std::process::Command::new(runner::binary());
    command.args(runner::args(&topics, &unique("rm"), &unique("g"))).env("RUST_LOG", "error");
    for (name, value) in [
        ("SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
        ("SASL_MECHANISM", "OAUTHBEARER"),
        ("SASL_OAUTHBEARER_METHOD", "oidc"),
        ("SASL_OAUTHBEARER_CLIENT_ID", "projector-client"),
        ("SASL_OAUTHBEARER_CLIENT_SECRET", "projector-secret"),
        ("SASL_OAUTHBEARER_SCOPE", "kafka"),
        ("SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL", endpoint.as_str()),
    ] {
        command.env(format!("KAFKA_PROPERTY_{name}"), value);
    }
    let log = std::env::temp_dir().join(format!("{}.log", unique("oidc")));
    command.stderr(std::fs::File::create(&log).unwrap());
    let _projector = runner::KillOnDrop(command.spawn().expect("projector starts"));
    let request = end_to_end::eventually(WAIT, "the token endpoint to be asked", || async {
        let first = asked.lock().unwrap().first().cloned();
        first.or_else(|| {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(!log.contains("libcurl"), "the projector cannot use the OIDC method: {log}");
            None
        })
    })
    .await;
    let basic = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode("projector-client:projector-secret")
    };
    let lower = request.to_lowercase();
    assert!(request.starts_with("POST /oauth2/token "), "{request}");
    assert!(lower.contains(&format!("authorization: basic {}", basic.to_lowercase())), "{request}");
    assert!(request.contains("grant_type=client_credentials"), "{request}");
    assert!(request.contains("scope=kafka"), "{request}");
}

/// MSK and MSK Serverless take IAM: with `KAFKA_AUTH=aws-msk-iam` the projector logs in with a token
/// signed with the credentials of the AWS SDK's default chain (here the environment's, the first of the
/// chain) for the region of `AWS_REGION`. No MSK runs here: a SASL login of the test's own takes the
/// token, and a SigV4 verifier of its own checks it against the secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_msk_iam_the_projector_logs_in_with_a_token_signed_with_the_credentials_of_the_aws_chain() {
    let topics = Topics::create_on(kafka::client(), 1, true).await;
    let (sender, mut tokens) = tokio::sync::mpsc::unbounded_channel();
    let login = projector::testing::sasl_login(sender).await;
    let mut args = runner::args(&topics, &unique("rm"), &unique("g"));
    let brokers = args.iter().position(|a| a == "--brokers").unwrap() + 1;
    args[brokers] = login;
    let mut command = std::process::Command::new(runner::binary());
    command.args(args).env("RUST_LOG", "error");
    let nowhere = std::env::temp_dir().join(unique("no-aws-config"));
    command
        .env("KAFKA_AUTH", "aws-msk-iam")
        .env("KAFKA_PROPERTY_SECURITY_PROTOCOL", "SASL_PLAINTEXT")
        .env("AWS_ACCESS_KEY_ID", "AKIDPROJECTOR")
        .env("AWS_SECRET_ACCESS_KEY", "projector/secret+key")
        .env("AWS_SESSION_TOKEN", "projector-session")
        .env("AWS_REGION", "eu-north-1")
        .env("AWS_CONFIG_FILE", &nowhere)
        .env("AWS_SHARED_CREDENTIALS_FILE", &nowhere)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("KAFKA_AWS_REGION");
    let _projector = runner::KillOnDrop(command.spawn().expect("projector starts"));
    // The start's check of the brokers gives up after 15 s, and reads librdkafka's events then: a token
    // asked for only at that moment would come too late to start.
    let token = tokio::time::timeout(Duration::from_secs(10), tokens.recv())
        .await
        .expect("a token while the start's check of the brokers still waits")
        .unwrap();
    let signed = projector::testing::verified(&token, "eu-north-1", "projector/secret+key");
    assert_eq!(signed["Action"], "kafka-cluster:Connect");
    assert!(signed["X-Amz-Credential"].starts_with("AKIDPROJECTOR/"), "{signed:?}");
    assert!(signed["X-Amz-Credential"].contains("/eu-north-1/kafka-cluster/"), "{signed:?}");
    assert_eq!(signed["X-Amz-Security-Token"], "projector-session");
}
