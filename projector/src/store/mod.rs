//! The Redis side of the projector: applies groups of events to the read model, a few pipelined round
//! trips per batch and one atomic script per aggregate in its organization's slot, so no reader and no
//! crash sees half an event. Also connecting to Redis (`connect`) and a generation's digest.
//!
//! Per batch: (1) record each aggregate's organization (the first one wins, [`owners`]) and read its
//! state (`states`); (2) fold the events in memory ([`crate::fold`]), and read back the transcripts written
//! whole (`whole`: a served interview's, from layout 6); (3) write each aggregate with the script
//! ([`write`]), which checks the stored sequence is still the one the fold started from. A mismatch
//! (another instance applied events meanwhile, e.g. during a rebalance) re-reads and re-folds that
//! aggregate. A fold with a gap is written only once the [`Guard`] ([`guard`]) says Redis lost nothing.
//!
//! Also the positions and healing entries the read model holds itself ([`position`]), the aggregates late
//! for a gap (`late`), the repaired write of one aggregate (`repaired`, for [`crate::repair`](mod@crate::repair)),
//! and which of Redis's errors are worth trying again ([`StoreError`], in `error`). Which generation is
//! which, its layout and its deletion are [`crate::generation`]'s.

mod connect;
mod digest;
mod error;
mod guard;
mod late;
pub mod owners;
pub mod position;
mod repaired;
mod states;
mod whole;
mod write;

use std::collections::HashSet;

use redis::{Cmd, Value};
use shared::connection::Connection;
use shared::owners::Record;
use shared::{Event, Keyspace, Topic};

pub use connect::{check_no_eviction, connect, is_refused};
pub use digest::Digest;
pub use error::StoreError;
pub use guard::{Doubt, Guard};
pub use late::{late_aggregates, repair_command};

use crate::backoff::Paced;
use crate::fold::{fold, State, Verdict};
use crate::observe::Outcome;
use states::state_reads;
pub use write::{ReplyError, ScriptReply};
use write::{Write, WriteScript};

/// How many times one batch re-reads an aggregate that changed under it before giving up.
const MAX_ATTEMPTS: usize = 8;

/// The first pause before writing again an aggregate a repair holds (doubling to ten times this).
const HOLD_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// The longest a batch waits for repairs' holds before the batch is tried again from the start (a
/// repair renews its hold while it lives; one that died lets it expire within seconds).
const MAX_HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The events of one aggregate within a batch, in arrival order.
#[derive(Debug)]
pub struct Group<'a> {
    pub topic: Topic,
    pub aggregate_id: &'a str,
    pub events: Vec<&'a Event>,
}

/// What became of each event of a batch: its topic, its type and its outcome.
pub type Applied<'a> = Vec<(Topic, &'a str, Outcome)>;

pub struct Store {
    conn: Connection,
    keys: Keyspace,
    write: WriteScript,
    /// The epochs (organizations', the key index's) this projector wrote in this generation since the
    /// last loss: each write checks that its epoch, if here, still exists (see `write.lua`).
    epochs: HashSet<String>,
    /// The generation's layout, which decides how states are stored ([`crate::fold::stored`]): read from
    /// its meta before the first batch written to it.
    layout: Option<u32>,
    /// The owners recorded or read since the last loss ([`owners::Known`]).
    known: owners::Known,
    /// When to write again after Redis failed a write: the delay keeps growing across batches while Redis
    /// keeps failing (each failed batch is handed back to the live loop and read again).
    retry: Paced,
}

struct Pending<'a> {
    group: &'a Group<'a>,
    org: &'a str,
    events: Vec<&'a Event>,
    loaded: Option<(u64, State)>,
}

/// Records what became of each of `events`.
fn record<'a>(topic: Topic, events: &[&'a Event], outcome: impl Fn(usize) -> Outcome, applied: &mut Applied<'a>) {
    applied.extend(events.iter().enumerate().map(|(i, e)| (topic, e.envelope.kind.as_str(), outcome(i))));
}

impl Store {
    pub fn new(conn: Connection, keys: Keyspace) -> Self {
        Self {
            conn,
            keys,
            write: WriteScript::new(),
            epochs: HashSet::new(),
            layout: None,
            known: owners::Known::default(),
            retry: Paced::new(),
        }
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    /// When the next write is due after Redis failed one.
    pub(crate) fn retry_pace(&mut self) -> &mut Paced {
        &mut self.retry
    }

    pub fn set_generation(&mut self, generation: u64) {
        self.keys = self.keys.at(generation);
        self.epochs.clear();
        self.layout = None;
        self.known.clear();
    }

    /// A store of a generation whose layout the caller has read ([`check_layout`]): an operator
    /// command that refuses a layout before it does anything, then writes in it.
    pub fn of_layout(mut self, layout: u32) -> Self {
        self.layout = Some(layout);
        self
    }

    /// Forgets which epochs this projector wrote and which owners it knows: Redis lost data, and the
    /// projector reads again.
    pub fn forget_epochs(&mut self) {
        self.epochs.clear();
        self.known.clear();
    }

    /// The layout of the generation written, kept once read: it stays what it was if Redis loses the
    /// generation's meta later. A generation whose meta and positions hold no layout when read (layout
    /// 1, or Redis lost them before this projector looked) reads as layout 1, whose states are stored
    /// whole: readable by every release, and digested alike. That reading is not kept: the field is
    /// asked for again next time, since a projector writes it back once it marks the loss.
    pub async fn layout(&mut self) -> Result<u32, StoreError> {
        if let Some(layout) = self.layout {
            return Ok(layout);
        }
        let field = crate::generation::layout(&mut self.conn, &self.keys).await?;
        let layout = shared::layout::check(self.keys.generation(), field.as_deref(), "projector")?;
        if field.is_some() {
            self.layout = Some(layout);
        }
        Ok(layout)
    }

    /// The layout of the generation written, if it was read from a field ([`Store::layout`]): the only one
    /// recorded beside the positions, so that a layout read from an absence never overwrites the one
    /// every primary recorded.
    pub fn known_layout(&self) -> Option<u32> {
        self.layout
    }

    /// The connection, for the few reads and writes outside the apply path.
    pub fn conn(&self) -> Connection {
        self.conn.clone()
    }

    /// Applies every group; on error nothing is lost: applying the same batch again is idempotent.
    ///
    /// A fold with a gap is written only after `guard` looked again, once the states were read. A state
    /// read from a Redis that lost data just before (after the look that let the batch be written) is
    /// absent or older, and events folded onto it skip the sequences it lost: written, the aggregate would
    /// be wrong for good, since reading the partition again skips them as duplicates. A fold without a
    /// gap is right whatever happened before the read; a loss after the read makes the script find
    /// another sequence than the fold started from, and the aggregate is read again.
    pub async fn apply<'a>(
        &mut self,
        groups: &'a [Group<'a>],
        guard: &mut impl Guard,
    ) -> Result<Applied<'a>, StoreError> {
        let mut applied = Vec::new();
        if groups.is_empty() {
            // A batch of only poison messages or unknown types: nothing to write (and an empty pipeline
            // is an error in the client).
            return Ok(applied);
        }
        let layout = self.layout().await?;
        if let Some(known) = self.known_layout() {
            guard.layout(self.keys.generation(), known);
        }
        let mut pending = self.resolve_owners(groups, layout, &mut applied).await?;
        // The aggregates that got an event late for a gap, remembered once every write is done.
        let mut late = Vec::new();
        let mut attempts = 0;
        let held_since = std::time::Instant::now();
        let mut pause = HOLD_PAUSE;
        while attempts < MAX_ATTEMPTS {
            if pending.is_empty() {
                late::remember(&mut self.conn, &self.keys, &late).await?;
                return Ok(applied);
            }
            self.load_missing(&mut pending).await?;
            let held;
            (pending, held) = self.write(pending, layout, &mut applied, &mut late, guard).await?;
            // A repair holding an organization holds it for moments: waited out, not counted as an attempt.
            if held {
                if held_since.elapsed() > MAX_HOLD_WAIT {
                    return Err(StoreError::Held(pending[0].group.aggregate_id.to_string()));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(HOLD_PAUSE * 10);
            } else {
                attempts += 1;
            }
        }
        match pending.first() {
            Some(p) => Err(StoreError::Contended(p.group.aggregate_id.to_string())),
            None => {
                late::remember(&mut self.conn, &self.keys, &late).await?;
                Ok(applied)
            }
        }
    }

    /// Records the organization of every aggregate (first one wins) and reads the state of those whose
    /// first event belongs to it, in one round trip. Events of another organization are refused.
    async fn resolve_owners<'a>(
        &mut self,
        groups: &'a [Group<'a>],
        layout: u32,
        applied: &mut Applied<'a>,
    ) -> Result<Vec<Pending<'a>>, StoreError> {
        let mut commands = Vec::with_capacity(groups.len() * 4);
        // Per group: how many commands claim its owner, and where its replies end.
        let mut ends = Vec::with_capacity(groups.len());
        for group in groups {
            let first = &group.events[0].envelope.organization_id;
            let claim = match self.known.get(group.topic, group.aggregate_id) {
                Some(_) => Vec::new(),
                None => owners::claim(&Record::of(&self.keys, group.topic, group.aggregate_id, layout), first),
            };
            let claimed = claim.len();
            commands.extend(claim);
            commands.extend(state_reads(&self.keys, group.topic, first, group.aggregate_id));
            ends.push((claimed, commands.len()));
        }
        let replies = self.query(&commands).await?;
        let mut pending = Vec::with_capacity(groups.len());
        let mut start = 0;
        for (group, (claimed, end)) in groups.iter().zip(ends) {
            let (claim, states) = replies[start..end].split_at(claimed);
            start = end;
            let first = group.events[0].envelope.organization_id.as_str();
            let owner: Option<String> = match claim.last() {
                Some(reply) => {
                    let owner: Option<String> = redis::from_redis_value_ref(reply)?;
                    self.known.insert(group.topic, group.aggregate_id, owner.as_deref().unwrap_or(first));
                    owner
                }
                None => self.known.get(group.topic, group.aggregate_id).map(str::to_string),
            };
            // The recorded owner, as a string that lives as long as the batch: an event's (with none of
            // the batch's events of that organization, every event is refused).
            let org = match owner {
                Some(recorded) if recorded != first => {
                    group.events.iter().map(|e| e.envelope.organization_id.as_str()).find(|o| *o == recorded)
                }
                _ => Some(first),
            };
            let (events, refused): (Vec<&Event>, Vec<&Event>) =
                group.events.iter().partition(|e| Some(e.envelope.organization_id.as_str()) == org);
            if !refused.is_empty() {
                record(group.topic, &refused, |_| Outcome::Refused, applied);
                tracing::warn!(
                    topic = group.topic.default_name(),
                    aggregate = group.aggregate_id,
                    count = refused.len(),
                    "refused events of another organization than their aggregate's"
                );
            }
            let Some(org) = org else { continue };
            let loaded = if org == first { Some(self.decode_state(group, org, states)?) } else { None };
            pending.push(Pending { group, org, events, loaded });
        }
        Ok(pending)
    }

    /// Folds and writes every pending aggregate; returns those that changed under us or that a repair
    /// holds, and whether any was held. Those done that got a late event are added to `late`.
    async fn write<'a>(
        &mut self,
        pending: Vec<Pending<'a>>,
        layout: u32,
        applied: &mut Applied<'a>,
        late: &mut Vec<late::Late<'a>>,
        guard: &mut impl Guard,
    ) -> Result<(Vec<Pending<'a>>, bool), StoreError> {
        let mut folds = Vec::with_capacity(pending.len());
        for p in pending {
            let (sequence, state) = p.loaded.clone().expect("loaded before writing");
            let served_before = state.is_served_interview();
            let (folded, verdicts) = fold(p.group.aggregate_id, sequence, state, &p.events);
            // Nothing to write when every event is a duplicate or late (which is remembered all the same).
            if verdicts.iter().all(|v| matches!(v, Verdict::Duplicate | Verdict::Late)) {
                record(p.group.topic, &p.events, |i| verdicts[i].into(), applied);
                late.extend(late::Late::of(p.group.topic, p.group.aggregate_id, p.org, &p.events, &verdicts));
                continue;
            }
            folds.push((p, sequence, served_before, folded, verdicts));
        }
        let whole: Vec<_> =
            folds.iter().map(|(p, _, before, folded, _)| (p.org, p.group.aggregate_id, *before, folded)).collect();
        let replacements = self.replacements(&whole, layout).await?;
        let mut commands = Vec::with_capacity(folds.len());
        let mut written = Vec::with_capacity(folds.len());
        for ((p, sequence, _, folded, verdicts), replacement) in folds.into_iter().zip(replacements) {
            let epoch = match p.group.topic {
                Topic::ApiKey => self.keys.api_key_epoch(),
                _ => self.keys.org_epoch(p.org),
            };
            let write = Write {
                topic: p.group.topic,
                org: p.org,
                aggregate_id: p.group.aggregate_id,
                expected: sequence,
                folded: &folded,
                epoch_written: self.epochs.contains(&epoch),
                repair: None,
                layout,
                as_of_micros: p.events.iter().map(|e| e.envelope.occurred_at.timestamp_micros()).max().unwrap_or(0),
                replacement: replacement.as_ref(),
            };
            commands.push(self.write.invocation(&self.keys, &write));
            let sets_epoch = write.sets_epoch();
            written.push((p, verdicts, epoch, sets_epoch));
        }
        if written.is_empty() {
            return Ok((Vec::new(), false));
        }
        if written.iter().any(|(_, verdicts, _, _)| verdicts.contains(&Verdict::Gap)) {
            guard.check(&self.keys).await.map_err(StoreError::Doubted)?;
        }
        let replies = self.query(&commands).await?;
        let mut conflicts = Vec::new();
        let mut lost = None;
        let mut held = false;
        for ((mut p, verdicts, epoch, sets_epoch), reply) in written.into_iter().zip(replies) {
            let reply = WriteScript::reply(reply)?;
            if sets_epoch && matches!(reply, ScriptReply::Applied | ScriptReply::ClaimRefused) {
                self.epochs.insert(epoch.clone());
            }
            if matches!(reply, ScriptReply::Applied | ScriptReply::ClaimRefused) {
                late.extend(late::Late::of(p.group.topic, p.group.aggregate_id, p.org, &p.events, &verdicts));
            }
            match reply {
                ScriptReply::Lost => lost = Some(epoch),
                ScriptReply::Applied => record(p.group.topic, &p.events, |i| verdicts[i].into(), applied),
                ScriptReply::ClaimRefused => {
                    tracing::warn!(key = p.group.aggregate_id, "refused a key's claim on a hash another key id holds");
                    let claimed = |i: usize| {
                        let created = p.events[i].envelope.kind == "api_key.created";
                        if created && !matches!(verdicts[i], Verdict::Duplicate | Verdict::Late) {
                            Outcome::Refused
                        } else {
                            verdicts[i].into()
                        }
                    };
                    record(p.group.topic, &p.events, claimed, applied);
                }
                ScriptReply::Conflict(stored) => {
                    tracing::debug!(
                        aggregate = p.group.aggregate_id,
                        stored,
                        "aggregate changed meanwhile; re-reading"
                    );
                    p.loaded = None;
                    conflicts.push(p);
                }
                ScriptReply::Held => {
                    // Read again: the repair swaps in another state and sequence.
                    p.loaded = None;
                    held = true;
                    conflicts.push(p);
                }
            }
        }
        match lost {
            Some(epoch) => Err(StoreError::Lost(epoch)),
            None => Ok((conflicts, held)),
        }
    }

    /// Runs a batch of commands, loading the write script first if Redis lost it (after a restart, a
    /// failover, or a slot moving to a node that never ran it). Running a batch again is harmless: every
    /// write checks the sequence it started from.
    async fn query(&mut self, commands: &[Cmd]) -> Result<Vec<Value>, StoreError> {
        match self.conn.query_all(commands).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.write.load().load_async(&mut self.conn).await?;
                Ok(self.conn.query_all(commands).await?)
            }
            other => Ok(other?),
        }
    }
}

/// A command of one key.
pub(crate) fn one(name: &str, key: &str) -> Cmd {
    let mut cmd = redis::cmd(name);
    cmd.arg(key);
    cmd
}
