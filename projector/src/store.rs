//! Applies batches of events to the Redis read model: a few pipelined round trips per batch, and one
//! atomic script per aggregate in its organization's slot, so no reader and no crash sees half an event.
//!
//! Per batch: (1) record each aggregate's organization (`SET NX GET`, the first one wins) and read its
//! state; (2) fold the events in memory ([`crate::aggregate::fold`]); (3) write each aggregate with a
//! script that checks the stored sequence is still the one the fold started from. A mismatch (another
//! instance applied events meanwhile, e.g. during a rebalance) re-reads and re-folds that aggregate.

use std::collections::HashMap;

use redis::aio::ConnectionLike;
use redis::{Cmd, Script, Value};
use shared::connection::Connection;
use shared::{Event, Keyspace, Topic};

use crate::aggregate::{fold_with_verdicts, IndexChange, Outcome, State, Tally, TranscriptChange, Verdict};
use crate::transcript;

/// How many times one batch re-reads an aggregate that changed under it before giving up.
const MAX_ATTEMPTS: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from redis: {0}")]
    Reply(#[from] redis::ParsingError),
    #[error("stored state of {key} is unreadable: {reason}")]
    CorruptState { key: String, reason: String },
    #[error("aggregate {0} kept changing under the projector")]
    Contended(String),
}

/// The events of one aggregate within a batch, in arrival order.
#[derive(Debug)]
pub struct Group<'a> {
    pub topic: Topic,
    pub aggregate_id: &'a str,
    pub events: Vec<&'a Event>,
}

/// What a batch did, for the counters.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    pub tally: Tally,
    /// Events refused because their organization differs from the one recorded for their aggregate.
    pub refused: u64,
    /// Events by topic, type and verdict (`applied`, `gap`, `duplicate`, `refused`).
    pub by_kind: HashMap<(Topic, String, Verdict), u64>,
}

impl Applied {
    fn count(&mut self, topic: Topic, events: &[&Event], verdict: impl Fn(usize) -> Verdict) {
        for (i, event) in events.iter().enumerate() {
            *self.by_kind.entry((topic, event.envelope.kind.clone(), verdict(i))).or_default() += 1;
        }
    }
}

const WRITE: &str = include_str!("write.lua");

pub struct Store {
    conn: Connection,
    keys: Keyspace,
    write: Script,
}

struct Pending<'a> {
    group: &'a Group<'a>,
    org: &'a str,
    events: Vec<&'a Event>,
    loaded: Option<(u64, State)>,
}

impl Store {
    pub fn new(conn: Connection, keys: Keyspace) -> Self {
        Self { conn, keys, write: Script::new(WRITE) }
    }

    pub fn keys(&self) -> &Keyspace {
        &self.keys
    }

    pub fn set_generation(&mut self, generation: u64) {
        self.keys = self.keys.at(generation);
    }

    /// The connection, for the few reads and writes outside the apply path.
    pub fn conn(&self) -> Connection {
        self.conn.clone()
    }

    /// Applies every group; on error nothing is lost: applying the same batch again is idempotent.
    pub async fn apply(&mut self, groups: &[Group<'_>]) -> Result<Applied, StoreError> {
        let mut applied = Applied::default();
        if groups.is_empty() {
            // A batch of only poison messages or unknown types: nothing to write (and an empty pipeline
            // is an error in the client).
            return Ok(applied);
        }
        let mut pending = self.resolve_owners(groups, &mut applied).await?;
        for _ in 0..MAX_ATTEMPTS {
            if pending.is_empty() {
                return Ok(applied);
            }
            self.load_missing(&mut pending).await?;
            pending = self.write(pending, &mut applied).await?;
        }
        match pending.first() {
            Some(p) => Err(StoreError::Contended(p.group.aggregate_id.to_string())),
            None => Ok(applied),
        }
    }

    /// Records the organization of every aggregate (first one wins) and reads the state of those whose
    /// first event belongs to it, in one round trip.
    async fn resolve_owners<'a>(
        &mut self,
        groups: &'a [Group<'a>],
        applied: &mut Applied,
    ) -> Result<Vec<Pending<'a>>, StoreError> {
        let mut commands = Vec::with_capacity(groups.len() * 2);
        for group in groups {
            let first = &group.events[0].envelope.organization_id;
            let mut set = redis::cmd("SET");
            set.arg(self.keys.owner(group.topic, group.aggregate_id)).arg(first).arg("NX").arg("GET");
            commands.push(set);
            commands.push(hmget_state(self.state_key(group, first)));
        }
        let replies = self.query(&commands).await?;
        let mut pending = Vec::with_capacity(groups.len());
        for (group, pair) in groups.iter().zip(replies.chunks(2)) {
            let first = group.events[0].envelope.organization_id.as_str();
            let owner: Option<String> = redis::from_redis_value_ref(&pair[0])?;
            let org = match owner {
                Some(recorded) if recorded != first => {
                    // Rare: the batch starts with a refused event. Keep the recorded owner's string alive by
                    // finding an event of that organization; with none, every event is refused.
                    match group.events.iter().find(|e| e.envelope.organization_id == recorded) {
                        Some(e) => e.envelope.organization_id.as_str(),
                        None => {
                            applied.refused += group.events.len() as u64;
                            applied.count(group.topic, &group.events, |_| "refused");
                            warn_refused(group, &recorded, group.events.len());
                            continue;
                        }
                    }
                }
                _ => first,
            };
            let events: Vec<&Event> =
                group.events.iter().copied().filter(|e| e.envelope.organization_id == org).collect();
            let refused = group.events.len() - events.len();
            if refused > 0 {
                applied.refused += refused as u64;
                warn_refused(group, org, refused);
            }
            let loaded = if org == first { Some(self.decode_state(group, org, &pair[1])?) } else { None };
            pending.push(Pending { group, org, events, loaded });
        }
        Ok(pending)
    }

    async fn load_missing(&mut self, pending: &mut [Pending<'_>]) -> Result<(), StoreError> {
        let missing: Vec<usize> = (0..pending.len()).filter(|&i| pending[i].loaded.is_none()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let commands: Vec<Cmd> =
            missing.iter().map(|&i| hmget_state(self.state_key(pending[i].group, pending[i].org))).collect();
        let replies = self.query(&commands).await?;
        for (&i, reply) in missing.iter().zip(&replies) {
            pending[i].loaded = Some(self.decode_state(pending[i].group, pending[i].org, reply)?);
        }
        Ok(())
    }

    /// Folds and writes every pending aggregate; returns those that changed under us.
    async fn write<'a>(
        &mut self,
        pending: Vec<Pending<'a>>,
        applied: &mut Applied,
    ) -> Result<Vec<Pending<'a>>, StoreError> {
        let mut commands = Vec::new();
        let mut written = Vec::new();
        for p in pending {
            let (sequence, state) = p.loaded.clone().expect("loaded before writing");
            let (outcome, tally, verdicts) = fold_with_verdicts(p.group.aggregate_id, sequence, state, &p.events);
            if tally.applied == 0 {
                applied.tally.duplicates += tally.duplicates;
                applied.count(p.group.topic, &p.events, |_| "duplicate");
                continue;
            }
            commands.push(self.invocation(&p, sequence, &outcome));
            written.push((p, tally, verdicts));
        }
        if written.is_empty() {
            return Ok(Vec::new());
        }
        let replies = self.query(&commands).await?;
        let mut conflicts = Vec::new();
        for ((mut p, tally, verdicts), reply) in written.into_iter().zip(replies) {
            let reply: i64 = redis::from_redis_value(reply)?;
            if reply < 0 {
                applied.count(p.group.topic, &p.events, |i| verdicts[i]);
                applied.tally.applied += tally.applied;
                applied.tally.duplicates += tally.duplicates;
                applied.tally.gaps += tally.gaps;
            } else {
                tracing::debug!(
                    aggregate = p.group.aggregate_id,
                    stored = reply,
                    "aggregate changed meanwhile; re-reading"
                );
                p.loaded = None;
                conflicts.push(p);
            }
        }
        Ok(conflicts)
    }

    /// The write script's call for one aggregate; its four keys are in the organization's slot.
    fn invocation(&self, p: &Pending<'_>, expected: u64, outcome: &Outcome) -> Cmd {
        let (topic, id, org) = (p.group.topic, p.group.aggregate_id, p.org);
        let state_key = self.state_key(p.group, org);
        let index_key = match (&outcome.state, &outcome.index) {
            (_, IndexChange::None) => state_key.clone(),
            (State::Study(_), _) => self.keys.studies(org),
            (State::Interview(i), _) => self.keys.interviews(org, i.study_id.as_deref().unwrap_or_default()),
            (State::ApiKey(k), _) => self.keys.api_key_sha(k.sha256.as_deref().unwrap_or_default()),
        };
        let (documents_key, document_op) = match (topic, &outcome.document) {
            (Topic::ApiKey, _) => (state_key.clone(), "none"),
            (Topic::Study, doc) => (self.keys.study_documents(org), if doc.is_some() { "set" } else { "delete" }),
            (Topic::Interview, doc) => {
                (self.keys.interview_documents(org), if doc.is_some() { "set" } else { "delete" })
            }
        };
        let transcripts_key = match topic {
            Topic::Interview => self.keys.transcripts(org),
            _ => state_key.clone(),
        };
        let (op, score_or_org) = match &outcome.index {
            IndexChange::None => ("none", String::new()),
            IndexChange::Add(score) => ("add", format!("{}", *score as i64)),
            IndexChange::Remove => ("remove", String::new()),
            IndexChange::KeyLive => ("key-live", org.to_string()),
            IndexChange::KeyRevoked => ("key-revoked", String::new()),
        };
        let (transcript_op, cues) = match &outcome.transcript {
            TranscriptChange::Keep => ("keep", ""),
            TranscriptChange::Append(cues) => ("append", cues.as_str()),
            TranscriptChange::Delete => ("delete", ""),
        };
        let state = serde_json::to_string(&outcome.state).expect("state always serializes");
        let mut invocation = redis::cmd("EVALSHA");
        invocation
            .arg(self.write.get_hash())
            .arg(4)
            .arg(state_key)
            .arg(index_key)
            .arg(documents_key)
            .arg(transcripts_key)
            .arg(expected)
            .arg(outcome.sequence)
            .arg(state)
            .arg(id)
            .arg(document_op)
            .arg(outcome.document.as_deref().unwrap_or(""))
            .arg(op)
            .arg(score_or_org)
            .arg(transcript_op)
            .arg(cues)
            .arg(transcript::HEADER);
        invocation
    }

    fn state_key(&self, group: &Group<'_>, org: &str) -> String {
        self.keys.aggregate(group.topic, org, group.aggregate_id)
    }

    fn decode_state(&self, group: &Group<'_>, org: &str, reply: &Value) -> Result<(u64, State), StoreError> {
        let (seq, state): (Option<u64>, Option<String>) = redis::from_redis_value_ref(reply)?;
        let state = match state {
            Some(json) => State::decode(group.topic, &json)
                .map_err(|e| StoreError::CorruptState { key: self.state_key(group, org), reason: e.to_string() })?,
            None => State::new(group.topic),
        };
        Ok((seq.unwrap_or(0), state))
    }

    /// Runs a batch of commands, loading the write script first if Redis lost it (after a restart, a
    /// failover, or a slot moving to a node that never ran it). Running a batch again is harmless: every
    /// write checks the sequence it started from.
    async fn query(&mut self, commands: &[Cmd]) -> Result<Vec<Value>, StoreError> {
        match self.conn.query_all(commands).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.write.prepare_invoke().load_async(&mut self.conn).await?;
                Ok(self.conn.query_all(commands).await?)
            }
            other => Ok(other?),
        }
    }
}

/// Reads an aggregate's stored sequence and state.
fn hmget_state(key: String) -> Cmd {
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(key).arg("seq").arg("state");
    cmd
}

fn warn_refused(group: &Group<'_>, owner: &str, count: usize) {
    tracing::warn!(
        topic = group.topic.default_name(),
        aggregate = group.aggregate_id,
        owner,
        count,
        "refused events of another organization"
    );
}

/// The generation the projector writes to: the active one, which is set to 1 if there is none yet.
pub async fn active_generation<C: ConnectionLike + Send>(conn: &mut C, prefix: &str) -> redis::RedisResult<u64> {
    let key = Keyspace::active_generation(prefix);
    let (generation,): (u64,) =
        redis::pipe().cmd("SET").arg(&key).arg(1).arg("NX").ignore().cmd("GET").arg(&key).query_async(conn).await?;
    Ok(generation)
}
