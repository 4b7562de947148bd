//! `projector status`: what an operator asks first. Generations, the running rebuild, the live projectors,
//! the lag of the live consumer group per partition, how many messages wait in the dead-letter topics, and
//! the aggregates that received an event late for a gap (each with the repair that redoes it); as text,
//! or as JSON for automation (`-o json`, the [`Status`] type as serialized). Its exit code is the most
//! pressing [`Condition`] it found, so that a script need not parse it.

use std::collections::BTreeMap;

use serde::Serialize;
use shared::connection::Connection;
use shared::{Keyspace, Topic};

use super::generations::{self, Pointers, Role};
use super::Output;
use crate::config::Config;
use crate::generation::{self, rebuild_state};
use crate::observe::now;
use crate::run::{live_instances, Instance};
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
    /// Generations that hold keys while nothing serves or writes them (`projector generations`): memory to
    /// take back with `projector generations --delete N`.
    pub left_behind: Vec<u64>,
    /// Live projectors by instance id, as each last reported itself.
    pub live_projectors: BTreeMap<String, Instance>,
    /// The live consumer group.
    pub group: String,
    pub partitions: Vec<PartitionLag>,
    /// Messages waiting in each dead-letter topic.
    pub dead_letters: BTreeMap<String, i64>,
    /// Aggregates of the active generation that received an event late for a gap, until repaired.
    pub late_for_a_gap: Vec<LateForAGap>,
    /// Healing entries of the active generation: partitions projected again after a loss (or for a new
    /// read model), while the API answers 503 where they are.
    pub healing_entries: u64,
    /// The active generation keeps its healing state opened (layout 4 on) and it was found without it:
    /// Redis lost it, and the API answers 503 everywhere until a live projector has marked the loss.
    pub healing_lost: bool,
    /// The most pressing of what this status found; the command exits with its code.
    pub condition: Condition,
}

/// What `status` exits with: the most pressing condition it found (docs/operating.md, "Status").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Condition {
    /// Nothing waits for an operator: exit 0.
    Healthy,
    /// Messages wait in a dead-letter topic, or aggregates late for a gap wait for their repair: exit 2.
    NeedsAttention,
    /// The active generation is being projected again (after a loss of Redis data, or a new read model):
    /// exit 3.
    Healing,
    /// A live projector that is behind has applied nothing for longer than `STALL_AFTER_SECS`: exit 4.
    Stalled,
    /// The active generation's layout is one this build does not read: exit 5.
    LayoutNotRead,
}

impl Condition {
    /// The exit code (1 stays a failure of the command itself).
    pub fn code(self) -> u8 {
        match self {
            Condition::Healthy => 0,
            Condition::NeedsAttention => 2,
            Condition::Healing => 3,
            Condition::Stalled => 4,
            Condition::LayoutNotRead => 5,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Condition::Healthy => "healthy",
            Condition::NeedsAttention => "dead letters or late aggregates wait for an operator",
            Condition::Healing => "the read model is being projected again",
            Condition::Stalled => "a projector that is behind makes no progress",
            Condition::LayoutNotRead => "the active layout is one this projector does not read",
        }
    }
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

pub async fn run(config: &Config, output: Output) -> Result<std::process::ExitCode, Error> {
    let status = gather(config).await?;
    match output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&status).expect("a status serializes")),
        Output::Text => print_text(&status),
    }
    Ok(status.condition.code().into())
}

/// The most pressing of what `status` found.
fn condition(status: &Status, stall_after: f64, now: f64) -> Condition {
    let stalled =
        status.live_projectors.values().any(|i| !i.caught_up && !i.paused && now - i.last_progress > stall_after);
    let waiting = status.dead_letters.values().any(|depth| *depth > 0) || !status.late_for_a_gap.is_empty();
    [
        (!status.layout_read, Condition::LayoutNotRead),
        (stalled, Condition::Stalled),
        (status.healing_entries > 0 || status.healing_lost, Condition::Healing),
        (waiting, Condition::NeedsAttention),
    ]
    .into_iter()
    .find_map(|(found, condition)| found.then_some(condition))
    .unwrap_or(Condition::Healthy)
}

async fn gather(config: &Config) -> Result<Status, Error> {
    let mut conn = connect(config).await?;
    let prefix = &config.redis.key_prefix;
    let state = rebuild_state(&mut conn, prefix).await?;
    let live_projectors: BTreeMap<String, Instance> = live_instances(&mut conn, prefix).await?.into_iter().collect();
    let read = generation::Pointers::read(&mut conn, prefix).await?;
    let active_generation = read.active;
    let rebuild = state.generation.map(|generation| Rebuild { generation, phase: state.phase, running: state.locked });
    let written = live_projectors.values().map(|i| i.generation).collect();
    let pointers = Pointers::of(read, state.generation, written);
    let left_behind = generations::list(&mut conn, prefix, &pointers)
        .await?
        .into_iter()
        .filter(|g| g.role == Role::LeftBehind)
        .map(|g| g.generation)
        .collect();
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
    let (mut active_layout, mut layout_read, mut late, mut healing_entries) = (None, true, Vec::new(), 0u64);
    let mut healing_lost = false;
    if let Some(generation) = active_generation {
        let keys = Keyspace::new(prefix.clone(), generation);
        let field = generation::layout(&mut conn, &keys).await?;
        let checked = shared::layout::check(generation, field.as_deref(), "projector");
        layout_read = checked.is_ok();
        active_layout = Some(field.unwrap_or_else(|| "1".into()));
        if layout_read {
            late = late_for_a_gap(config, &mut conn, &keys).await?;
            healing_entries = redis::cmd("HLEN").arg(keys.healing()).query_async(&mut conn).await?;
            let opened = store::position::Opened::of_layout(checked.unwrap_or(1));
            healing_lost = store::position::healing_lost(&mut conn, &keys, opened).await?;
            // The field that keeps the hash is no entry.
            if opened == store::position::Opened::Kept && !healing_lost {
                healing_entries = healing_entries.saturating_sub(1);
            }
        }
    }
    let mut status = Status {
        active_generation,
        active_layout,
        layout_read,
        rebuild,
        left_behind,
        live_projectors,
        group: config.group_id.clone(),
        partitions,
        dead_letters,
        late_for_a_gap: late,
        healing_entries,
        healing_lost,
        condition: Condition::Healthy,
    };
    status.condition = condition(&status, config.stall_after().as_secs_f64(), now());
    Ok(status)
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
    match status.left_behind.as_slice() {
        [] => println!("generations left behind: none"),
        left => {
            let left: Vec<String> = left.iter().map(u64::to_string).collect();
            println!("generations left behind: {} (`projector generations --delete N` deletes one)", left.join(", "));
        }
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
    if status.layout_read {
        println!("healing entries: {}", status.healing_entries);
        if status.healing_lost {
            println!("healing state: lost with its Redis primary (a live projector marks every partition again)");
        }
    }
    println!("condition: {} (exit {})", status.condition.describe(), status.condition.code());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> Status {
        Status {
            active_generation: Some(1),
            active_layout: Some("1".into()),
            layout_read: true,
            rebuild: None,
            left_behind: Vec::new(),
            live_projectors: BTreeMap::new(),
            group: "g".into(),
            partitions: Vec::new(),
            dead_letters: BTreeMap::new(),
            late_for_a_gap: Vec::new(),
            healing_entries: 0,
            healing_lost: false,
            condition: Condition::Healthy,
        }
    }

    fn instance(last_progress: f64, caught_up: bool, paused: bool) -> Instance {
        let (group, heartbeat) = ("g".into(), 1000.0);
        Instance { group, generation: 1, paused, heartbeat, last_progress, partitions: 3, latest_event: 0.0, caught_up }
    }

    #[test]
    fn status_exits_with_the_most_pressing_condition_it_found() {
        let (now, stall_after) = (1000.0, 30.0);
        let mut found = status();
        let condition_of = |s: &Status| condition(s, stall_after, now);
        found.dead_letters.insert("s.dlq".into(), 0);
        assert_eq!(condition_of(&found), Condition::Healthy, "an empty dead-letter topic");
        found.dead_letters.insert("s.dlq".into(), 2);
        assert_eq!(condition_of(&found), Condition::NeedsAttention);
        found.healing_entries = 1;
        assert_eq!(condition_of(&found), Condition::Healing);
        found.live_projectors.insert("slow".into(), instance(now - 10.0, false, false));
        found.live_projectors.insert("idle".into(), instance(now - 60.0, true, false));
        found.live_projectors.insert("paused".into(), instance(now - 60.0, false, true));
        assert_eq!(condition_of(&found), Condition::Healing, "behind within the bound, caught up, or paused");
        found.live_projectors.insert("stuck".into(), instance(now - 60.0, false, false));
        assert_eq!(condition_of(&found), Condition::Stalled);
        found.layout_read = false;
        assert_eq!(condition_of(&found), Condition::LayoutNotRead);
        let all = [
            Condition::Healthy,
            Condition::NeedsAttention,
            Condition::Healing,
            Condition::Stalled,
            Condition::LayoutNotRead,
        ];
        assert_eq!(all.map(Condition::code), [0, 2, 3, 4, 5]);
    }
}
