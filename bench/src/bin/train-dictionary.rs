//! Trains the zstd dictionary the read model's documents are compressed with (`shared::codec`) on the
//! documents of a read model: every study and interview document under a key prefix. The dictionary's id
//! is set to the one given, so that a record names the dictionary it needs.
//!
//! `scripts/train-dictionary` runs it on a read model built from the benchmark's stream with another seed
//! than the benchmarks replay, so that the figures are not measured on the records trained on.

use anyhow::{ensure, Context, Result};
use clap::Parser;
use redis::AsyncCommands;

#[derive(Parser)]
#[command(about = "Trains a zstd dictionary on a read model's documents and writes it to a file.")]
struct Args {
    /// The read model's Redis (one server).
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: String,
    /// The read model's key prefix.
    #[arg(long)]
    prefix: String,
    /// The dictionary's id, written into its header and into every frame compressed with it.
    #[arg(long)]
    id: u32,
    /// The dictionary's size in bytes.
    #[arg(long, default_value_t = 16 * 1024)]
    size: usize,
    /// Where to write it.
    #[arg(long)]
    out: std::path::PathBuf,
}

/// A zstd dictionary's magic number, the 4 bytes before its id.
const MAGIC: [u8; 4] = [0x37, 0xA4, 0x30, 0xEC];

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let client = redis::Client::open(args.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let mut hashes: Vec<String> = Vec::new();
    for pattern in [format!("{}*:study-docs", args.prefix), format!("{}*:interview-docs", args.prefix)] {
        let mut iter: redis::AsyncIter<String> = conn.scan_match(&pattern).await?;
        while let Some(key) = iter.next_item().await {
            hashes.push(key?);
        }
    }
    hashes.sort();
    let mut samples: Vec<Vec<u8>> = Vec::new();
    for hash in &hashes {
        // Sorted: Redis returns a hash's fields in an order of its own (its hash seed is per process), and
        // the same samples in the same order make the same dictionary.
        let mut fields: Vec<(String, Vec<u8>)> = conn.hgetall(hash).await?;
        fields.sort();
        for (id, value) in fields {
            // A read model of layout 5 holds them compressed with the dictionary shipped now.
            let json = shared::codec::document_owned(value).with_context(|| format!("document {id} of {hash}"))?;
            samples.push(json.into_bytes());
        }
    }
    ensure!(samples.len() >= 1000, "{} documents under {}: too few to train on", samples.len(), args.prefix);
    let mut dictionary = zstd::dict::from_samples(&samples, args.size).context("training")?;
    ensure!(dictionary[..4] == MAGIC, "zstd gave a dictionary without its magic number");
    dictionary[4..8].copy_from_slice(&args.id.to_le_bytes());
    std::fs::write(&args.out, &dictionary)?;
    let raw: usize = samples.iter().map(Vec::len).sum();
    let mut compressor = zstd::bulk::Compressor::with_dictionary(3, &dictionary)?;
    compressor.include_checksum(false)?;
    let packed: usize = samples.iter().map(|s| compressor.compress(s).map(|p| p.len())).sum::<Result<_, _>>()?;
    println!(
        "documents={} hashes={} raw_bytes_each={} compressed_bytes_each={} dictionary_bytes={}",
        samples.len(),
        hashes.len(),
        raw / samples.len(),
        packed / samples.len(),
        dictionary.len()
    );
    Ok(())
}
