//! MSK IAM tokens: checked by a SigV4 verifier of the tests' own (not the signer's code), and sent by
//! every kind of client the projector makes to a broker's SASL login.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::{future, ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use base64::Engine;
use clap::Parser;
use hmac::{Hmac, Mac};
use rdkafka::consumer::Consumer;
use rdkafka::producer::Producer;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::*;
use crate::config::Config;
use crate::source::{consumer, Properties};

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

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// RFC 3986 percent-encoding, as SigV4's canonical query string wants it.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A token as MSK reads it: the base64url (unpadded) of a presigned `GET https://kafka.<region>.amazonaws.com/`.
/// Returns its query parameters once its signature verifies with `secret`.
fn verified(token: &str, region: &str, secret: &str) -> BTreeMap<String, String> {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).expect("base64url without padding");
    let url = String::from_utf8(url).unwrap();
    let host = format!("kafka.{region}.amazonaws.com");
    let query = url.strip_prefix(&format!("https://{host}/?")).unwrap_or_else(|| panic!("not an MSK URL: {url}"));
    let params: BTreeMap<String, String> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    // The signature covers every parameter but itself and the user agent added after signing.
    let canonical_query: Vec<String> = params
        .iter()
        .filter(|(k, _)| *k != "X-Amz-Signature" && *k != "User-Agent")
        .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
        .collect();
    let canonical =
        format!("GET\n/\n{}\nhost:{host}\n\nhost\n{}", canonical_query.join("&"), hex::encode(Sha256::digest(b"")));
    let amz_date = &params["X-Amz-Date"];
    let scope = format!("{}/{region}/kafka-cluster/aws4_request", &amz_date[..8]);
    let to_sign =
        format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex::encode(Sha256::digest(canonical.as_bytes())));
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), &amz_date[..8]);
    for part in [region, "kafka-cluster", "aws4_request"] {
        key = hmac(&key, part);
    }
    assert_eq!(hex::encode(hmac(&key, &to_sign)), params["X-Amz-Signature"], "the signature of {url}");
    params
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
    assert!(verified(&token.token, "eu-west-1", "SECRET0").len() >= 8);
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

/// A broker's SASL login, as far as a client's first message: it answers ApiVersions (version 3) with
/// ApiVersions, SaslHandshake and SaslAuthenticate, offers OAUTHBEARER on SaslHandshake, and hands over
/// the token of SaslAuthenticate's client message (`n,,\x01auth=Bearer <token>\x01\x01`), then hangs up.
async fn sasl_login(tokens: mpsc::UnboundedSender<String>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let tokens = tokens.clone();
            tokio::spawn(async move {
                loop {
                    let Ok(size) = socket.read_i32().await else { return };
                    let mut frame = vec![0; size.max(0) as usize];
                    if frame.len() < 8 || socket.read_exact(&mut frame).await.is_err() {
                        return;
                    }
                    let mut answer = frame[4..8].to_vec(); // the correlation id
                    match frame[..2] {
                        [0, 18] => {
                            answer.extend([0, 0, 4]); // no error; three keys (compact array)
                            for (key, max) in [(18u8, 3u8), (17, 1), (36, 0)] {
                                answer.extend([0, key, 0, 0, 0, max, 0]);
                            }
                            answer.extend([0, 0, 0, 0, 0]); // no throttle, no tagged fields
                        }
                        [0, 17] => {
                            let mechanism = b"OAUTHBEARER";
                            answer.extend([0, 0, 0, 0, 0, 1, 0, mechanism.len() as u8]);
                            answer.extend(mechanism);
                        }
                        [0, 36] => {
                            let prefix = b"n,,\x01auth=Bearer ";
                            let Some(at) = frame.windows(prefix.len()).position(|w| w == prefix) else { return };
                            let token = String::from_utf8_lossy(&frame[at + prefix.len()..]);
                            let _ = tokens.send(token.trim_end_matches('\x01').to_string());
                            return;
                        }
                        _ => return,
                    }
                    let mut out = (answer.len() as i32).to_be_bytes().to_vec();
                    out.extend(answer);
                    if socket.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    address
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
        let params = verified(&token, "eu-west-1", &format!("SECRET{}", &verified_key(&token)));
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

/// The number of the rotating key a token was signed with (`AKID<n>/...`).
fn verified_key(token: &str) -> String {
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).unwrap();
    let url = String::from_utf8(url).unwrap();
    let credential = url.split("X-Amz-Credential=AKID").nth(1).unwrap();
    credential.chars().take_while(char::is_ascii_digit).collect()
}
