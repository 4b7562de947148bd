//! One presigned video link, as the API makes it, against the two ways the AWS crates make it.
//!
//! `cargo bench -p query-api --bench presign`

use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use criterion::{criterion_group, criterion_main, Criterion};
use query_api::sigv4::{presign, Endpoint, Keys, Signer, SigningKey};

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const KEY: &str = "interviews/int_acme_01_01.mp4";

fn links(c: &mut Criterion) {
    let endpoint = Endpoint::parse("http://127.0.0.1:19000", "us-east-1", true).unwrap();
    let keys = Keys { access_key_id: "AKIDEXAMPLE".into(), secret_access_key: SECRET.into(), session_token: None };
    let signing_key = SigningKey::derive(SECRET, "20261122", "us-east-1");
    let mut group = c.benchmark_group("presign one link");
    group.bench_function("query-api (cached signing key)", |b| {
        b.iter(|| presign(&endpoint, &keys, &signing_key, "20261122T010203Z", 900, "videos", KEY))
    });
    // What each link of a page costs: the request's signer is made once for all of them.
    let signer = Signer::new(&endpoint, &keys, &signing_key, "20261122T010203Z", 900);
    group.bench_function("query-api, one link of a page (the request's signer made once)", |b| {
        b.iter(|| signer.link("videos", KEY))
    });

    let identity = Credentials::new("AKIDEXAMPLE", SECRET, None, None, "bench").into();
    group.bench_function("aws-sigv4", |b| {
        b.iter(|| {
            let mut settings = SigningSettings::default();
            settings.signature_location = SignatureLocation::QueryParams;
            settings.expires_in = Some(Duration::from_secs(900));
            settings.percent_encoding_mode = PercentEncodingMode::Single;
            settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
            let params = v4::SigningParams::builder()
                .identity(&identity)
                .region("us-east-1")
                .name("s3")
                .time(SystemTime::now())
                .settings(settings)
                .build()
                .unwrap()
                .into();
            let uri = format!("http://127.0.0.1:19000/videos/{KEY}");
            let request = SignableRequest::new(
                "GET",
                &uri,
                [("host", "127.0.0.1:19000")].into_iter(),
                SignableBody::UnsignedPayload,
            )
            .unwrap();
            let (instructions, _) = sign(request, &params).unwrap().into_parts();
            let mut signed = axum::http::Request::builder().uri(&uri).body(()).unwrap();
            instructions.apply_to_request_http1x(&mut signed);
            signed.uri().to_string()
        })
    });

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = aws_sdk_s3::Config::builder()
        .behavior_version_latest()
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .credentials_provider(Credentials::new("AKIDEXAMPLE", SECRET, None, None, "bench"))
        .endpoint_url("http://127.0.0.1:19000")
        .force_path_style(true)
        .build();
    let client = aws_sdk_s3::Client::from_conf(config);
    let presigning = aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_secs(900)).unwrap();
    group.bench_function("aws-sdk-s3 presigned()", |b| {
        b.to_async(&runtime).iter(|| async {
            let request = client.get_object().bucket("videos").key(KEY).presigned(presigning.clone()).await;
            request.unwrap().uri().to_string()
        })
    });
    group.finish();
}

criterion_group!(benches, links);
criterion_main!(benches);
