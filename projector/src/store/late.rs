//! Aggregates that received an event late for a gap: an event below their applied sequence whose
//! sequence a gap skipped. Such an event cannot be applied in order any more (rule 1 of the event
//! contract: it changes nothing), so its aggregate stays without it until `projector repair` redoes it from
//! the topics. After a batch's writes, each such aggregate is remembered in the generation's late hash
//! ([`Keyspace::late`]; bookkeeping, not in the aggregate's slot) and logged with the command that fixes
//! it; `projector status` lists the hash.

use redis::Cmd;
use shared::connection::Connection;
use shared::{Event, Keyspace, Topic};

use crate::fold::Verdict;

/// An aggregate that got at least one late event in a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Late<'a> {
    topic: Topic,
    id: &'a str,
    org: &'a str,
    /// The sequence of its first late event in the batch.
    sequence: u64,
    /// How many of the batch's events were late.
    count: usize,
}

impl<'a> Late<'a> {
    /// The aggregate, if any of its `events` was judged late.
    pub(super) fn of(topic: Topic, id: &'a str, org: &'a str, events: &[&Event], verdicts: &[Verdict]) -> Option<Self> {
        let mut late = events.iter().zip(verdicts).filter(|(_, v)| **v == Verdict::Late);
        let (first, _) = late.next()?;
        Some(Late { topic, id, org, sequence: first.envelope.sequence, count: 1 + late.count() })
    }
}

/// The repair an operator runs for one aggregate of the topic named `topic_name` (its configured name,
/// or its aggregate's, which `repair` accepts whatever the configured names).
pub fn repair_command(topic_name: &str, id: &str) -> String {
    format!("projector repair --aggregate {topic_name}:{id}")
}

/// Remembers every aggregate of `late` in the late hash, with one HSET, and logs each once.
pub(super) async fn remember(conn: &mut Connection, keys: &Keyspace, late: &[Late<'_>]) -> redis::RedisResult<()> {
    if late.is_empty() {
        return Ok(());
    }
    let mut hset = redis::cmd("HSET");
    hset.arg(keys.late());
    for l in late {
        hset.arg(Keyspace::late_field(l.topic, l.id)).arg(l.org);
    }
    conn.query_all(std::slice::from_ref::<Cmd>(&hset)).await?;
    for l in late {
        tracing::warn!(
            topic = l.topic.default_name(),
            aggregate = l.id,
            sequence = l.sequence,
            late = l.count,
            organization = l.org,
            // The aggregate's name: the store does not know the topics' configured names.
            repair = %repair_command(l.topic.aggregate(), l.id),
            "an event arrived late for a gap in its aggregate's sequence: not applied; the aggregate needs a repair"
        );
    }
    Ok(())
}

/// An aggregate listed in the late hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LateAggregate {
    pub topic: Topic,
    pub id: String,
    pub organization: String,
}

/// Every aggregate in the late hash of `keys`'s generation, by topic and id; fields that name no topic
/// are left out.
pub async fn late_aggregates(conn: &mut Connection, keys: &Keyspace) -> redis::RedisResult<Vec<LateAggregate>> {
    let fields: std::collections::BTreeMap<String, String> =
        redis::cmd("HGETALL").arg(keys.late()).query_async(conn).await?;
    let mut late: Vec<LateAggregate> = fields
        .into_iter()
        .filter_map(|(field, organization)| {
            let (aggregate, id) = field.split_once(':')?;
            let topic = Topic::ALL.into_iter().find(|t| t.aggregate() == aggregate)?;
            Some(LateAggregate { topic, id: id.to_string(), organization })
        })
        .collect();
    late.sort_by(|a, b| (a.topic, &a.id).cmp(&(b.topic, &b.id)));
    Ok(late)
}
