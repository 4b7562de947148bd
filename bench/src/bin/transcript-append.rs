//! What one transcript message costs Redis, at a 1 KB and at a 10 MB transcript: the projector's real write
//! script (`projector/src/store/write.lua`), called as the projector calls it for a completed interview that
//! records a participant message, against a baseline that is the same script with the transcript stored as
//! before, in a field of a per-organization hash read, concatenated in Lua and written back whole.
//!
//! Each leg pre-fills transcripts to its size, then appends cues of about 200 bytes, one EVALSHA each: at
//! 1 KB `--appends` calls, each to an interview of its own (so every call meets a 1 KB transcript), at
//! 10 MB `--large-appends` calls to one interview (which grows by 0.1%). It prints one line a leg: Redis's
//! own time per call (`INFO commandstats`, `cmdstat_evalsha`, before and after the leg), the client's round
//! trip per call, and the bytes the append-only file grew by per call. The Redis should be one of the benchmark's own (`scripts/bench-transcripts` starts one):
//! a leg fails when another client ran EVALSHA during it, as its figures would then not be the script's.

use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};
use benchmarks::report::Line;
use clap::Parser;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script, Value};
use shared::{Keyspace, Topic};

#[derive(Parser)]
#[command(about = "Times the write script's transcript append at 1 KB and 10 MB, against the old hash-field way.")]
struct Args {
    /// A Redis of the benchmark's own.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    redis_url: String,
    /// Key prefix to write under (deleted at the end).
    #[arg(long, default_value = "bench-transcripts")]
    prefix: String,
    /// Appends timed at a 1 KB transcript.
    #[arg(long, default_value_t = 1000)]
    appends: u64,
    /// Appends timed at a 10 MB transcript (each of the baseline's writes 10 MB back).
    #[arg(long, default_value_t = 50)]
    large_appends: u64,
}

/// The real write script.
const WRITE: &str = include_str!("../../../projector/src/store/write.lua");

/// The baseline's transcript step, as `write.lua` had it: read the whole transcript out of the
/// organization's hash, concatenate in Lua, write the whole back.
const OLD_TRANSCRIPT: &str = "if ARGV[9] == 'append' then
  local transcript = redis.call('HGET', KEYS[4], id) or ARGV[11]
  redis.call('HSET', KEYS[4], id, transcript .. ARGV[10])
elseif ARGV[9] == 'delete' then
  redis.call('HDEL', KEYS[4], id)
end
";

/// `write.lua` with its transcript step replaced by [`OLD_TRANSCRIPT`] (and the type it expects of the
/// transcript's key, where it checks one, a hash); everything else is the same.
fn baseline() -> Result<String> {
    let start = WRITE.find("if ARGV[9] == 'append' then").context("write.lua has no transcript step")?;
    let end = WRITE.find("return redis.status_reply(claim)").context("write.lua has no final reply")?;
    ensure!(start < end, "write.lua's transcript step is not its last");
    let before = WRITE[..start].replace("holds(KEYS[4], 'string')", "holds(KEYS[4], 'hash')");
    Ok(format!("{before}{OLD_TRANSCRIPT}{}", &WRITE[end..]))
}

const HEADER: &str = "WEBVTT\n";
const ORG: &str = "org-bench";

/// A participant's cue of 195 bytes, as the projector renders one.
fn cue(n: u64) -> String {
    let (minutes, seconds) = (n / 60 % 60, n % 60);
    format!(
        "\n00:{minutes:02}:{seconds:02}.000 --> 00:{minutes:02}:{seconds:02}.900\nMessage {n:06}: the checkout was \
         confusing at first, and then I liked how quickly the search found what I needed, so I kept on using it \
         for every order ever since.\n"
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Way {
    /// A field of the organization's hash, rewritten whole.
    Old,
    /// A string of the interview's own, appended to.
    New,
}

/// One leg's figures.
struct Leg {
    redis_usec: f64,
    wall_usec: f64,
    aof_bytes: f64,
    /// The largest transcript once the leg is done.
    largest_bytes: usize,
}

async fn commandstats(conn: &mut MultiplexedConnection) -> Result<(u64, u64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await?;
    let line = info.lines().find_map(|l| l.strip_prefix("cmdstat_evalsha:")).unwrap_or("calls=0,usec=0");
    let get = |name: &str| -> Result<u64> {
        let value = line.split(',').find_map(|kv| kv.strip_prefix(name)).context("no such commandstat")?;
        Ok(value.parse()?)
    };
    Ok((get("calls=")?, get("usec=")?))
}

/// The append-only file's size once Redis has written out its buffer and has no fsync pending (a write
/// waits while an fsync runs, so a leg after a large one would otherwise see its bytes late); 0 without AOF.
async fn aof_size(conn: &mut MultiplexedConnection) -> Result<u64> {
    for _ in 0..600 {
        let info: String = redis::cmd("INFO").arg("persistence").query_async(conn).await?;
        let get = |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().parse::<u64>());
        let pending = get("aof_buffer_length:").transpose()?.unwrap_or(0)
            + get("aof_pending_bio_fsync:").transpose()?.unwrap_or(0);
        if pending == 0 {
            return Ok(get("aof_current_size:").transpose()?.unwrap_or(0));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    bail!("the append-only file did not catch up within 30 s")
}

/// Which transcripts a leg appends to: `interviews` of them, pre-filled to `size` bytes, `appends` calls
/// taking them in turn (one call each when there are as many as calls, so each lands on a transcript of
/// `size` bytes).
struct Shape {
    size: usize,
    interviews: u64,
    appends: u64,
}

async fn leg(conn: &mut MultiplexedConnection, prefix: &str, way: Way, shape: &Shape) -> Result<Leg> {
    let keys = Keyspace::new(prefix, 1);
    let name = if way == Way::Old { "old" } else { "new" };
    let ids: Vec<String> = (0..shape.interviews).map(|k| format!("i-{name}-{}-{k}", shape.size)).collect();
    // The per-organization hash of before, `P:gN:{org}:transcripts`, or each interview's string.
    let old_hash = format!("{}:g{}:{{{ORG}}}:transcripts", keys.prefix(), keys.generation());
    let transcript_key = |id: &str| if way == Way::Old { old_hash.clone() } else { keys.transcript(ORG, id) };
    let mut filler = String::from(HEADER);
    let mut n = 0;
    while filler.len() < shape.size {
        filler.push_str(&cue(n));
        n += 1;
    }
    let mut prefill = redis::pipe();
    for id in &ids {
        match way {
            Way::Old => prefill.hset(&old_hash, id, &filler).ignore(),
            Way::New => prefill.set(transcript_key(id), &filler).ignore(),
        };
    }
    prefill.query_async::<()>(conn).await?;
    let source = if way == Way::Old { baseline()? } else { WRITE.to_string() };
    let script = Script::new(&source);
    script.prepare_invoke().load_async(conn).await?;
    let (index_key, documents_key) = (keys.interviews(ORG, "s1"), keys.interview_documents(ORG));
    let cues: Vec<String> = (n..n + shape.appends).map(cue).collect();
    let appended: usize = cues.iter().map(String::len).sum();

    let (calls_before, usec_before) = commandstats(conn).await?;
    let aof_before = aof_size(conn).await?;
    let started = Instant::now();
    for (call, cue) in (0..shape.appends).zip(&cues) {
        let id = &ids[(call % shape.interviews) as usize];
        let sequence = call / shape.interviews;
        // A state and a document like those the projector sends for a completed, visible interview.
        let state = format!(
            r#"{{"Interview":{{"studyId":"s1","createdAt":"2026-01-01T00:00:00Z","completed":true,"hidden":false,"deleted":false,"participant":{{"id":"p1","name":"Ada L."}},"id":"{id}"}}}}"#
        );
        let document = format!(
            r#"{{"id":"{id}","studyId":"s1","participant":{{"id":"p1","name":"Ada L."}},"facets":[],"video":null,"createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-01T00:00:00Z"}}"#
        );
        let reply: Value = redis::cmd("EVALSHA")
            .arg(script.get_hash())
            .arg(5)
            .arg(keys.aggregate(Topic::Interview, ORG, id))
            .arg(&index_key)
            .arg(&documents_key)
            .arg(transcript_key(id))
            .arg(keys.hold(ORG))
            .arg(sequence)
            .arg(sequence + 1)
            .arg(state)
            .arg(id)
            .arg("set")
            .arg(document)
            .arg("add")
            .arg(1_767_225_600_000_000u64)
            .arg("append")
            .arg(cue)
            .arg(HEADER)
            .query_async(conn)
            .await?;
        if reply != Value::SimpleString("APPLIED".into()) {
            bail!("the script did not apply call {call}: {reply:?}");
        }
    }
    let wall = started.elapsed();
    let aof_after = aof_size(conn).await?;
    let (calls_after, usec_after) = commandstats(conn).await?;
    if calls_after - calls_before != shape.appends {
        bail!(
            "{} EVALSHA calls during a leg of {}: use a Redis of the benchmark's own",
            calls_after - calls_before,
            shape.appends
        );
    }
    let mut lengths = redis::pipe();
    for id in &ids {
        match way {
            Way::Old => lengths.cmd("HSTRLEN").arg(&old_hash).arg(id),
            Way::New => lengths.strlen(transcript_key(id)),
        };
    }
    let lengths: Vec<usize> = lengths.query_async(conn).await?;
    let total = filler.len() * ids.len() + appended;
    ensure!(lengths.iter().sum::<usize>() == total, "the transcripts are not their prefill and every cue");
    let per = |total: f64| total / shape.appends as f64;
    Ok(Leg {
        redis_usec: per((usec_after - usec_before) as f64),
        wall_usec: per(wall.as_secs_f64() * 1e6),
        aof_bytes: per(aof_after.saturating_sub(aof_before) as f64),
        largest_bytes: lengths.into_iter().max().unwrap_or(0),
    })
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let mut conn = redis::Client::open(args.redis_url.as_str())?.get_multiplexed_async_connection().await?;
    let prefix = format!("{}-{}", args.prefix, std::process::id());
    let legs = [
        ("1KB", Shape { size: 1024, interviews: args.appends, appends: args.appends }),
        ("10MB", Shape { size: 10 * 1024 * 1024, interviews: 1, appends: args.large_appends }),
    ];
    for (label, shape) in &legs {
        for (name, way) in [("old", Way::Old), ("new", Way::New)] {
            let leg = leg(&mut conn, &prefix, way, shape).await?;
            Line::default()
                .with("size", label)
                .with("way", name)
                .with("appends", shape.appends)
                .with("interviews", shape.interviews)
                .with("redis_usec_per_append", format!("{:.1}", leg.redis_usec))
                .with("wall_usec_per_append", format!("{:.1}", leg.wall_usec))
                .with("aof_bytes_per_append", format!("{:.0}", leg.aof_bytes))
                .with("largest_transcript_bytes", leg.largest_bytes)
                .print();
        }
    }
    let keys: Vec<String> = {
        let mut iter: redis::AsyncIter<String> = conn.scan_match(format!("{prefix}:*")).await?;
        let mut keys = Vec::new();
        while let Some(key) = iter.next_item().await {
            keys.push(key?);
        }
        keys
    };
    for key in keys {
        conn.del::<_, ()>(key).await?;
    }
    Ok(())
}
