//! Publishes a realistic sample dataset (three organizations with studies in every state, interviews,
//! transcripts, facets, videos and API keys) to the broker's topics, uploads the videos to the S3
//! server, and prints the demo API keys on stdout:
//!
//! ```text
//! key org_acme demo-acme-2026-key
//! revoked org_acme demo-acme-2025-key
//! ```
//!
//! The dataset is deterministic: running it again publishes duplicates (same sequences) that the
//! projector ignores, and uploads the same videos again.

use std::process::ExitCode;

use clap::{ArgAction, Parser};
use end_to_end::kafka::{publish, Topics};
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

#[path = "sample_data/content.rs"]
mod content;
#[path = "sample_data/dataset.rs"]
mod dataset;

/// Publishes the sample dataset and uploads its videos; prints `key ORG KEY` and `revoked ORG KEY` lines.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// Kafka bootstrap servers, comma-separated host:port.
    #[arg(long, env = "KAFKA_BROKERS", default_value = "127.0.0.1:19092")]
    brokers: String,
    /// Topic of study events.
    #[arg(long, env = "STUDY_TOPIC", default_value = "study-events")]
    study_topic: String,
    /// Topic of interview events.
    #[arg(long, env = "INTERVIEW_TOPIC", default_value = "interview-events")]
    interview_topic: String,
    /// Topic of organization API-key events.
    #[arg(long, env = "API_KEY_TOPIC", default_value = "api-key-events")]
    api_key_topic: String,
    /// S3-compatible endpoint the videos are uploaded to; AWS's own when unset. Credentials come from the
    /// AWS SDK's chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...).
    #[arg(long, env = "S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// Region of the S3 server.
    #[arg(long, env = "AWS_REGION", default_value = "us-east-1")]
    s3_region: String,
    /// Bucket of the videos (created when missing).
    #[arg(long, env = "S3_BUCKET", default_value = "videos")]
    s3_bucket: String,
    /// Path-style URLs (http://host/bucket/key), as most S3-compatible servers need.
    #[arg(long, env = "S3_FORCE_PATH_STYLE", default_value_t = true, action = ArgAction::Set)]
    s3_force_path_style: bool,
    /// Publish the events only; upload no video.
    #[arg(long)]
    skip_videos: bool,
    /// Print the events (one JSON object a line: topic, key, value) instead of publishing anything.
    #[arg(long)]
    dry_run: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let data = dataset::build(&args.s3_bucket);
    if args.dry_run {
        for m in &data.messages {
            let value: serde_json::Value = serde_json::from_slice(&m.value).expect("JSON");
            println!("{}", serde_json::json!({ "topic": m.topic.default_name(), "key": m.key, "value": value }));
        }
        return ExitCode::SUCCESS;
    }
    if !args.skip_videos {
        if let Err(e) = upload_videos(&args, &data.videos).await {
            eprintln!("sample-data: uploading videos failed: {e:#}");
            return ExitCode::FAILURE;
        }
    }
    let producer: FutureProducer = match ClientConfig::new()
        .set("bootstrap.servers", &args.brokers)
        .set("linger.ms", "5")
        .set("message.timeout.ms", "60000")
        .create()
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("sample-data: cannot create a Kafka producer: {e}");
            return ExitCode::FAILURE;
        }
    };
    let topics = Topics { study: args.study_topic, interview: args.interview_topic, api_key: args.api_key_topic };
    publish(&producer, &topics, &data.messages).await;
    eprintln!(
        "sample-data: published {} events to {}, {}, {}; uploaded {} videos",
        data.messages.len(),
        topics.study,
        topics.interview,
        topics.api_key,
        if args.skip_videos { 0 } else { data.videos.len() }
    );
    for (org, key, live) in &data.keys {
        println!("{} {org} {key}", if *live { "key" } else { "revoked" });
    }
    ExitCode::SUCCESS
}

/// Uploads one small MP4-shaped object per video key, creating the bucket if it is missing.
async fn upload_videos(args: &Args, keys: &[String]) -> anyhow::Result<()> {
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new(args.s3_region.clone()))
        .load()
        .await;
    let mut config = aws_sdk_s3::config::Builder::from(&shared).force_path_style(args.s3_force_path_style);
    if let Some(endpoint) = &args.s3_endpoint {
        config = config.endpoint_url(endpoint);
    }
    let s3 = aws_sdk_s3::Client::from_conf(config.build());
    if s3.head_bucket().bucket(&args.s3_bucket).send().await.is_err() {
        s3.create_bucket().bucket(&args.s3_bucket).send().await?;
    }
    for chunk in keys.chunks(16) {
        let puts = chunk.iter().map(|key| {
            s3.put_object()
                .bucket(&args.s3_bucket)
                .key(key)
                .content_type("video/mp4")
                .body(video_bytes(key).into())
                .send()
        });
        for result in futures::future::join_all(puts).await {
            result?;
        }
    }
    Ok(())
}

/// A few KB shaped like an MP4 file: an `ftyp` box, then a `free` box of deterministic filler.
fn video_bytes(key: &str) -> Vec<u8> {
    let filler = 4096 + key.len() * 16;
    let mut out = Vec::with_capacity(32 + filler);
    out.extend_from_slice(&24u32.to_be_bytes());
    out.extend_from_slice(b"ftypisom");
    out.extend_from_slice(&0x200u32.to_be_bytes());
    out.extend_from_slice(b"isommp41");
    out.extend_from_slice(&((8 + filler) as u32).to_be_bytes());
    out.extend_from_slice(b"free");
    out.extend(key.bytes().cycle().take(filler));
    out
}
