//! What compressing a read model's transcripts and documents would take, measured on a replayed one: the
//! served interviews' transcripts and documents are read back, compressed in the projector's place with
//! each candidate codec (zstd without and with a dictionary trained on the same data, LZ4 with the same
//! dictionary), timed while decompressed as the API would (one call per interview), and written beside the
//! read model in the layouts the codecs allow (a string per transcript, as now; a field of one hash per
//! organization), measured with `MEMORY USAGE` and deleted. One Redis (not a cluster).

use std::time::Instant;

use anyhow::{Context, Result};
use redis::aio::MultiplexedConnection;

/// One served interview: the hash-tagged base of its organization's keys (`P:gN:{org}`) and its id.
pub struct Served {
    pub base: String,
    pub id: String,
}

/// Size of the dictionaries trained (zstd's default).
const DICTIONARY_BYTES: usize = 110 * 1024;
/// How many of the records the dictionaries are trained on (the first ones read).
const TRAINING_SAMPLES: usize = 10_000;

/// A codec: bytes of every record compressed, and nanoseconds per record decompressed.
struct Measured {
    bytes: u64,
    decompress_ns: u64,
}

fn zstd_plain(records: &[Vec<u8>]) -> Result<(Vec<Vec<u8>>, Measured)> {
    let mut compressor = zstd::bulk::Compressor::new(3)?;
    let packed: Vec<Vec<u8>> = records.iter().map(|r| compressor.compress(r)).collect::<Result<_, _>>()?;
    let mut decompressor = zstd::bulk::Decompressor::new()?;
    let started = Instant::now();
    for (p, r) in packed.iter().zip(records) {
        let out = decompressor.decompress(p, r.len())?;
        anyhow::ensure!(out.len() == r.len(), "zstd gave back {} bytes of {}", out.len(), r.len());
    }
    let decompress_ns = started.elapsed().as_nanos() as u64 / records.len().max(1) as u64;
    Ok((packed.clone(), Measured { bytes: packed.iter().map(|p| p.len() as u64).sum(), decompress_ns }))
}

fn zstd_dictionary(records: &[Vec<u8>], dictionary: &[u8]) -> Result<(Vec<Vec<u8>>, Measured)> {
    let mut compressor = zstd::bulk::Compressor::with_dictionary(3, dictionary)?;
    // Without the frame's checksum, content size and dictionary id: what a store that knows them keeps.
    compressor.include_checksum(false)?;
    compressor.include_dictid(false)?;
    let packed: Vec<Vec<u8>> = records.iter().map(|r| compressor.compress(r)).collect::<Result<_, _>>()?;
    let prepared = zstd::dict::DecoderDictionary::copy(dictionary);
    let mut decompressor = zstd::bulk::Decompressor::with_prepared_dictionary(&prepared)?;
    let started = Instant::now();
    for (p, r) in packed.iter().zip(records) {
        let out = decompressor.decompress(p, r.len())?;
        anyhow::ensure!(out == *r, "zstd with a dictionary gave back other bytes");
    }
    let decompress_ns = started.elapsed().as_nanos() as u64 / records.len().max(1) as u64;
    Ok((packed.clone(), Measured { bytes: packed.iter().map(|p| p.len() as u64).sum(), decompress_ns }))
}

fn lz4_dictionary(records: &[Vec<u8>], dictionary: &[u8]) -> Result<Measured> {
    let packed: Vec<Vec<u8>> = records.iter().map(|r| lz4_flex::block::compress_with_dict(r, dictionary)).collect();
    let started = Instant::now();
    for (p, r) in packed.iter().zip(records) {
        let out = lz4_flex::block::decompress_with_dict(p, r.len(), dictionary)?;
        anyhow::ensure!(out == *r, "lz4 gave back other bytes");
    }
    let decompress_ns = started.elapsed().as_nanos() as u64 / records.len().max(1) as u64;
    Ok(Measured { bytes: packed.iter().map(|p| p.len() as u64).sum(), decompress_ns })
}

fn train(records: &[Vec<u8>]) -> Result<Vec<u8>> {
    let samples: Vec<&[u8]> =
        records.iter().filter(|r| !r.is_empty()).take(TRAINING_SAMPLES).map(Vec::as_slice).collect();
    zstd::dict::from_samples(&samples, DICTIONARY_BYTES).context("training a dictionary")
}

/// `MEMORY USAGE` of `values` written as a string each (a name as long as a transcript's), then as a field
/// each of one hash per organization; the keys deleted after.
async fn in_redis(conn: &mut MultiplexedConnection, served: &[Served], values: &[Vec<u8>]) -> Result<(u64, u64)> {
    let (mut strings, mut fields) = (0u64, 0u64);
    let mut hashes = std::collections::BTreeSet::new();
    for (chunk, values) in served.chunks(1000).zip(values.chunks(1000)) {
        let mut pipe = redis::pipe();
        for (s, v) in chunk.iter().zip(values) {
            let twin = format!("{}:transcripz:{}", s.base, s.id);
            pipe.cmd("SET").arg(&twin).arg(v).ignore();
            pipe.cmd("MEMORY").arg("USAGE").arg(&twin).arg("SAMPLES").arg(0);
            pipe.cmd("DEL").arg(&twin).ignore();
            let hash = format!("{}:transcripts", s.base);
            pipe.cmd("HSET").arg(&hash).arg(&s.id).arg(v).ignore();
            hashes.insert(hash);
        }
        let usage: Vec<u64> = pipe.query_async(conn).await?;
        strings += usage.iter().sum::<u64>();
    }
    for hash in hashes {
        let (used,): (u64,) = redis::pipe()
            .cmd("MEMORY")
            .arg("USAGE")
            .arg(&hash)
            .arg("SAMPLES")
            .arg(0)
            .cmd("DEL")
            .arg(&hash)
            .ignore()
            .query_async(conn)
            .await?;
        fields += used;
    }
    Ok((strings, fields))
}

/// Measures every candidate on the served interviews' transcripts and documents; `name=value` pairs, bytes
/// per served interview and nanoseconds per record.
pub async fn measure(conn: &mut MultiplexedConnection, served: &[Served]) -> Result<Vec<(String, u64)>> {
    let (mut transcripts, mut documents) = (Vec::new(), Vec::new());
    for chunk in served.chunks(1000) {
        let mut pipe = redis::pipe();
        for s in chunk {
            pipe.cmd("GET").arg(format!("{}:transcript:{}", s.base, s.id));
            pipe.cmd("HGET").arg(format!("{}:interview-docs", s.base)).arg(&s.id);
        }
        let values: Vec<Option<Vec<u8>>> = pipe.query_async(conn).await?;
        for pair in values.chunks(2) {
            // Each codec is measured on the transcript's WebVTT, however the read model stores it.
            let transcript = pair[0].clone().unwrap_or_default();
            transcripts.push(shared::codec::transcript_owned(transcript)?.into_bytes());
            // Each codec is measured on the document's JSON, however the read model stores it.
            let document = pair[1].clone().unwrap_or_default();
            documents.push(shared::codec::document_owned(document)?.into_bytes());
        }
    }
    let n = served.len().max(1) as u64;
    let mut out = Vec::new();
    for (name, records) in [("transcript", &transcripts), ("document", &documents)] {
        let raw: u64 = records.iter().map(|r| r.len() as u64).sum();
        let (_, plain) = zstd_plain(records)?;
        let dictionary = train(records)?;
        let (packed, with_dictionary) = zstd_dictionary(records, &dictionary)?;
        let lz4 = lz4_dictionary(records, &dictionary)?;
        out.push((format!("{name}_raw"), raw / n));
        out.push((format!("{name}_zstd"), plain.bytes / n));
        out.push((format!("{name}_zstd_ns"), plain.decompress_ns));
        out.push((format!("{name}_zstd_dict"), with_dictionary.bytes / n));
        out.push((format!("{name}_zstd_dict_ns"), with_dictionary.decompress_ns));
        out.push((format!("{name}_lz4_dict"), lz4.bytes / n));
        out.push((format!("{name}_lz4_dict_ns"), lz4.decompress_ns));
        if name == "transcript" {
            let (strings, fields) = in_redis(conn, served, records).await?;
            out.push(("redis_transcript_string".into(), strings / n));
            out.push(("redis_transcript_field".into(), fields / n));
            let (strings, fields) = in_redis(conn, served, &packed).await?;
            out.push(("redis_transcript_zstd_dict_string".into(), strings / n));
            out.push(("redis_transcript_zstd_dict_field".into(), fields / n));
        }
    }
    Ok(out)
}
