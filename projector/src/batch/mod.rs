//! One batch's life, top to bottom; the README's paragraph on the projector, as code:
//!
//! 1. take what the broker has: up to `BATCH_SIZE` messages, lingering `BATCH_LINGER_MS` to fill up (none
//!    by default);
//! 2. decode each message: poison is to be set aside in its dead-letter topic with the reason, a
//!    well-formed event of an unknown type is skipped;
//! 3. group the events by aggregate; fold each group over the aggregate's stored state and write the
//!    result with one atomic script that checks the stored sequence (`store`);
//! 4. set the poison aside, and the events Redis refused for good; unless so much of a partition's
//!    latest messages would be poison that the dead-letter limit halts it at its first letter (a broken
//!    release): then nothing of it from there is set aside or written, and it is read again later;
//! 5. count what became of every message, once, in the metrics;
//! 6. commit the batch's offsets, now that every message in it is applied or set aside (a halted
//!    partition's up to where it halted).
//!
//! Writes retry with backoff until they succeed or the projector shuts down: dead letters in place, a
//! write Redis failed by handing the batch back to the live loop, which reads it again after its
//! housekeeping (`batch/write.rs`). A crash anywhere replays the batch, which changes nothing the second
//! time: every write checks the aggregate's sequence.
//!
//! In traces, each batch is a span linked to the trace of every message that carries a `traceparent`
//! header (up to [`MAX_LINKS`]): the projector applies many messages at once, so it follows each one's
//! trace by a link rather than joining it.
//!
//! Before step 3, and again after every Redis error, the [`Guard`] asks whether Redis may have lost data
//! since it last looked (a restart, a failover, a flush). If it did, the batch is dropped unwritten: folded
//! onto lost state it would be wrong for good. The caller heals, and the batch is read again.

mod decode;
mod write;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::time::{Duration, Instant};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use shared::loss::Losses;
use tokio::sync::watch;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::observe::{Metrics, Outcome, Tally};
use crate::source::Source;
pub use crate::source::{Batch, BrokerError, DeadLetter, Partition, Record};
use crate::source::{DeadLetterLimit, DeadLetterWriter, Seen};
use crate::store::Store;
/// The question asked before every write: the store's, named here too as the batch's guard.
pub use crate::store::{Doubt, Guard};
pub use decode::group;
use decode::{count, decode_all, DecodedBatch, Letter};
use write::{set_aside, write_all};

/// What one call of [`step`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A batch of this many messages was applied and committed.
    Applied(usize),
    /// No message arrived for a while.
    Idle,
    /// Shut down before the batch in hand was applied; it will be applied again after a restart.
    Stopped,
    /// Redis may have lost data (why, as the guard said): the batch was dropped unwritten and uncommitted.
    Lost(Losses),
}

/// How [`project`] ended, when it did not apply the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interrupted {
    Stopped,
    /// Redis may have lost data: what the guard said.
    Lost(Losses),
    /// Redis did not say whether it lost data: nothing was written, the batch is read again.
    Unanswered,
    /// Redis failed a write, now or before and its delay is not over: the batch is read again (what was
    /// written of it stays: every write checks its aggregate's sequence) after a slice of the wait and
    /// the live loop's housekeeping.
    Retried,
}

/// Takes one batch (waiting at most `idle` for its first message), applies it and commits it.
pub async fn step(
    source: &mut Source,
    store: &mut Store,
    metrics: &Metrics,
    guard: &mut impl Guard,
    stopped: &mut watch::Receiver<bool>,
    idle: Duration,
) -> Step {
    match source.resume_due() {
        Ok(resumed) => {
            for partition in resumed {
                tracing::info!(%partition, "reading a partition halted by the dead-letter limit again");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not read the halted partitions again; trying later"),
    }
    let Some(batch) = source.next_batch(stopped, idle).await else { return Step::Stopped };
    if batch.is_empty() {
        pass_undelivered(source);
        return Step::Idle;
    }
    // A halted partition is not read; should the consumer still deliver it, nothing of it is taken.
    let records: Vec<Record<'_>> = batch.records().filter(|r| !source.is_waiting(r)).collect();
    guard.positions(source.positions());
    let span = batch_span(&batch, source.group());
    let (writer, limit) = source.dead_letters();
    let mut poison = Poison { writer, limit, batch: &batch };
    let halts = match project(&records, &mut poison, store, metrics, guard, stopped).instrument(span.clone()).await {
        Ok(halts) => halts,
        Err(Interrupted::Stopped) => return Step::Stopped,
        Err(interrupted @ (Interrupted::Lost(_) | Interrupted::Unanswered | Interrupted::Retried)) => {
            // The messages taken past what was applied are read again.
            if let Err(e) = source.drop_fetched() {
                tracing::warn!(error = %e, "could not read the dropped batch again");
            }
            return match interrupted {
                Interrupted::Lost(loss) => Step::Lost(loss),
                _ => Step::Idle,
            };
        }
    };
    // What the guard recorded before the batch may be committed now; the batch itself once a later look
    // records it. Shutting down: commit synchronously, so that a restart does not apply more again.
    if let Some(recorded) = guard.recorded() {
        source.recorded(recorded);
    }
    if let Err(e) = span.in_scope(|| source.commit(&batch, &halts, *stopped.borrow())) {
        tracing::warn!(error = %e, "could not stop reading a halted partition; its messages are left untaken");
    }
    for (partition, offset) in &halts {
        let reason = source.halted().get(partition).map(|h| h.reason.as_str()).unwrap_or_default();
        tracing::error!(%partition, offset, %reason, "so much of the partition's latest messages would be poison \
            that the dead-letter limit halts it here, setting nothing aside (a broken release?); read again later");
    }
    metrics.set_halted(source.halted());
    let applied = records.len();
    drop(records);
    drop(batch);
    // A quiet partition may end in offsets with nothing to deliver while others keep the projector busy:
    // looked at on a timer (at most once a second), whatever the other partitions do.
    pass_undelivered(source);
    Step::Applied(applied)
}

/// Moves the partitions short of their end with nothing to deliver past those offsets, when a look is due.
fn pass_undelivered(source: &mut Source) {
    match source.pass_undelivered() {
        Ok(moved) if !moved.is_empty() => {
            let moved: Vec<String> = moved.iter().map(|(p, at)| format!("{p}@{at}")).collect();
            tracing::info!(partitions = %moved.join(" "), "passed offsets with nothing to deliver");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "could not read a partition short of its end to its end"),
    }
}

/// The most messages' traces one batch's span links to (the SDK's own limit on links per span).
pub const MAX_LINKS: usize = 128;

/// A batch's span, linked to the trace context (`traceparent`, `tracestate`) of each of its messages
/// that carries one, each context once.
/// OpenTelemetry's messaging conventions for a consumer processing a batch: kind `consumer`, the name
/// `process <topic>` (`process` when the batch spans topics), `messaging.*` attributes (the topic and the
/// partition when the batch holds one only).
fn batch_span(batch: &Batch, group: &str) -> tracing::Span {
    let mut records = batch.records();
    let first = records.next().map(|r| (r.topic_name, r.partition));
    let (mut one_topic, mut one_partition) = (first.map(|f| f.0), first);
    for record in records {
        one_topic = one_topic.filter(|topic| *topic == record.topic_name);
        one_partition = one_partition.filter(|p| *p == (record.topic_name, record.partition));
    }
    let name = one_topic.map_or_else(|| "process".to_string(), |topic| format!("process {topic}"));
    let span = tracing::info_span!(
        "batch",
        messages = batch.len(),
        links = tracing::field::Empty,
        "otel.name" = name.as_str(),
        "otel.kind" = "consumer",
        "messaging.system" = "kafka",
        "messaging.operation.type" = "process",
        "messaging.operation.name" = "process",
        "messaging.batch.message_count" = batch.len(),
        "messaging.consumer.group.name" = group,
        "messaging.destination.name" = tracing::field::Empty,
        "messaging.destination.partition.id" = tracing::field::Empty,
    );
    if let Some(topic) = one_topic {
        span.record("messaging.destination.name", topic);
    }
    if let Some((_, partition)) = one_partition {
        span.record("messaging.destination.partition.id", partition.to_string());
    }
    let propagator = TraceContextPropagator::new();
    let mut linked = HashSet::new();
    for carrier in batch.carriers() {
        let context = propagator.extract(&carrier).span().span_context().clone();
        if context.is_valid() && linked.len() < MAX_LINKS && linked.insert((context.trace_id(), context.span_id())) {
            span.add_link(context);
        }
    }
    span.record("links", linked.len());
    span
}

/// Where poison messages go, and the dead-letter limit that may halt a partition instead; the broker's
/// dead-letter topics, or nowhere (and no limit) for a benchmark from memory.
pub trait SetAside {
    fn set_aside(&self, letters: &[DeadLetter]) -> impl Future<Output = Result<(), BrokerError>> + Send;

    /// The partitions the limit would halt, and where, given the batch's messages: changes nothing.
    fn would_halt(&self, _seen: &BTreeMap<Partition, Vec<Seen<'_>>>) -> BTreeMap<Partition, i64> {
        BTreeMap::new()
    }

    /// The partitions the limit halts, and where, given the batch's messages; the others' are recorded.
    fn halt(&mut self, _seen: &BTreeMap<Partition, Vec<Seen<'_>>>) -> Vec<(Partition, i64)> {
        Vec::new()
    }
}

/// Nowhere: for a benchmark or a test from memory, which has no dead-letter topic.
impl SetAside for () {
    async fn set_aside(&self, _: &[DeadLetter]) -> Result<(), BrokerError> {
        Ok(())
    }
}

/// The broker's dead-letter topics, for the poison of one batch (each letter keeps its message's
/// headers), and the dead-letter limit.
struct Poison<'a> {
    writer: DeadLetterWriter<'a>,
    limit: &'a mut DeadLetterLimit,
    batch: &'a Batch,
}

impl SetAside for Poison<'_> {
    async fn set_aside(&self, letters: &[DeadLetter]) -> Result<(), BrokerError> {
        self.writer.write(letters, self.batch).await
    }

    fn would_halt(&self, seen: &BTreeMap<Partition, Vec<Seen<'_>>>) -> BTreeMap<Partition, i64> {
        self.limit.would_halt(seen).into_iter().map(|(partition, (offset, _))| (partition, offset)).collect()
    }

    fn halt(&mut self, seen: &BTreeMap<Partition, Vec<Seen<'_>>>) -> Vec<(Partition, i64)> {
        self.limit.check(seen, Instant::now())
    }
}

/// Steps 2 to 5 for a batch of records: decode, fold and write, set poison aside, count. Returns the
/// partitions the dead-letter limit halted, each with the offset it halted at: nothing of it from there
/// was set aside, and none of its events from there were written (but those written before Redis
/// refused one for good, which are written again, changing nothing, when it is read again). Interrupted
/// when shut down before every message was applied or set aside, or when the guard says Redis may have
/// lost data (then nothing of the batch was written).
pub async fn project(
    records: &[Record<'_>],
    poison: &mut impl SetAside,
    store: &mut Store,
    metrics: &Metrics,
    guard: &mut impl Guard,
    stopped: &mut watch::Receiver<bool>,
) -> Result<Vec<(Partition, i64)>, Interrupted> {
    let started = Instant::now();
    metrics.in_hand.set(records.len() as i64);
    let DecodedBatch { mut events, mut origins, mut letters, skipped, framed } = decode_all(records);
    // A partition its poison alone halts: none of its events from its first letter is written.
    let held = poison.would_halt(&seen(records, &letters));
    if !held.is_empty() {
        let keep: Vec<bool> = origins.iter().map(|origin| !beyond(&held, &records[*origin])).collect();
        let mut kept = keep.iter();
        events.retain(|_| *kept.next().expect("one per event"));
        let mut kept = keep.iter();
        origins.retain(|_| *kept.next().expect("one per event"));
    }
    let groups = group(&events);
    let (applied, refused) = write_all(&groups, store, metrics, guard, stopped).await?;
    // An aggregate Redis refuses for good is set aside like poison: its partition goes on.
    for (group, reason) in refused {
        tracing::error!(aggregate = group.aggregate_id, %reason, "redis refused an aggregate's events; set aside");
        for event in &group.events {
            let origin = origins[events.iter().position(|e| std::ptr::eq(e, *event)).expect("in batch")];
            let letter = DeadLetter::new(&records[origin], format!("redis refused the write: {reason}"));
            letters.push(Letter { letter, origin, topic: group.topic, kind: event.envelope.kind.clone() });
        }
    }
    let halts: BTreeMap<Partition, i64> = poison.halt(&seen(records, &letters)).into_iter().collect();
    let mut tally = Tally::new();
    let mut kept = Vec::with_capacity(letters.len());
    for Letter { letter, origin, topic, kind } in letters {
        if !beyond(&halts, &records[origin]) {
            count(&mut tally, topic, &kind, Outcome::DeadLettered);
            kept.push(letter);
        }
    }
    if !set_aside(poison, &kept, metrics, stopped).await {
        return Err(Interrupted::Stopped);
    }
    for (origin, kind) in skipped {
        if !beyond(&halts, &records[origin]) {
            count(&mut tally, records[origin].topic, &kind, Outcome::Skipped);
        }
    }
    for (origin, schema_id) in framed {
        if !beyond(&halts, &records[origin]) {
            metrics.framed(records[origin].topic, schema_id);
        }
    }
    if let Some(latest) = events.iter().map(|e| e.envelope.occurred_at).max() {
        metrics.applied_event_at(latest.timestamp_micros() as f64 / 1e6);
    }
    let now = crate::observe::now();
    for (event, origin) in events.iter().zip(&origins) {
        let occurred_at = event.envelope.occurred_at.timestamp_micros() as f64 / 1e6;
        metrics.applied_event(now, occurred_at, records[*origin].timestamp_ms);
    }
    for (topic, kind, outcome) in applied {
        count(&mut tally, topic, kind, outcome);
    }
    metrics.count(&tally);
    metrics.in_hand.set(0);
    metrics.applied_batch(records.len(), started.elapsed().as_secs_f64());
    tracing::debug!(messages = records.len(), ?tally, "batch applied");
    Ok(halts.into_iter().collect())
}

/// Whether `record` is at or past where its partition halts (or would).
fn beyond(halts: &BTreeMap<Partition, i64>, record: &Record<'_>) -> bool {
    !halts.is_empty()
        && halts
            .iter()
            .any(|(p, at)| p.partition == record.partition && p.topic == record.topic_name && record.offset >= *at)
}

/// The batch's messages as the dead-letter limit sees them: per partition, in offset order, each with
/// the reason it would be set aside for, if it would.
fn seen<'a>(records: &[Record<'_>], letters: &'a [Letter]) -> BTreeMap<Partition, Vec<Seen<'a>>> {
    let reasons: HashMap<usize, &str> = letters.iter().map(|l| (l.origin, l.letter.reason.as_str())).collect();
    let mut by_partition: HashMap<(&str, i32), Vec<Seen<'a>>> = HashMap::new();
    for (i, record) in records.iter().enumerate() {
        let seen = by_partition.entry((record.topic_name, record.partition)).or_default();
        seen.push((record.offset, reasons.get(&i).copied()));
    }
    by_partition.into_iter().map(|((topic, partition), seen)| (Partition::new(topic, partition), seen)).collect()
}
