//! `projector status`: what an operator asks first. Generations, the running rebuild, the live projectors,
//! the lag of the live consumer group per partition, and how many messages wait in the dead-letter topics.

use std::fmt::Write;

use shared::connection::Connection;
use shared::{Keyspace, Topic};

use crate::config::{dead_letter_topic, Config};
use crate::{control, kafka, metrics, Error};

pub async fn report(config: &Config, conn: &mut Connection) -> Result<String, Error> {
    let prefix = &config.key_prefix;
    let mut out = String::new();
    let active: Option<u64> = redis::cmd("GET").arg(Keyspace::active_generation(prefix)).query_async(conn).await?;
    let _ = writeln!(out, "active generation: {}", active.map_or("none".into(), |g| g.to_string()));
    let rebuild = control::rebuild(conn, prefix).await?;
    match rebuild.generation {
        Some(generation) => {
            let phase = rebuild.phase.as_deref().unwrap_or("?");
            let state = if rebuild.locked { "running" } else { "interrupted (resumes on the next `rebuild`)" };
            let _ = writeln!(out, "building generation: {generation} ({phase}, {state})");
        }
        None => {
            let _ = writeln!(out, "building generation: none");
        }
    }
    let now = metrics::now();
    let instances = control::instances(conn, prefix).await?;
    let _ = writeln!(out, "live projectors: {}", instances.len());
    for (id, i) in &instances {
        let paused = if i.paused { ", paused" } else { "" };
        let _ = writeln!(
            out,
            "  {id}: generation {}, group {}, {} partitions{paused}, last progress {:.1}s ago",
            i.generation,
            i.group,
            i.partitions,
            now - i.last_progress
        );
    }
    let names: Vec<String> = Topic::ALL.iter().map(|t| config.topic_name(*t).to_string()).collect();
    let topics: Vec<&str> = names.iter().map(String::as_str).collect();
    let inspector = kafka::inspector(config, &config.group_id)?;
    let progress = tokio::task::block_in_place(|| kafka::progress(&inspector, &topics))?;
    let _ = writeln!(out, "lag of group {}:", config.group_id);
    for (topic, partition, committed, high) in progress {
        let lag = high - committed.unwrap_or(0);
        let committed = committed.map_or("none".into(), |c| c.to_string());
        let _ = writeln!(out, "  {topic}/{partition}: committed {committed}, end {high}, lag {lag}");
    }
    let _ = writeln!(out, "dead letters:");
    for name in &names {
        let dlq = dead_letter_topic(name);
        let depth: i64 = tokio::task::block_in_place(|| -> Result<i64, Error> {
            let mut depth = 0;
            for partition in kafka::partitions(&inspector, &dlq)? {
                let (low, high) = rdkafka::consumer::Consumer::fetch_watermarks(
                    &inspector,
                    &dlq,
                    partition,
                    std::time::Duration::from_secs(10),
                )?;
                depth += high - low;
            }
            Ok(depth)
        })?;
        let _ = writeln!(out, "  {dlq}: {depth}");
    }
    Ok(out)
}
