//! MSK IAM tokens: checked by a SigV4 verifier of the tests' own (`crate::testing`, not the signer's
//! code), and sent by every kind of client the projector makes to a broker's SASL login.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::{future, ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use base64::Engine;
use clap::Parser;
use rdkafka::consumer::Consumer;
use rdkafka::producer::Producer;
use tokio::sync::mpsc;

use super::*;
use crate::config::Config;
use crate::source::{consumer, Properties};
use crate::testing::{sasl_login, verified};

/// Credentials that rotate at every ask, as a role's do between renewals: `AKID<n>`, `SECRET<n>`.
#[derive(Debug, Default)]
struct Rotating(AtomicUsize);

impl ProvideCredentials for Rotating {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        let n = self.0.fetch_add(1, Ordering::SeqCst);
        future::ProvideCredentials::ready(Ok(Credentials::new(
            format!("AKID{n}"),
            format!("SECRET{n}"),
            Some(format!("SESSION{n}")),
            None,
            "rotating",
        )))
    }
}

#[tokio::test]
async fn a_token_is_a_kafka_cluster_connect_request_signed_with_the_credentials_and_valid_15_minutes() {
    let iam = MskIam::with_credentials("eu-west-1", SharedCredentialsProvider::new(Rotating::default()));
    let before = chrono::Utc::now().timestamp_millis();
    let token = iam.token().await.unwrap();
    let params = verified(&token.token, "eu-west-1", "SECRET0");
    assert_eq!(params["Action"], "kafka-cluster:Connect");
    assert_eq!(params["X-Amz-Algorithm"], "AWS4-HMAC-SHA256");
    assert!(params["X-Amz-Credential"].starts_with("AKID0/"), "{}", params["X-Amz-Credential"]);
    assert_eq!(params["X-Amz-Security-Token"], "SESSION0", "a role's session token travels with it");
    assert_eq!(params["X-Amz-Expires"], "900");
    let signed_at = chrono::NaiveDateTime::parse_from_str(&params["X-Amz-Date"], "%Y%m%dT%H%M%SZ").unwrap();
    assert_eq!(token.lifetime_ms, signed_at.and_utc().timestamp_millis() + 900_000, "librdkafka's expiry");
    assert!(token.lifetime_ms > before + 890_000, "librdkafka asks again at 80% of it: 12 minutes on");
}

#[tokio::test]
async fn each_token_is_signed_with_the_credentials_of_its_moment_so_rotated_keys_are_taken() {
    let iam = MskIam::with_credentials("us-east-2", SharedCredentialsProvider::new(Rotating::default()));
    let first = iam.token().await.unwrap();
    let second = iam.token().await.unwrap();
    assert!(verified(&first.token, "us-east-2", "SECRET0")["X-Amz-Credential"].starts_with("AKID0/"));
    assert!(verified(&second.token, "us-east-2", "SECRET1")["X-Amz-Credential"].starts_with("AKID1/"));
}

#[test]
fn without_msk_iam_a_request_for_a_token_says_what_to_configure() {
    let err = Auth::default().oauth_token().err().expect("no token").to_string();
    assert!(err.contains("KAFKA_AUTH=aws-msk-iam") && err.contains("oidc"), "{err}");
}

/// A projector configuration with MSK IAM (as `KAFKA_AUTH=aws-msk-iam` selects it) against `brokers`,
/// in plain text, signing with `iam`.
fn configured(brokers: &str, iam: Arc<MskIam>) -> Config {
    let mut config = Config::parse_from(["projector", "--brokers", brokers, "--kafka-auth", "aws-msk-iam"]);
    let env = [("KAFKA_PROPERTY_SECURITY_PROTOCOL".to_string(), "SASL_PLAINTEXT".to_string())];
    config.kafka_properties = Some(Properties::load(&config.kafka, env).unwrap().with_iam(iam));
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_client_the_projector_makes_logs_in_with_a_signed_msk_iam_token() {
    let (sender, mut tokens) = mpsc::unbounded_channel();
    let brokers = sasl_login(sender).await;
    let config = configured(
        &brokers,
        MskIam::with_credentials("eu-west-1", SharedCredentialsProvider::new(Rotating::default())),
    );
    let metrics = Arc::new(crate::observe::Metrics::new(["s", "i", "k"].map(String::from)));
    let mut next = async |kind: &str| {
        let token = tokio::time::timeout(Duration::from_secs(20), tokens.recv())
            .await
            .unwrap_or_else(|_| panic!("the {kind} sent no token"))
            .unwrap();
        let params = verified(&token, "eu-west-1", &format!("SECRET{}", key_number(&token)));
        assert_eq!(params["Action"], "kafka-cluster:Connect", "the {kind}'s token");
        while tokens.try_recv().is_ok() {}
    };
    let inspector = tokio::task::block_in_place(|| consumer::inspector(&config, "g")).unwrap();
    tokio::task::block_in_place(|| ask(inspector.client()));
    next("inspector").await;
    drop(inspector);
    let end_reader = tokio::task::block_in_place(|| consumer::end_reader(&config)).unwrap();
    tokio::task::block_in_place(|| ask(end_reader.client()));
    next("end reader").await;
    drop(end_reader);
    let producer = consumer::producer(&config).unwrap();
    tokio::task::block_in_place(|| ask(producer.client()));
    next("dead-letter producer").await;
    drop(producer);
    let live = consumer::consumer(&config, metrics).unwrap();
    tokio::task::block_in_place(|| ask(live.client()));
    next("live consumer").await;
}

/// Makes `client` ask a broker for metadata (and so log in), not waiting for the answer long.
fn ask<C: rdkafka::ClientContext>(client: &rdkafka::client::Client<C>) {
    let _ = client.fetch_metadata(None, Duration::from_millis(300));
}

/// The number of the rotating key a token names (`AKID<n>/...`), whose secret must verify it.
fn key_number(token: &str) -> String {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).unwrap();
    let url = String::from_utf8(url).unwrap();
    let credential = url.split("X-Amz-Credential=AKID").nth(1).unwrap();
    credential.chars().take_while(char::is_ascii_digit).collect()
}

/// Credentials that take a while, as STS (web identity) or the instance's metadata service do: they wait
/// on a timer, which needs a runtime that is driven.
#[derive(Debug)]
struct Slow;

impl ProvideCredentials for Slow {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Ok(Credentials::new("AKIDSLOW", "SECRETSLOW", None, None, "slow"))
        })
    }
}

#[test]
fn a_token_asked_for_on_the_only_worker_of_a_runtime_is_made_without_it() {
    // A CPU limit of 1: one worker, which librdkafka's callback blocks when a poll runs on it.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let iam = runtime.block_on(async { MskIam::with_credentials("eu-west-1", SharedCredentialsProvider::new(Slow)) });
    let (sent, made) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let _ = sent.send(Auth(Some(iam)).oauth_token().map(|t| t.token).map_err(|e| e.to_string()));
    });
    let made = made.recv_timeout(Duration::from_secs(30));
    // Not waiting for a worker that may hang.
    runtime.shutdown_background();
    let token = made.expect("a token within 30 s, not a hung worker").expect("a token");
    assert!(verified(&token, "eu-west-1", "SECRETSLOW")["X-Amz-Credential"].starts_with("AKIDSLOW/"));
}
