//! Redis memory of one read model (a key prefix's active generation), by kind of key, per completed study
//! and per served interview; and the interviews not served (not completed, or hidden) apart: what each
//! costs of its own (its state and transcript), and what the served ones cost besides what they share.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use anyhow::{Context, Result};
use benchmarks::compression::{self, Served};
use benchmarks::report::Line;
use clap::Parser;
use redis::AsyncCommands;
use shared::codec::StoredDocument;

#[derive(Parser)]
#[command(about = "Sums MEMORY USAGE over a read model's keys and divides by what it serves.")]
struct Args {
    /// The read model's Redis.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: String,
    /// The read model's key prefix.
    #[arg(long)]
    prefix: String,
    /// Also measure what other layouts would cost for the same records (`layout-candidates.lua`: one
    /// script over the whole generation, one Redis only).
    #[arg(long)]
    candidates: bool,
    /// Also measure what compressing the served interviews' transcripts and documents would take
    /// (`benchmarks::compression`: codecs, their decompression time, the transcripts written compressed
    /// beside the read model as strings and as fields of a hash per organization; one Redis only).
    #[arg(long)]
    compression: bool,
}

/// Writes each candidate layout beside the read model, measures it and deletes it.
const CANDIDATES: &str = include_str!("../layout-candidates.lua");

/// Which record a key is there for, from its name (see `shared::keys`).
fn kind(key: &str) -> &'static str {
    let tail = key.rsplit_once('}').map_or(key, |(_, tail)| tail);
    if key.contains(":owner:study:")
        || key.contains(":owners:study:")
        || tail.starts_with(":study:")
        || tail == ":studies"
        || tail == ":study-docs"
    {
        "study"
    } else if key.contains(":owner:interview:")
        || key.contains(":owners:interview:")
        || tail.starts_with(":interview:")
        || tail.starts_with(":interviews:")
        || tail == ":interview-docs"
    {
        "interview"
    } else if tail.starts_with(":transcript:") {
        "transcript"
    } else {
        "other"
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    // The candidates' script scans the whole generation in one call: seconds at a million events.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(600)));
    let mut conn =
        redis::Client::open(args.redis_url.as_str())?.get_multiplexed_async_connection_with_config(&config).await?;
    let generation: u64 =
        conn.get(format!("{}:active-generation", args.prefix)).await.context("the prefix has no read model")?;
    let pattern = format!("{}:g{generation}:*", args.prefix);
    let keys: Vec<String> = {
        let mut iter: redis::AsyncIter<String> = conn.scan_match(&pattern).await?;
        let mut keys = Vec::new();
        while let Some(key) = iter.next_item().await {
            keys.push(key?);
        }
        keys
    };
    let mut bytes: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut studies, mut interviews, mut transcripts, mut transcript_bytes) = (0u64, 0u64, 0u64, 0u64);
    // What is served: each served interview's document and transcript.
    let (mut document_bytes, mut served_transcript_bytes) = (0u64, 0u64);
    let mut served_list = Vec::new();
    // Each interview's own keys (its state and its transcript), by organization and id, to be told apart
    // once every list has been read.
    let mut own: Vec<(String, u64)> = Vec::new();
    for chunk in keys.chunks(1000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0);
        }
        let usage: Vec<Option<u64>> = pipe.query_async(&mut conn).await?;
        for (key, used) in chunk.iter().zip(usage) {
            *bytes.entry(kind(key)).or_default() += used.unwrap_or(0);
            let tail = key.rsplit_once('}').map_or(key.as_str(), |(_, tail)| tail);
            if let Some(id) = tail.strip_prefix(":interview:").or_else(|| tail.strip_prefix(":transcript:")) {
                let base = key.rsplit_once("}:").map_or(key.as_str(), |(base, _)| base);
                own.push((format!("{base}}}:{id}"), used.unwrap_or(0)));
            }
            if tail == ":studies" {
                studies += conn.zcard::<_, u64>(key).await?;
            } else if tail.starts_with(":interviews:") {
                let served: Vec<String> = conn.zrange(key, 0, -1).await?;
                interviews += served.len() as u64;
                let base = key.rsplit_once("}:").map_or(key.as_str(), |(base, _)| base);
                // One round trip per study; as served: a transcript stored compressed (layout 6) counts
                // its WebVTT's bytes.
                let mut reads = redis::pipe();
                for id in served {
                    reads.get(format!("{base}}}:transcript:{id}"));
                    served_list.push(Served { base: format!("{base}}}"), id });
                }
                let stored: Vec<Option<Vec<u8>>> = reads.query_async(&mut conn).await?;
                for transcript in stored.into_iter().flatten() {
                    served_transcript_bytes += shared::codec::transcript(&transcript)?.len() as u64;
                }
            } else if tail == ":interview-docs" {
                // As served: a document stored compressed (layout 5) counts its JSON's bytes.
                let documents: Vec<StoredDocument> = conn.hvals(key).await?;
                document_bytes += documents.iter().map(|d| d.0.len() as u64).sum::<u64>();
            } else if tail.starts_with(":transcript:") {
                transcripts += 1;
                let stored: Vec<u8> = conn.get(key).await?;
                transcript_bytes += shared::codec::transcript(&stored)?.len() as u64;
            }
        }
    }
    // An interview's own bytes, served or not; what else interviews take (documents, lists, owners) is
    // the served ones' share (documents and lists are theirs alone; owners are kept for every aggregate).
    let served_ids: HashSet<String> = served_list.iter().map(|s| format!("{}:{}", s.base, s.id)).collect();
    let (mut served_own, mut unserved_own) = (0u64, 0u64);
    let mut unserved = HashSet::new();
    for (id, used) in own {
        if served_ids.contains(&id) {
            served_own += used;
        } else {
            unserved_own += used;
            unserved.insert(id);
        }
    }
    let unserved = unserved.len() as u64;
    let per = |total: u64, n: u64| total.checked_div(n).unwrap_or(0);
    let ratio = |a: u64, b: u64| if b == 0 { "0".to_string() } else { format!("{:.2}", a as f64 / b as f64) };
    let get = |k: &str| bytes.get(k).copied().unwrap_or(0);
    let mut line = Line::default();
    if args.candidates {
        let measured: Vec<(String, u64)> = redis::Script::new(CANDIDATES)
            .arg(format!("{}:g{generation}", args.prefix))
            .invoke_async(&mut conn)
            .await
            .context("measuring the candidate layouts")?;
        for (name, bytes) in measured {
            line = line.with(&format!("per_served_{name}"), per(bytes, interviews));
        }
    }
    if args.compression {
        for (name, value) in compression::measure(&mut conn, &served_list).await? {
            line = line.with(&format!("per_served_{name}"), value);
        }
    }
    line.with("keys", keys.len())
        .with("total_bytes", bytes.values().sum::<u64>())
        .with("completed_studies", studies)
        .with("served_interviews", interviews)
        .with("transcripts", transcripts)
        .with("transcript_avg_bytes", per(transcript_bytes, transcripts))
        .with("study_bytes", get("study"))
        .with("interview_bytes", get("interview"))
        .with("transcript_bytes", get("transcript"))
        .with("other_bytes", get("other"))
        .with("bytes_per_study", per(get("study"), studies))
        .with("bytes_per_interview", per(get("interview") + get("transcript"), interviews))
        // The same bytes apart: a served interview's own (state, transcript) and its share of the rest
        // (documents, lists, owners: every interview's bytes but the interviews' own); an interview not
        // served, its own only (its owner is in the share).
        .with("served_own_bytes", per(served_own, interviews))
        .with("served_shared_bytes", per(get("interview") + get("transcript") - served_own - unserved_own, interviews))
        .with("unserved_interviews", unserved)
        .with("bytes_per_unserved_interview", per(unserved_own, unserved))
        .with("unserved_charged_bytes", per(unserved_own, interviews))
        .with("document_avg_bytes", per(document_bytes, interviews))
        .with("served_transcript_avg_bytes", per(served_transcript_bytes, interviews))
        // Redis bytes per served interview over its document and transcript; and every interview's bytes
        // over every document and transcript kept (the transcripts of interviews not served yet included).
        .with("served_ratio", ratio(get("interview") + get("transcript"), document_bytes + served_transcript_bytes))
        .with("kept_ratio", ratio(get("interview") + get("transcript"), document_bytes + transcript_bytes))
        .print();
    Ok(())
}
