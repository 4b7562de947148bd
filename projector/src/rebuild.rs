//! `projector rebuild`: the read model rebuilt by replaying every topic from its earliest offset into a
//! new generation, beside the live one, which keeps serving and keeps receiving live events.
//!
//! One rebuild at a time: it holds `P:rebuild-lock` (a TTL it keeps renewing). Its state lives in
//! `P:rebuild`, and its progress in its own consumer group, so an interrupted rebuild resumes where it
//! stopped; if its generation lost its data meanwhile (a Redis restart), it starts over in a new one.
//! It reads every partition itself (no group membership to share them with), from its group's committed
//! offsets. Once within `handover_lag` messages of the end of every partition, it hands over (see
//! [`crate::control`]): live projectors pause, the rebuild catches up with their committed offsets, and
//! the active generation switches in one `SET`. The old generation is deleted after a grace period with
//! `UNLINK`, in batches. A generation is never made active before it has caught up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use shared::connection::Connection;
use shared::{Keyspace, Topic};
use tokio::sync::watch;

use crate::config::Config;
use crate::pipeline::{connect_redis, Projector, Step};
use crate::{control, digest, kafka, metrics, store, Error};

/// How the rebuild behaves; see `projector rebuild --help`.
#[derive(Debug, Clone)]
pub struct Options {
    pub grace: Duration,
    pub handover_lag: i64,
    pub handover_timeout: Duration,
    pub lock_wait: Duration,
}

const LOCK_TTL_MS: u64 = 10_000;
/// How often a rebuild that is still reading full batches measures how far it is from the end.
const MEASURE_LAG_EVERY: Duration = Duration::from_secs(1);
const RENEW: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0";
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";
const NEXT: &str = "local n = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(ARGV[1])) + 1 redis.call('SET', KEYS[1], n) return n";

/// Rebuilds, switches, and deletes the old generation after the grace period. Returns the new generation,
/// or `None` when shut down first (the next rebuild resumes).
pub async fn run(config: Config, options: Options, mut stopped: watch::Receiver<bool>) -> Result<Option<u64>, Error> {
    let prefix = config.key_prefix.clone();
    let Some(mut conn) = connect_redis(&config, &mut stopped).await? else { return Ok(None) };
    let token = uuid::Uuid::new_v4().to_string();
    let lock = Keyspace::rebuild_lock(&prefix);
    let deadline = Instant::now() + options.lock_wait;
    loop {
        let acquired: bool = redis::cmd("SET")
            .arg(&lock)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(LOCK_TTL_MS)
            .query_async(&mut conn)
            .await?;
        if acquired {
            break;
        }
        if Instant::now() >= deadline {
            return Err(Error::Refused(format!("another rebuild is running: {lock} is held")));
        }
        println!("waiting for {lock}: another rebuild holds it (a rebuild that died releases it within 10 s)");
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => return Ok(None),
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
    let renewal = tokio::spawn(renew(conn.clone(), lock.clone(), token.clone()));
    let result = rebuild(&config, &options, &mut conn, &mut stopped).await;
    renewal.abort();
    let _: Result<i64, _> = redis::Script::new(RELEASE).key(&lock).arg(&token).invoke_async(&mut conn).await;
    let Some((generation, old)) = result? else { return Ok(None) };
    tokio::select! {
        _ = stopped.wait_for(|stop| *stop) => {}
        _ = tokio::time::sleep(options.grace) => {}
    }
    let deleted = delete_generation(&mut conn, &Keyspace::new(prefix, old)).await?;
    println!("deleted generation {old} ({deleted} keys)");
    Ok(Some(generation))
}

async fn renew(mut conn: Connection, lock: String, token: String) {
    loop {
        tokio::time::sleep(Duration::from_millis(LOCK_TTL_MS / 4)).await;
        let renewed: redis::RedisResult<i64> =
            redis::Script::new(RENEW).key(&lock).arg(&token).arg(LOCK_TTL_MS).invoke_async(&mut conn).await;
        if let Err(e) = renewed {
            tracing::warn!(error = %e, "could not renew the rebuild lock");
        }
    }
}

/// Builds the new generation and switches to it; `(new, old)`.
async fn rebuild(
    config: &Config,
    options: &Options,
    conn: &mut Connection,
    stopped: &mut watch::Receiver<bool>,
) -> Result<Option<(u64, u64)>, Error> {
    let prefix = &config.key_prefix;
    let old = store::active_generation(conn, prefix).await?;
    let state = control::rebuild(conn, prefix).await?;
    let resumable = match state.generation {
        Some(g) if g != old => conn.exists::<_, bool>(Keyspace::new(prefix.clone(), g).meta()).await?,
        _ => false,
    };
    let (generation, group) = match (state.generation, state.group) {
        (Some(g), Some(group)) if resumable => {
            println!("resuming the interrupted rebuild of generation {g}");
            (g, group)
        }
        (previous, _) => {
            if let Some(g) = previous {
                println!("starting over: the interrupted rebuild's generation {g} lost its data");
                delete_generation(conn, &Keyspace::new(prefix.clone(), g)).await?;
            }
            let g: u64 =
                redis::Script::new(NEXT).key(Keyspace::generation_counter(prefix)).arg(old).invoke_async(conn).await?;
            let group = format!("{}-rebuild-g{g}", config.group_id);
            let started = metrics::now().to_string();
            let meta = Keyspace::new(prefix.clone(), g).meta();
            let _: () = conn.hset_multiple(&meta, &[("started", started.as_str()), ("group", group.as_str())]).await?;
            println!("rebuilding into generation {g} (active: {old})");
            (g, group)
        }
    };
    let rebuild_key = Keyspace::rebuild(prefix);
    let _: () = conn
        .hset_multiple(
            &rebuild_key,
            &[("generation", generation.to_string()), ("group", group.clone()), ("phase", control::BUILDING.into())],
        )
        .await?;

    let mut build_config = config.clone();
    build_config.group_id = group;
    build_config.generation = Some(generation);
    let Some(mut projector) = Projector::connect(build_config, stopped.clone()).await? else { return Ok(None) };
    projector.assign_everything()?;
    let rebuilding = Arc::new(AtomicBool::new(true));
    if let Err(e) = crate::serve_http(&projector, rebuilding.clone()).await {
        tracing::warn!(error = %e, "no metrics server for the rebuild");
    }
    let mut last_report = Instant::now();
    let mut last_measured: Option<Instant> = None;
    let full = Step::Applied(config.batch_size as usize);
    loop {
        let stepped = step(&mut projector, stopped).await?;
        if stepped == Step::Stopped {
            return Ok(None);
        }
        // The exact lag takes a broker round trip per partition: measure it once a second while full
        // batches keep coming, and after every short batch or empty poll, where the end may be near.
        if stepped == full && last_measured.is_some_and(|at| at.elapsed() < MEASURE_LAG_EVERY) {
            continue;
        }
        last_measured = Some(Instant::now());
        let Some(remaining) = projector.exact_lag() else { continue };
        projector.metrics.rebuild_remaining.set(remaining);
        if last_report.elapsed() > Duration::from_secs(5) {
            println!("generation {generation}: {remaining} messages to go");
            last_report = Instant::now();
        }
        if remaining <= options.handover_lag {
            if handover(config, options, conn, &mut projector, generation, stopped).await? {
                break;
            }
            if *stopped.borrow() {
                return Ok(None);
            }
        }
    }
    rebuilding.store(false, Ordering::Relaxed);
    projector.metrics.rebuild_remaining.set(0);
    projector.commit_applied()?;
    let _: () = conn.del(&rebuild_key).await?;
    let digest = digest::digest(conn, &Keyspace::new(prefix.clone(), generation)).await?;
    println!("switched to generation {generation} (was {old}); digest {digest}");
    Ok(Some((generation, old)))
}

async fn step(projector: &mut Projector, stopped: &mut watch::Receiver<bool>) -> Result<Step, Error> {
    projector.step(stopped, Duration::from_millis(200)).await
}

/// Pauses the live projectors, catches up with their committed offsets and switches. False when it must
/// be tried again later (a live projector did not pause in time).
async fn handover(
    config: &Config,
    options: &Options,
    conn: &mut Connection,
    projector: &mut Projector,
    generation: u64,
    stopped: &mut watch::Receiver<bool>,
) -> Result<bool, Error> {
    let prefix = &config.key_prefix;
    let rebuild_key = Keyspace::rebuild(prefix);
    let _: () = conn.hset(&rebuild_key, "phase", control::HANDOVER).await?;
    let deadline = Instant::now() + options.handover_timeout;
    loop {
        let instances = control::instances(conn, prefix).await?;
        let running: Vec<&String> =
            instances.iter().filter(|(_, i)| i.generation != generation && !i.paused).map(|(id, _)| id).collect();
        if running.is_empty() {
            break;
        }
        if Instant::now() > deadline || *stopped.borrow() {
            println!("handover postponed: {} live projector(s) did not pause", running.len());
            let _: () = conn.hset(&rebuild_key, "phase", control::BUILDING).await?;
            return Ok(false);
        }
        if step(projector, stopped).await? == Step::Stopped {
            return Ok(false);
        }
    }
    let names: Vec<&str> = Topic::ALL.iter().map(|t| config.topic_name(*t)).collect();
    let live = kafka::inspector(config, &config.group_id)?;
    let committed: HashMap<(String, i32), i64> = tokio::task::block_in_place(|| kafka::progress(&live, &names))?
        .into_iter()
        .filter_map(|(topic, partition, committed, _)| Some(((topic, partition), committed?)))
        .collect();
    // What this rebuild committed before a restart counts as applied.
    let own = tokio::task::block_in_place(|| kafka::progress(&projector.consumer, &names))?;
    let own: HashMap<(String, i32), i64> =
        own.into_iter().filter_map(|(topic, partition, offset, _)| Some(((topic, partition), offset?))).collect();
    let reached =
        |projector: &Projector, tp: &(String, i32)| projector.applied_offset(tp).max(*own.get(tp).unwrap_or(&0));
    while !committed.iter().all(|(tp, offset)| reached(projector, tp) >= *offset) {
        if step(projector, stopped).await? == Step::Stopped {
            let _: () = conn.hset(&rebuild_key, "phase", control::BUILDING).await?;
            return Ok(false);
        }
    }
    let _: () = conn.set(Keyspace::active_generation(prefix), generation).await?;
    Ok(true)
}

/// Deletes every key of a generation with UNLINK, a batch at a time, so Redis never blocks on it.
pub async fn delete_generation(conn: &mut Connection, keys: &Keyspace) -> Result<usize, Error> {
    let names = digest::scan(conn, keys).await?;
    for chunk in names.chunks(500) {
        // One UNLINK per key: keys of different organizations may sit in different slots.
        let unlinks: Vec<redis::Cmd> = chunk
            .iter()
            .map(|name| {
                let mut cmd = redis::cmd("UNLINK");
                cmd.arg(name);
                cmd
            })
            .collect();
        conn.query_all(&unlinks).await?;
    }
    Ok(names.len())
}
