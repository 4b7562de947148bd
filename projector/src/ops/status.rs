//! `projector status`: what an operator asks first. Generations, the running rebuild, the live projectors,
//! the lag of the live consumer group per partition, and how many messages wait in the dead-letter topics.

use shared::connection::Connection;
use shared::Keyspace;

use crate::config::Config;
use crate::observe::now;
use crate::run::{live_instances, rebuild_state};
use crate::source::{dead_letter_depths, group_progress};
use crate::{store, Error};

/// A connection to the read model's Redis for a one-shot command, waiting for it with backoff.
pub async fn connect(config: &Config) -> Result<Connection, Error> {
    let (_stop, mut stopped) = tokio::sync::watch::channel(false);
    store::connect(config, &mut stopped).await.ok_or_else(|| Error::Refused("redis is not reachable".into()))
}

pub async fn run(config: &Config) -> Result<(), Error> {
    let mut conn = connect(config).await?;
    let prefix = &config.key_prefix;
    let active: Option<u64> = redis::cmd("GET").arg(Keyspace::active_generation(prefix)).query_async(&mut conn).await?;
    println!("active generation: {}", active.map_or("none".into(), |g| g.to_string()));
    let rebuild = rebuild_state(&mut conn, prefix).await?;
    match rebuild.generation {
        Some(generation) => {
            let phase = rebuild.phase.as_deref().unwrap_or("?");
            let state = if rebuild.locked { "running" } else { "interrupted (resumes on the next `rebuild`)" };
            println!("building generation: {generation} ({phase}, {state})");
        }
        None => println!("building generation: none"),
    }
    let now = now();
    let instances = live_instances(&mut conn, prefix).await?;
    println!("live projectors: {}", instances.len());
    for (id, i) in &instances {
        let paused = if i.paused { ", paused" } else { "" };
        let caught_up = if i.caught_up { "caught up" } else { "behind" };
        println!(
            "  {id}: generation {}, group {}, {} partitions{paused}, last progress {:.1}s ago, {caught_up}, latest event {}",
            i.generation,
            i.group,
            i.partitions,
            now - i.last_progress,
            shared::time::format_unix(i.latest_event).unwrap_or_else(|| "none".into())
        );
    }
    println!("lag of group {}:", config.group_id);
    for p in group_progress(config, &config.group_id)? {
        let committed = p.committed.map_or("none".into(), |c| c.to_string());
        println!("  {}: committed {committed}, end {}, lag {}", p.partition, p.end, p.lag());
    }
    println!("dead letters:");
    for (topic, depth) in dead_letter_depths(config)? {
        println!("  {topic}: {depth}");
    }
    Ok(())
}
