use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;

use super::*;

/// The percent-encoding of `value`, as a string of its own.
fn encode(value: &str, slash: bool) -> String {
    let mut out = String::new();
    super::encode(&mut out, value, slash);
    out
}

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

fn keys(token: Option<&str>) -> Keys {
    Keys {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: SECRET.into(),
        session_token: token.map(String::from),
    }
}

/// The same link as aws-sigv4 signs it, the way aws-sdk-s3 configures it for presigned S3 requests.
fn reference(endpoint: &Endpoint, keys: &Keys, at: SystemTime, path_and_host: (&str, &str)) -> String {
    let (path, host) = path_and_host;
    let identity =
        Credentials::new(&keys.access_key_id, &keys.secret_access_key, keys.session_token.clone(), None, "test").into();
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(Duration::from_secs(900));
    settings.percent_encoding_mode = PercentEncodingMode::Single;
    settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&endpoint.region)
        .name("s3")
        .time(at)
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let uri = format!("{}://{host}{path}", endpoint.scheme);
    let request =
        SignableRequest::new("GET", &uri, [("host", host)].into_iter(), SignableBody::UnsignedPayload).unwrap();
    let (instructions, _) = sign(request, &params).unwrap().into_parts();
    let mut signed = axum::http::Request::builder().uri(&uri).body(()).unwrap();
    instructions.apply_to_request_http1x(&mut signed);
    signed.uri().to_string()
}

fn at(unix: u64) -> (SystemTime, String, String) {
    let time = UNIX_EPOCH + Duration::from_secs(unix);
    let date = chrono::DateTime::from_timestamp(unix as i64, 0).unwrap();
    (time, date.format("%Y%m%dT%H%M%SZ").to_string(), date.format("%Y%m%d").to_string())
}

#[test]
fn a_link_is_byte_identical_to_aws_sigv4s() {
    let cases = [
        ("http://127.0.0.1:19000", true, None, "videos", "interviews/i1.mp4"),
        ("https://s3.eu-west-1.amazonaws.com", false, None, "my-bucket", "a b/ü+&=?#.mp4"),
        ("https://minio.example:443/", true, Some("FwoGZXIvYXdzE+/token=="), "b", "k~._-/x%y"),
    ];
    for (url, path_style, token, bucket, key) in cases {
        let endpoint = Endpoint::parse(url, "eu-west-1", path_style).unwrap();
        let keys = keys(token);
        let (time, amz_date, date) = at(1_795_305_000);
        let signing_key = SigningKey::derive(&keys.secret_access_key, &date, &endpoint.region);
        let ours = presign(&endpoint, &keys, &signing_key, &amz_date, 900, bucket, key);
        let (host, path) = if path_style {
            (endpoint.authority.clone(), format!("/{}/{}", encode(bucket, true), encode(key, false)))
        } else {
            (format!("{bucket}.{}", endpoint.authority), format!("/{}", encode(key, false)))
        };
        assert_eq!(ours, reference(&endpoint, &keys, time, (&path, &host)), "{url} {key}");
    }
}

#[test]
fn keys_are_encoded_once_with_slashes_kept() {
    assert_eq!(encode("a b/ü+&=?#.mp4", false), "a%20b/%C3%BC%2B%26%3D%3F%23.mp4");
    assert_eq!(
        encode("AKID/20261122/us-east-1/s3/aws4_request", true),
        "AKID%2F20261122%2Fus-east-1%2Fs3%2Faws4_request"
    );
    assert_eq!(encode("k~._-", false), "k~._-");
}

#[test]
fn endpoints_drop_default_ports_and_refuse_what_is_not_a_base_url() {
    assert_eq!(Endpoint::parse("https://s3.example:443", "r", true).unwrap().authority, "s3.example");
    assert_eq!(Endpoint::parse("http://s3.example:80/", "r", true).unwrap().authority, "s3.example");
    assert_eq!(Endpoint::parse("http://127.0.0.1:9000", "r", true).unwrap().authority, "127.0.0.1:9000");
    assert!(Endpoint::parse("ftp://x", "r", true).is_none());
    assert!(Endpoint::parse("http://x/path", "r", true).is_none());
    assert!(Endpoint::parse("x:9000", "r", true).is_none());
}

#[tokio::test]
async fn keys_are_encoded_as_aws_sdk_s3_encodes_them() {
    let credentials = Credentials::new("AKIDEXAMPLE", SECRET, None, None, "test");
    let config = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(credentials)
        .endpoint_url("http://127.0.0.1:9000")
        .force_path_style(true)
        .build();
    let client = aws_sdk_s3::Client::from_conf(config);
    let presigning = aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_secs(900)).unwrap();
    for key in ["a b/ü+&=?#.mp4", "k~._-/x%y", "dir//double/", "emoji 🎥.mp4", "semi;colon,comma'quote(paren)*!$@"] {
        let sdk = client.get_object().bucket("videos").key(key).presigned(presigning.clone()).await.unwrap();
        let path = sdk.uri().split('?').next().unwrap().trim_start_matches("http://127.0.0.1:9000");
        assert_eq!(path, format!("/videos/{}", encode(key, false)), "{key}");
    }
}

#[test]
fn the_links_of_one_signer_are_those_signed_one_by_one() {
    for (url, path_style, token) in
        [("http://127.0.0.1:19000", true, None), ("https://s3.example", false, Some("t/+="))]
    {
        let endpoint = Endpoint::parse(url, "us-east-1", path_style).unwrap();
        let keys = keys(token);
        let (_, amz_date, date) = at(1_795_305_000);
        let signing_key = SigningKey::derive(&keys.secret_access_key, &date, &endpoint.region);
        let signer = Signer::new(&endpoint, &keys, &signing_key, &amz_date, 600);
        for (bucket, key) in [("videos", "a.mp4"), ("other-bucket", "b/ü c.mp4"), ("videos", "a.mp4")] {
            assert_eq!(signer.link(bucket, key), presign(&endpoint, &keys, &signing_key, &amz_date, 600, bucket, key));
        }
    }
}
