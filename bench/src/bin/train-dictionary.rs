//! Trains a zstd dictionary of the read model (`shared::codec`) on the records of a read model under a key
//! prefix: every study and interview document (`--kind documents`), or every transcript (`--kind
//! transcripts`). The dictionary's id is set to the one given, so that a record names the dictionary it
//! needs.
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
    #[arg(long, default_value_t = 8 * 1024)]
    size: usize,
    /// What it is trained on.
    #[arg(long, value_enum, default_value_t = Kind::Documents)]
    kind: Kind,
    /// Where to write it.
    #[arg(long)]
    out: std::path::PathBuf,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Kind {
    Documents,
    Transcripts,
}

/// A zstd dictionary's magic number, the 4 bytes before its id.
const MAGIC: [u8; 4] = [0x37, 0xA4, 0x30, 0xEC];

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let client = redis::Client::open(args.redis_url.as_str())?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let (samples, sources) = match args.kind {
        Kind::Documents => documents(&mut conn, &args.prefix).await?,
        Kind::Transcripts => transcripts(&mut conn, &args.prefix).await?,
    };
    ensure!(samples.len() >= 1000, "{} records under {}: too few to train on", samples.len(), args.prefix);
    let mut dictionary = zstd::dict::from_samples(&samples, args.size).context("training")?;
    ensure!(dictionary[..4] == MAGIC, "zstd gave a dictionary without its magic number");
    dictionary[4..8].copy_from_slice(&args.id.to_le_bytes());
    std::fs::write(&args.out, &dictionary)?;
    let raw: usize = samples.iter().map(Vec::len).sum();
    let mut compressor = zstd::bulk::Compressor::with_dictionary(3, &dictionary)?;
    compressor.include_checksum(false)?;
    let packed: usize = samples.iter().map(|s| compressor.compress(s).map(|p| p.len())).sum::<Result<_, _>>()?;
    println!(
        "records={} keys={} raw_bytes_each={} compressed_bytes_each={} dictionary_bytes={}",
        samples.len(),
        sources,
        raw / samples.len(),
        packed / samples.len(),
        dictionary.len()
    );
    Ok(())
}

/// Every key matching `pattern`, sorted.
async fn keys(conn: &mut redis::aio::MultiplexedConnection, pattern: &str) -> Result<Vec<String>> {
    let mut found: Vec<String> = Vec::new();
    let mut iter: redis::AsyncIter<String> = conn.scan_match(pattern).await?;
    while let Some(key) = iter.next_item().await {
        found.push(key?);
    }
    found.sort();
    Ok(found)
}

/// Every study and interview document, as JSON; and how many hashes held them.
async fn documents(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Result<(Vec<Vec<u8>>, usize)> {
    let mut hashes = keys(conn, &format!("{prefix}*:study-docs")).await?;
    hashes.extend(keys(conn, &format!("{prefix}*:interview-docs")).await?);
    hashes.sort();
    let mut samples = Vec::new();
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
    Ok((samples, hashes.len()))
}

/// Every transcript, as WebVTT; and how many there are.
async fn transcripts(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Result<(Vec<Vec<u8>>, usize)> {
    let names = keys(conn, &format!("{prefix}*:transcript:*")).await?;
    let mut samples = Vec::with_capacity(names.len());
    for name in names.chunks(500) {
        let values: Vec<Vec<u8>> = conn.mget(name).await?;
        for value in values {
            samples.push(shared::codec::transcript_owned(value).context("a transcript")?.into_bytes());
        }
    }
    let n = samples.len();
    Ok((samples, n))
}
