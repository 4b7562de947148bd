//! `projector status`: what an operator asks first. Generations, the running rebuild, the live projectors,
//! the lag of the live consumer group per partition, how many messages wait in the dead-letter topics, and
//! the aggregates that received an event late for a gap (each with the repair that redoes it); as text,
//! or as JSON for automation (`-o json`, the [`Status`] type as serialized).

use std::collections::BTreeMap;

use serde::Serialize;
use shared::connection::Connection;
use shared::{Keyspace, Topic};

use super::Output;
use crate::config::Config;
use crate::observe::now;
use crate::run::{live_instances, rebuild_state, Instance};
use crate::source::{dead_letter_depths, group_progress};
use crate::{store, Error};

/// Everything `status` reports.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub active_generation: Option<u64>,
    /// The active generation's layout version as recorded (`1` for a generation written before layouts
    /// were recorded; `shared::layout`).
    pub active_layout: Option<String>,
    /// Whether this build reads that layout. When it does not, the generation's own records (the late
    /// aggregates below) are not read, and the other commands that use the generation refuse.
    pub layout_read: bool,
    pub rebuild: Option<Rebuild>,
    /// Live projectors by instance id, as each last reported itself.
    pub live_projectors: BTreeMap<String, Instance>,
    /// The live consumer group.
    pub group: String,
    pub partitions: Vec<PartitionLag>,
    /// Messages waiting in each dead-letter topic.
    pub dead_letters: BTreeMap<String, i64>,
    /// Aggregates of the active generation that received an event late for a gap, until repaired.
    pub late_for_a_gap: Vec<LateForAGap>,
}

/// An aggregate that received an event late for a gap in its sequence: the event was not applied, and
/// the aggregate lacks it until the repair here redoes it from the topics.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LateForAGap {
    /// Which aggregate (for the text, which names it as the late hash does).
    #[serde(skip)]
    pub aggregate: Topic,
    /// The topic's configured name.
    pub topic: String,
    pub aggregate_id: String,
    pub organization_id: String,
    /// The command that redoes the aggregate.
    pub repair: String,
}

/// The rebuild that is running or was interrupted.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rebuild {
    pub generation: u64,
    pub phase: Option<String>,
    /// Whether a rebuild holds the lock now; otherwise the next `rebuild` resumes it.
    pub running: bool,
}

/// Where the live consumer group stands on one partition.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub committed: Option<i64>,
    pub end: i64,
    pub lag: i64,
}

/// A connection to the read model's Redis for a one-shot command, waiting for it with backoff.
pub async fn connect(config: &Config) -> Result<Connection, Error> {
    let (_stop, mut stopped) = tokio::sync::watch::channel(false);
    store::connect(config, &mut stopped).await?.ok_or_else(|| Error::Refused("redis is not reachable".into()))
}

pub async fn run(config: &Config, output: Output) -> Result<(), Error> {
    let status = gather(config).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&status).expect("a status serializes")),
        Output::Text => print_text(&status),
    }
    Ok(())
}

async fn gather(config: &Config) -> Result<Status, Error> {
    let mut conn = connect(config).await?;
    let prefix = &config.redis.key_prefix;
    let active_generation = redis::cmd("GET").arg(Keyspace::active_generation(prefix)).query_async(&mut conn).await?;
    let state = rebuild_state(&mut conn, prefix).await?;
    let rebuild = state.generation.map(|generation| Rebuild { generation, phase: state.phase, running: state.locked });
    let live_projectors = live_instances(&mut conn, prefix).await?.into_iter().collect();
    let partitions = group_progress(config, &config.group_id)?
        .into_iter()
        .map(|p| PartitionLag {
            lag: p.lag(),
            topic: p.partition.topic,
            partition: p.partition.partition,
            committed: p.committed,
            end: p.end,
        })
        .collect();
    let dead_letters = dead_letter_depths(config)?.into_iter().collect();
    let (mut active_layout, mut layout_read, mut late) = (None, true, Vec::new());
    if let Some(generation) = active_generation {
        let keys = Keyspace::new(prefix.clone(), generation);
        let field = store::layout(&mut conn, &keys).await?;
        layout_read = shared::layout::check(generation, field.as_deref(), "projector").is_ok();
        active_layout = Some(field.unwrap_or_else(|| "1".into()));
        if layout_read {
            late = late_for_a_gap(config, &mut conn, &keys).await?;
        }
    }
    Ok(Status {
        active_generation,
        active_layout,
        layout_read,
        rebuild,
        live_projectors,
        group: config.group_id.clone(),
        partitions,
        dead_letters,
        late_for_a_gap: late,
    })
}

async fn late_for_a_gap(config: &Config, conn: &mut Connection, keys: &Keyspace) -> Result<Vec<LateForAGap>, Error> {
    let late = store::late_aggregates(conn, keys).await?;
    Ok(late
        .into_iter()
        .map(|l| {
            let topic = config.topic_name(l.topic).to_string();
            LateForAGap {
                aggregate: l.topic,
                repair: store::repair_command(&topic, &l.id),
                topic,
                aggregate_id: l.id,
                organization_id: l.organization,
            }
        })
        .collect())
}

fn print_text(status: &Status) {
    println!("active generation: {}", status.active_generation.map_or("none".into(), |g| g.to_string()));
    if let Some(layout) = &status.active_layout {
        let (first, last) = (shared::layout::READS.start(), shared::layout::READS.end());
        match status.layout_read {
            true => println!("layout: {layout}"),
            false => println!(
                "layout: {layout}, which this projector does not read (it reads {first} to {last}): upgrade it \
                 (docs/operating.md, \"Upgrades\"); late aggregates not listed"
            ),
        }
    }
    match &status.rebuild {
        Some(rebuild) => {
            let phase = rebuild.phase.as_deref().unwrap_or("?");
            let state = if rebuild.running { "running" } else { "interrupted (resumes on the next `rebuild`)" };
            println!("building generation: {} ({phase}, {state})", rebuild.generation);
        }
        None => println!("building generation: none"),
    }
    let now = now();
    println!("live projectors: {}", status.live_projectors.len());
    for (id, i) in &status.live_projectors {
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
    println!("lag of group {}:", status.group);
    for p in &status.partitions {
        let committed = p.committed.map_or("none".into(), |c| c.to_string());
        println!("  {}/{}: committed {committed}, end {}, lag {}", p.topic, p.partition, p.end, p.lag);
    }
    println!("dead letters:");
    for (topic, depth) in &status.dead_letters {
        println!("  {topic}: {depth}");
    }
    if status.layout_read {
        println!("late for a gap: {} aggregates", status.late_for_a_gap.len());
    }
    for late in &status.late_for_a_gap {
        let (aggregate, id, org) = (late.aggregate.aggregate(), &late.aggregate_id, &late.organization_id);
        println!("  {aggregate}:{id} (organization {org}): {}", late.repair);
    }
}
