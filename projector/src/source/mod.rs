//! Everything the projector says to the broker, and the only code that knows librdkafka: the consumer
//! and its batches, which partitions it reads, the offsets it commits, how far behind it is, and the
//! dead-letter topics. Offsets are only ever committed for messages already applied or set aside.

mod assignment;
mod auth;
mod consumer;
mod dead_letter;
mod dead_letter_limit;
mod group;
mod offsets;
mod prerequisites;
mod reader;
mod recorded;
mod settings;
mod undelivered;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::error::KafkaError;
use shared::Topic;
use tokio::sync::watch;

pub use consumer::Batch;
pub use dead_letter::{
    dead_letter_topic, letter_at, list as list_dead_letters, replay as replay_dead_letters,
    to_replay as dead_letters_to_replay, DeadLetter, Listed as ListedLetter, ReplayError,
};
pub use dead_letter_limit::{DeadLetterLimit, Halt, LimitSettings, Seen};
pub use offsets::Progress;
pub use prerequisites::check as check_prerequisites;
pub use reader::Reader;
pub use settings::{KafkaOptions, Properties};

use crate::config::Config;
use crate::observe::Metrics;

/// A broker operation that failed, with what librdkafka said.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BrokerError(#[from] KafkaError);

impl BrokerError {
    /// Whether the broker may answer later (it is away, a request timed out), unlike a client that could
    /// not be made from its settings.
    pub fn is_passing(&self) -> bool {
        !matches!(self.0, KafkaError::ClientCreation(_) | KafkaError::ClientConfig(..))
    }
}

/// A partition of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Partition {
    pub topic: String,
    pub partition: i32,
}

impl Partition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self { topic: topic.into(), partition }
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// One message, whatever delivered it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Which of the three topics, and its configured name.
    pub topic: Topic,
    pub topic_name: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The message's timestamp (the producer's create time, or the broker's append time), in milliseconds
    /// since the Unix epoch, when it has one.
    pub timestamp_ms: Option<i64>,
}

/// How long the list of partitions is trusted before it is read again (partitions may be added).
const PARTITIONS_TTL: Duration = Duration::from_secs(30);

/// One projector's reader of the three topics and writer of their dead-letter topics.
pub struct Source {
    /// Taken only when the source is dropped (see its `Drop`).
    consumer: Option<consumer::LiveConsumer>,
    producer: consumer::Producer,
    /// The configured names of the three topics, in the order of [`Topic::ALL`].
    topics: [String; 3],
    batch_size: usize,
    linger: Duration,
    /// One past the last message applied, per partition: what a synchronous commit re-commits.
    applied: HashMap<Partition, i64>,
    /// The positions Redis holds: what a commit may reach ([`recorded`]).
    recorded: recorded::Recorded,
    /// The consumer group's id, as traces name it.
    group: String,
    /// Every partition of the three topics, and when that list was last read from the broker.
    partitions: Option<(Instant, Vec<Partition>)>,
    /// The partitions assigned by the last [`Source::assign`].
    assigned: BTreeSet<Partition>,
    /// Moves partitions past offsets with nothing to deliver.
    undelivered: undelivered::Passer,
    /// Which partitions set so many messages aside that they halted ([`dead_letter_limit`]).
    limit: DeadLetterLimit,
}

/// Writes a batch's dead letters, each with its message's headers.
pub struct DeadLetterWriter<'a>(&'a consumer::Producer);

impl DeadLetterWriter<'_> {
    /// Writes `letters` of `batch` and waits until the broker has them all.
    pub async fn write(&self, letters: &[DeadLetter], batch: &Batch) -> Result<(), BrokerError> {
        Ok(dead_letter::write(self.0, letters, batch).await?)
    }
}

/// How long a dropped group member's consumer may take to leave the group.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

impl Drop for Source {
    /// A group member's consumer leaves the group when dropped: librdkafka revokes its partitions and
    /// waits, polling, until the close is done, with no limit. Seen once with the mock coordinator, that
    /// close never ended, and a stopping projector with it. It is closed on a thread of its own, waited
    /// for up to [`CLOSE_WITHIN`], and otherwise left to end with the process.
    fn drop(&mut self) {
        let member = self.consumer.is_some() && self.group_share().is_some();
        let Some(consumer) = self.consumer.take() else { return };
        if !member {
            return drop(consumer);
        }
        let (closed, done) = std::sync::mpsc::channel();
        let closing = std::thread::Builder::new().name("consumer close".into()).spawn(move || {
            drop(consumer);
            let _ = closed.send(());
        });
        if closing.is_ok() && done.recv_timeout(CLOSE_WITHIN).is_err() {
            tracing::warn!(within = ?CLOSE_WITHIN, "the Kafka consumer did not leave its group in time; its session ends it");
        }
    }
}

impl Source {
    /// The live consumer (there until the source is dropped).
    fn consumer(&self) -> &consumer::LiveConsumer {
        self.consumer.as_ref().expect("the consumer until dropped")
    }

    pub fn connect(config: &Config, metrics: Arc<Metrics>) -> Result<Self, BrokerError> {
        Ok(Self {
            consumer: Some(consumer::consumer(config, metrics)?),
            producer: consumer::producer(config)?,
            topics: Topic::ALL.map(|t| config.topic_name(t).to_string()),
            batch_size: config.batch_size as usize,
            linger: config.linger(),
            applied: HashMap::new(),
            recorded: recorded::Recorded::default(),
            group: config.group_id.clone(),
            partitions: None,
            assigned: BTreeSet::new(),
            undelivered: undelivered::Passer::new(consumer::end_reader(config)?),
            limit: DeadLetterLimit::new(config.dead_letter_limit()),
        })
    }

    /// The next batch: waits at most `idle` for its first message. `None` when shut down meanwhile.
    pub async fn next_batch(&self, stopped: &mut watch::Receiver<bool>, idle: Duration) -> Option<Batch> {
        tokio::select! {
            _ = stopped.wait_for(|stop| *stop) => None,
            batch = consumer::next_batch(self.consumer(), &self.topics, self.batch_size, self.linger, idle) => Some(batch),
        }
    }

    /// The consumer group's id.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The writer of dead letters and the dead-letter limit, for one batch.
    pub fn dead_letters(&mut self) -> (DeadLetterWriter<'_>, &mut DeadLetterLimit) {
        (DeadLetterWriter(&self.producer), &mut self.limit)
    }

    /// The partitions halted by the dead-letter limit.
    pub fn halted(&self) -> &BTreeMap<Partition, Halt> {
        self.limit.halted()
    }

    /// Whether `record`'s partition is halted and waiting: none of its messages is to be taken.
    pub fn is_waiting(&self, record: &Record<'_>) -> bool {
        let halted = self.limit.halted();
        !halted.is_empty()
            && halted.keys().any(|p| p.partition == record.partition && p.topic == record.topic_name)
            && self.limit.is_waiting(&Partition::new(record.topic_name, record.partition))
    }

    /// Takes a batch as applied, but for the partitions that halted in it, which are taken up to where
    /// they halted and read no more until their wait is over; then commits what Redis holds the
    /// positions of ([`Source::recorded`]): asynchronously, or synchronously when `sync` (shutting down).
    /// A failed commit is logged, not fatal: applying the batch again after a restart changes nothing.
    pub fn commit(&mut self, batch: &Batch, halts: &[(Partition, i64)], sync: bool) -> Result<(), BrokerError> {
        let mut next = offsets::next_offsets(batch.records());
        next.retain(|partition, _| !self.limit.is_waiting(partition));
        next.extend(halts.iter().cloned());
        self.applied.extend(next);
        if sync {
            self.commit_applied();
        } else {
            self.commit_recorded();
        }
        if halts.is_empty() {
            return Ok(());
        }
        self.reposition()
    }

    /// Reads again, from where they stopped, the halted partitions whose wait is over; returns them.
    pub fn resume_due(&mut self) -> Result<Vec<Partition>, BrokerError> {
        let due = self.limit.due(Instant::now());
        if !due.is_empty() {
            self.reposition()?;
        }
        Ok(due)
    }

    /// Redis holds these positions now (a look recorded them): commits may reach them.
    pub fn recorded(&mut self, positions: HashMap<Partition, i64>) {
        self.recorded.hold(positions);
    }

    /// Commits, asynchronously, what was applied and is recorded, where it moved since the last commit
    /// (and everything now and then: [`recorded::RESEND_EVERY`]).
    pub fn commit_recorded(&mut self) {
        let offsets = self.recorded.committable(&self.applied, true, Instant::now());
        self.commit_offsets(offsets.iter().map(|(p, o)| (p, *o)), CommitMode::Async);
    }

    /// Commits, synchronously, every offset applied so far that Redis holds the position of (async
    /// commits may still be in flight); a group member's commits never wait.
    pub fn commit_applied(&mut self) {
        let offsets = self.recorded.committable(&self.applied, false, Instant::now());
        self.commit_offsets(offsets.iter().map(|(p, o)| (p, *o)), CommitMode::Sync);
    }

    fn commit_offsets<'a>(&self, offsets: impl IntoIterator<Item = (&'a Partition, i64)>, mode: CommitMode) {
        // A member commits only what the group gave it: a partition it gave up is another's to commit.
        // And never waits for a commit: one sent during a rebalance waits for the rebalance, which waits
        // for this consumer's next poll, which would never come (the read model's positions, not the
        // group's offsets, say where a member reads, and the close at shutdown sends what is in flight).
        let group = self.group_share();
        let mode = if group.is_some() { CommitMode::Async } else { mode };
        let ours = offsets.into_iter().filter(|(p, _)| group.as_ref().is_none_or(|g| g.contains(*p)));
        let list = match offsets::commit_list(ours) {
            Ok(list) if list.count() > 0 => list,
            Ok(_) => return,
            Err(e) => return tracing::warn!(error = %e, "offsets to commit are not valid"),
        };
        if let Err(e) = self.consumer().commit(&list, mode) {
            self.consumer().context().commit_failed(&e);
        }
    }

    /// One past the last message applied from a partition (0 when none was).
    pub fn applied_offset(&self, partition: &Partition) -> i64 {
        self.applied.get(partition).copied().unwrap_or(0)
    }

    /// Every partition of the three topics, read again from the broker every 30 s.
    pub fn partitions(&mut self) -> Result<&[Partition], BrokerError> {
        if self.partitions.as_ref().is_none_or(|(read, _)| read.elapsed() >= PARTITIONS_TTL) {
            let mut all = Vec::new();
            for topic in &self.topics {
                let ids = tokio::task::block_in_place(|| offsets::partitions(self.consumer(), topic))?;
                all.extend(ids.into_iter().map(|id| Partition::new(topic, id)));
            }
            self.partitions = Some((Instant::now(), all));
        }
        Ok(&self.partitions.as_ref().expect("partitions read above").1)
    }

    /// Reads `partitions` again from the given offsets (`None`: the earliest), the others going on from
    /// where they are. Messages already taken from the broker and not applied are dropped. The group's
    /// committed offsets go back with them: what Redis lost is not applied, and no reckoning of how far
    /// this projector got (its lag, a rebuild's handover, the next start's check) may count it.
    pub fn rewind(&mut self, partitions: &HashMap<Partition, Option<i64>>) -> Result<(), BrokerError> {
        // Every start is known before anything changes: a broker that fails to answer leaves the
        // partitions where they were, and the caller tries again. The earliest offsets are asked all at
        // once (one after the other, they took a quarter of a second each on the local broker).
        let ours: Vec<(&Partition, &Option<i64>)> =
            partitions.iter().filter(|(p, _)| self.assigned.contains(*p)).collect();
        let unknown: Vec<Partition> = ours.iter().filter(|(_, s)| s.is_none()).map(|(p, _)| (*p).clone()).collect();
        let earliest: HashMap<&Partition, i64> =
            unknown.iter().zip(self.watermarks(&unknown)?).map(|(p, w)| (p, w.0)).collect();
        let back: Vec<(Partition, i64)> =
            ours.iter().map(|(p, start)| ((*p).clone(), start.unwrap_or_else(|| earliest[*p]))).collect();
        self.applied.extend(back.iter().cloned());
        // Redis holds each start (it was read there), or nothing of a partition read from its earliest.
        self.recorded.hold(ours.iter().filter_map(|(p, start)| Some(((*p).clone(), (**start)?))));
        for (partition, _) in ours.iter().filter(|(_, start)| start.is_none()) {
            self.recorded.forget(partition);
        }
        self.commit_offsets(back.iter().map(|(p, o)| (p, *o)), CommitMode::Sync);
        self.reposition()
    }

    /// Moves the applied offset of the partitions that stay short of their end with nothing to deliver
    /// (transaction markers, aborted transactions; see [`undelivered`]) to their end, and commits it. To
    /// be called when a wait for messages brought none; it looks at most once a second. Returns the
    /// partitions moved, with their new offsets.
    pub fn pass_undelivered(&mut self) -> Result<Vec<(Partition, i64)>, BrokerError> {
        if !self.undelivered.due() {
            return Ok(Vec::new());
        }
        let ends = self.consumer().context().ends.lock().expect("partition ends").clone();
        // Only partitions the live consumer has fetched to their end, its queue of them empty: one still
        // being fetched (a replay behind a slow broker) has its messages coming, and reading it again
        // beside the live consumer would only load the broker twice.
        let drained = self.consumer().context().fetched_to_end.lock().expect("fetched to the end").clone();
        let standing: Vec<(Partition, i64, i64)> = self
            .assigned
            .iter()
            .filter(|p| drained.get(*p).copied().unwrap_or(false) && !self.limit.halted().contains_key(*p))
            .filter_map(|p| Some((p.clone(), self.applied.get(p).copied().unwrap_or(0), *ends.get(p)?)))
            .collect();
        let moved = tokio::task::block_in_place(|| self.undelivered.look(&standing))?;
        if !moved.is_empty() {
            // Committed once a look has recorded them.
            self.applied.extend(moved.iter().cloned());
        }
        Ok(moved)
    }

    /// Drops the messages taken from the broker and not applied: they are read again.
    pub fn drop_fetched(&mut self) -> Result<(), BrokerError> {
        self.reposition()
    }

    /// Where each assigned partition stands: one past the last message applied, or where reading started
    /// (a partition read from its earliest offset has none until a message of it is applied).
    pub fn positions(&self) -> HashMap<Partition, i64> {
        self.applied.iter().filter(|(p, _)| self.assigned.contains(*p)).map(|(p, o)| (p.clone(), *o)).collect()
    }

    /// The partitions this consumer reads.
    pub fn assigned(&self) -> &BTreeSet<Partition> {
        &self.assigned
    }

    /// The end (high watermark) of each of `partitions`, asked of the broker all at once.
    pub fn ends(&self, partitions: &[Partition]) -> Result<Vec<i64>, BrokerError> {
        Ok(self.watermarks(partitions)?.into_iter().map(|(_, high)| high).collect())
    }

    /// The low and high watermarks of each of `partitions`, asked of the broker all at once.
    fn watermarks(&self, partitions: &[Partition]) -> Result<Vec<(i64, i64)>, BrokerError> {
        let ask = |p: &Partition| self.consumer().fetch_watermarks(&p.topic, p.partition, offsets::BROKER_TIMEOUT);
        tokio::task::block_in_place(|| {
            std::thread::scope(|scope| {
                let asked: Vec<_> = partitions.iter().map(|p| scope.spawn(move || ask(p))).collect();
                asked.into_iter().map(|a| Ok(a.join().expect("watermark thread")?)).collect()
            })
        })
    }

    /// How many partitions this consumer reads now.
    pub fn assigned_partitions(&self) -> usize {
        self.consumer().assignment().map(|list| list.count()).unwrap_or(0)
    }

    /// Messages behind the end of every assigned partition, asked of the broker (a round trip per
    /// partition). `None` while nothing is assigned or a watermark is unknown.
    pub fn exact_lag(&self) -> Option<i64> {
        tokio::task::block_in_place(|| offsets::exact_lag(self.consumer(), &self.applied))
    }

    /// What this projector's own group has committed, per partition.
    pub fn committed(&self) -> Result<HashMap<Partition, i64>, BrokerError> {
        Ok(offsets::committed(self.progress()?))
    }

    /// What projectors of this group have committed, per partition: not an offset set by anything else.
    pub fn committed_by_projectors(&self) -> Result<HashMap<Partition, i64>, BrokerError> {
        let ours = self.progress()?.into_iter().filter(|p| p.by_projector);
        Ok(offsets::committed(ours.collect()))
    }

    fn progress(&self) -> Result<Vec<Progress>, BrokerError> {
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        Ok(tokio::task::block_in_place(|| offsets::progress(self.consumer(), &topics))?)
    }
}

/// Where consumer group `group` stands on every partition of the three topics.
pub fn group_progress(config: &Config, group: &str) -> Result<Vec<Progress>, BrokerError> {
    let names: Vec<&str> = Topic::ALL.iter().map(|t| config.topic_name(*t)).collect();
    let inspector = consumer::inspector(config, group)?;
    Ok(tokio::task::block_in_place(|| offsets::progress(&inspector, &names))?)
}

/// What consumer group `group` has committed, per partition of the three topics.
pub fn group_committed(config: &Config, group: &str) -> Result<HashMap<Partition, i64>, BrokerError> {
    Ok(offsets::committed(group_progress(config, group)?))
}

/// Messages waiting in each dead-letter topic.
pub fn dead_letter_depths(config: &Config) -> Result<Vec<(String, i64)>, BrokerError> {
    let inspector = consumer::inspector(config, &config.group_id)?;
    let mut depths = Vec::new();
    for topic in Topic::ALL {
        let dlq = dead_letter_topic(config.topic_name(topic));
        let depth = tokio::task::block_in_place(|| offsets::depth(&inspector, &dlq))?;
        depths.push((dlq, depth));
    }
    Ok(depths)
}
