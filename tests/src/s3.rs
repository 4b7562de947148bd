//! The stack's S3 server, as the main product would use it to store videos.

use aws_sdk_s3::primitives::ByteStream;

use crate::env;

pub async fn client() -> aws_sdk_s3::Client {
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(env("AWS_REGION")))
        .load()
        .await;
    let config = aws_sdk_s3::config::Builder::from(&shared).endpoint_url(env("S3_ENDPOINT")).force_path_style(true);
    aws_sdk_s3::Client::from_conf(config.build())
}

/// Stores `bytes` at `key` in the stack's video bucket.
pub async fn put(key: &str, bytes: Vec<u8>) {
    client()
        .await
        .put_object()
        .bucket(env("S3_BUCKET"))
        .key(key)
        .body(ByteStream::from(bytes))
        .send()
        .await
        .expect("object stored");
}
