//! A loss of read-model data, as the projector finds it and the API reads it back. The projector names
//! each loss in the generation's healing entries (`Keyspace::healing`), which are text in Redis; every
//! projector derives the same words from the same facts, so that they answer a loss once, and the API
//! learns from them which slots to answer 503 for while the read model heals. Between functions a loss is
//! this type; its text form, which entries already in Redis use, is read and written here only.

use std::fmt;

use crate::scope::Scope;

/// Inclusive ranges of cluster slots; none: the loss names no slots (one Redis, or it cannot tell).
pub type Slots = Vec<(u16, u16)>;

/// One loss, with what the projector saw.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Loss {
    /// A primary flushed (the same process, its flush count higher).
    Flush { node: String, run_id: String, flushes: u64, slots: Slots },
    /// A primary with another replication history: a replica meanwhile, its data replaced by a full
    /// synchronization, and promoted again.
    Resynchronized { node: String, run_id: String, replid: String, slots: Slots },
    /// A process never seen at an address that had one: restarted, or a replica promoted in its place.
    Restart { node: String, run_id: String, slots: Slots },
    /// A primary new to the cluster serving the slots of one that went away.
    Failover { node: String, run_id: String, slots: Slots },
    /// The positions the read model held for a partition (`first`) are gone.
    PositionsLost { first: String, generation: u64, slots: Slots },
    /// At start, the read model holds positions behind the consumer group's commits on `partitions`
    /// partitions (`first` described), on the primaries serving `slots`: lost while no projector looked.
    PositionsBehind { partitions: usize, first: String, generation: u64, slots: Slots },
    /// A live projector that followed a switch to `generation` found it holding less than it had applied
    /// on `partitions` partitions (`first` described): Redis lost what the rebuild wrote before its switch,
    /// or the projector wrote to an older generation for a while.
    SwitchedShort { partitions: usize, first: String, generation: u64 },
    /// An epoch this projector wrote is gone (a write found it so).
    EpochGone { key: String },
    /// The active generation found behind the one this projector writes (a restore of Redis).
    GenerationBack { from: u64, to: u64 },
    /// The generation's healing state (`Keyspace::healing`, from layout 4 on) was found without its
    /// `opened` field: Redis lost it with its primary, and with it whatever losses were still being healed.
    /// Every slot: which ones were healing is not known.
    HealingLost { generation: u64 },
    /// A projector started without the active generation's pointer while Redis still held `generation`
    /// (the highest it held): the pointer was lost with its primary, not the read model. It is put back,
    /// and the generation projected again, since what else went with that primary is not known.
    PointerLost { generation: u64 },
    /// A read model that has never been complete.
    NewReadModel,
    /// Words this version does not know (an entry written by another): every slot.
    Other(String),
}

/// How a loss names its slots: ` slots=0-5460,10923-16383`.
const MARK: &str = " slots=";

impl Loss {
    /// The slots it touched: its own, or every slot when it names none.
    pub fn scope(&self) -> Scope {
        match self {
            Loss::Flush { slots, .. }
            | Loss::Resynchronized { slots, .. }
            | Loss::Restart { slots, .. }
            | Loss::Failover { slots, .. }
            | Loss::PositionsLost { slots, .. }
            | Loss::PositionsBehind { slots, .. }
                if !slots.is_empty() =>
            {
                Scope::slots(slots.clone())
            }
            _ => Scope::everything(),
        }
    }

    /// A flush: the one loss Redis's eviction policy cannot have caused.
    pub fn is_flush(&self) -> bool {
        matches!(self, Loss::Flush { .. })
    }
}

/// The words that end a loss naming `slots`; nothing when there are none.
fn describe(slots: &[(u16, u16)]) -> String {
    if slots.is_empty() {
        return String::new();
    }
    let ranges: Vec<String> = slots.iter().map(|(low, high)| format!("{low}-{high}")).collect();
    format!("{MARK}{}", ranges.join(","))
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::Flush { node, run_id, flushes, slots } => {
                write!(f, "flush of {node} ({run_id} {flushes}){}", describe(slots))
            }
            Loss::Resynchronized { node, run_id, replid, slots } => {
                write!(f, "new replication history of {node} ({run_id} {replid}){}", describe(slots))
            }
            Loss::Restart { node, run_id, slots } => write!(f, "restart of {node} ({run_id}){}", describe(slots)),
            Loss::Failover { node, run_id, slots } => write!(f, "failover to {node} ({run_id}){}", describe(slots)),
            Loss::PositionsLost { first, generation, slots } => {
                write!(f, "positions lost on {first} of generation {generation}{}", describe(slots))
            }
            Loss::PositionsBehind { partitions, first, generation, slots } => write!(
                f,
                "positions behind the group's commits at start on {partitions} partitions ({first}) of generation \
                 {generation}{}",
                describe(slots)
            ),
            Loss::SwitchedShort { partitions, first, generation } => write!(
                f,
                "a switch to generation {generation} holding less than was applied on {partitions} partitions ({first})"
            ),
            Loss::EpochGone { key } => write!(f, "{key} is gone"),
            Loss::GenerationBack { from, to } => write!(f, "the active generation went back from {from} to {to}"),
            Loss::HealingLost { generation } => write!(f, "the healing state of generation {generation} was lost"),
            Loss::PointerLost { generation } => {
                write!(f, "the active generation's pointer was lost while generation {generation} held keys")
            }
            Loss::NewReadModel => f.write_str("a new read model"),
            Loss::Other(words) => f.write_str(words),
        }
    }
}

impl Loss {
    /// Reads one loss as [`Display`](fmt::Display) wrote it; words it does not know are [`Loss::Other`].
    pub fn parse(text: &str) -> Self {
        Self::known(text).unwrap_or_else(|| Loss::Other(text.to_string()))
    }

    fn known(text: &str) -> Option<Self> {
        if text == "a new read model" {
            return Some(Loss::NewReadModel);
        }
        let (body, slots) = match text.rsplit_once(MARK) {
            Some((body, named)) => (body, slots_of(named)?),
            None => (text, Vec::new()),
        };
        // `<words> <node> (<run id>[ <detail>])`
        let node_and_ids = |prefix: &str| -> Option<(String, String, Option<String>)> {
            let rest = body.strip_prefix(prefix)?;
            let (node, ids) = rest.split_once(" (")?;
            let ids = ids.strip_suffix(')')?;
            let (run_id, detail) = match ids.split_once(' ') {
                Some((run_id, detail)) => (run_id, Some(detail.to_string())),
                None => (ids, None),
            };
            Some((node.to_string(), run_id.to_string(), detail))
        };
        let loss = if let Some((node, run_id, Some(flushes))) = node_and_ids("flush of ") {
            Loss::Flush { node, run_id, flushes: flushes.parse().ok()?, slots }
        } else if let Some((node, run_id, Some(replid))) = node_and_ids("new replication history of ") {
            Loss::Resynchronized { node, run_id, replid, slots }
        } else if let Some((node, run_id, None)) = node_and_ids("restart of ") {
            Loss::Restart { node, run_id, slots }
        } else if let Some((node, run_id, None)) = node_and_ids("failover to ") {
            Loss::Failover { node, run_id, slots }
        } else if let Some(rest) = body.strip_prefix("positions lost on ") {
            let (first, generation) = rest.rsplit_once(" of generation ")?;
            Loss::PositionsLost { first: first.to_string(), generation: generation.parse().ok()?, slots }
        } else if let Some(rest) = body.strip_prefix("positions behind the group's commits at start on ") {
            let (partitions, rest) = rest.split_once(" partitions (")?;
            let (first, generation) = rest.rsplit_once(") of generation ")?;
            let (partitions, generation) = (partitions.parse().ok()?, generation.parse().ok()?);
            Loss::PositionsBehind { partitions, first: first.to_string(), generation, slots }
        } else if let Some(rest) = body.strip_prefix("a switch to generation ") {
            let (generation, rest) = rest.split_once(" holding less than was applied on ")?;
            let (partitions, first) = rest.split_once(" partitions (")?;
            let first = first.strip_suffix(')')?;
            let (partitions, generation) = (partitions.parse().ok()?, generation.parse().ok()?);
            Loss::SwitchedShort { partitions, first: first.to_string(), generation }
        } else if let Some(rest) = body.strip_prefix("the active generation went back from ") {
            let (from, to) = rest.split_once(" to ")?;
            Loss::GenerationBack { from: from.parse().ok()?, to: to.parse().ok()? }
        } else if let Some(generation) =
            body.strip_prefix("the healing state of generation ").and_then(|rest| rest.strip_suffix(" was lost"))
        {
            Loss::HealingLost { generation: generation.parse().ok()? }
        } else if let Some(generation) = body
            .strip_prefix("the active generation's pointer was lost while generation ")
            .and_then(|rest| rest.strip_suffix(" held keys"))
        {
            Loss::PointerLost { generation: generation.parse().ok()? }
        } else if let Some(key) = body.strip_suffix(" is gone") {
            Loss::EpochGone { key: key.to_string() }
        } else {
            return None;
        };
        // Only what reads back as written: anything else stays the words it was.
        (loss.to_string() == text).then_some(loss)
    }
}

fn slots_of(named: &str) -> Option<Slots> {
    let ranges: Option<Slots> = named
        .split(',')
        .map(|range| {
            let (low, high) = range.split_once('-')?;
            Some((low.parse().ok()?, high.parse().ok()?))
        })
        .collect();
    ranges.filter(|ranges| !ranges.is_empty())
}

/// Losses found at once, answered as one (written joined by `"; "`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Losses(pub Vec<Loss>);

impl Losses {
    pub fn one(loss: Loss) -> Self {
        Self(vec![loss])
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// These and then `later`.
    pub fn and(mut self, later: Losses) -> Self {
        self.0.extend(later.0);
        self
    }

    /// Every slot any of them touched.
    pub fn scope(&self) -> Scope {
        let mut scope = Scope::nothing();
        for loss in &self.0 {
            scope.add(&loss.scope());
        }
        if self.0.is_empty() {
            return Scope::everything();
        }
        scope
    }

    /// Whether each is a flush.
    pub fn are_flushes(&self) -> bool {
        self.0.iter().all(Loss::is_flush)
    }

    /// Reads losses as [`Display`](fmt::Display) wrote them.
    pub fn parse(text: &str) -> Self {
        Self(text.split("; ").map(Loss::parse).collect())
    }
}

impl fmt::Display for Losses {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, loss) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{loss}")?;
        }
        Ok(())
    }
}

/// A healing entry's value: the offset a partition must reach (none for the entry of the whole
/// generation) and the losses it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealingEntry {
    pub target: Option<i64>,
    pub losses: Losses,
}

impl HealingEntry {
    pub fn encode(&self) -> String {
        match self.target {
            Some(target) => format!("{target} {}", self.losses),
            None => self.losses.to_string(),
        }
    }

    /// A partition's entry (`<target> <losses>`), or the whole generation's (`<losses>`).
    pub fn decode(value: &str) -> Self {
        match value.split_once(' ').and_then(|(target, rest)| Some((target.parse().ok()?, rest))) {
            Some((target, rest)) => Self { target: Some(target), losses: Losses::parse(rest) },
            None => Self { target: None, losses: Losses::parse(value) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_kind() -> Vec<Loss> {
        let (node, run_id) = ("127.0.0.1:7001".to_string(), "abc".to_string());
        vec![
            Loss::Flush {
                node: node.clone(),
                run_id: run_id.clone(),
                flushes: 3,
                slots: vec![(0, 5460), (10923, 10999)],
            },
            Loss::Resynchronized { node: node.clone(), run_id: run_id.clone(), replid: "r1".into(), slots: vec![] },
            Loss::Restart { node: node.clone(), run_id: run_id.clone(), slots: vec![(1, 2)] },
            Loss::Failover { node, run_id, slots: vec![(5461, 10922)] },
            Loss::PositionsLost { first: "t-study/2".into(), generation: 4, slots: vec![(100, 200)] },
            Loss::PositionsBehind {
                partitions: 2,
                first: "t/0 at nothing below 7".into(),
                generation: 1,
                slots: vec![],
            },
            Loss::PositionsBehind {
                partitions: 1,
                first: "t/1 at 3 below 7".into(),
                generation: 2,
                slots: vec![(0, 5460)],
            },
            Loss::SwitchedShort { partitions: 3, first: "t/1 at 4 below 9".into(), generation: 2 },
            Loss::EpochGone { key: "rm:g1:{o}:epoch".into() },
            Loss::GenerationBack { from: 3, to: 2 },
            Loss::HealingLost { generation: 5 },
            Loss::PointerLost { generation: 6 },
            Loss::NewReadModel,
        ]
    }

    #[test]
    fn every_loss_reads_back_as_written_and_its_words_are_those_of_entries_already_in_redis() {
        for loss in every_kind() {
            assert_eq!(Loss::parse(&loss.to_string()), loss, "{loss}");
        }
        let words = [
            "flush of 127.0.0.1:7001 (abc 3) slots=0-5460,10923-10999",
            "new replication history of 127.0.0.1:7001 (abc r1)",
            "restart of 127.0.0.1:7001 (abc) slots=1-2",
            "failover to 127.0.0.1:7001 (abc) slots=5461-10922",
            "positions lost on t-study/2 of generation 4 slots=100-200",
            "positions behind the group's commits at start on 2 partitions (t/0 at nothing below 7) of generation 1",
            "positions behind the group's commits at start on 1 partitions (t/1 at 3 below 7) of generation 2 slots=0-5460",
            "a switch to generation 2 holding less than was applied on 3 partitions (t/1 at 4 below 9)",
            "rm:g1:{o}:epoch is gone",
            "the active generation went back from 3 to 2",
            "the healing state of generation 5 was lost",
            "the active generation's pointer was lost while generation 6 held keys",
            "a new read model",
        ];
        for (loss, words) in every_kind().iter().zip(words) {
            assert_eq!(loss.to_string(), words);
        }
        let all = Losses(every_kind());
        assert_eq!(Losses::parse(&all.to_string()), all);
    }

    #[test]
    fn a_loss_naming_its_slots_touched_only_those_and_one_naming_none_or_unknown_words_touched_everything() {
        let scope = Loss::parse("flush of a (x 1) slots=0-5460,10923-10999").scope();
        assert!(scope.contains(0) && scope.contains(5460) && scope.contains(10950));
        assert!(!scope.contains(5461) && !scope.contains(16383) && !scope.is_everything());
        assert!(Loss::NewReadModel.scope().is_everything());
        assert!(Loss::HealingLost { generation: 2 }.scope().is_everything(), "which slots healed is not known");
        assert!(Loss::parse("positions lost on p/1 of generation 2").scope().contains(12345));
        for garbage in ["x slots=1-", "x slots=", "restart of a (x) slots=9-z", "somebody else's words"] {
            let loss = Loss::parse(garbage);
            assert_eq!(loss, Loss::Other(garbage.into()));
            assert_eq!(loss.to_string(), garbage, "unknown words are kept as they were");
            assert!(loss.scope().is_everything(), "{garbage}");
        }
    }

    #[test]
    fn losses_touch_every_slot_one_of_them_touched() {
        let two = Losses::parse("restart of a (x) slots=0-10; restart of b (y) slots=20-30");
        let scope = two.scope();
        assert!(scope.contains(5) && scope.contains(25) && !scope.contains(15));
        assert!(Losses::parse("restart of a (x) slots=0-10; rm:g1:{o}:epoch is gone").scope().is_everything());
        assert!(Losses::parse("flush of a (x 1); flush of b (y 2)").are_flushes());
        assert!(!Losses::parse("flush of a (x 1); a new read model").are_flushes());
    }

    #[test]
    fn a_healing_entry_reads_back_as_written_whole_generation_or_partition() {
        let losses = Losses::parse("failover to c (rc) slots=100-200");
        for target in [Some(4711), None] {
            let entry = HealingEntry { target, losses: losses.clone() };
            assert_eq!(HealingEntry::decode(&entry.encode()), entry);
        }
        assert_eq!(HealingEntry::decode("4711 failover to c (rc) slots=100-200").target, Some(4711));
        let whole = HealingEntry::decode("a new read model");
        assert_eq!((whole.target, whole.losses), (None, Losses::one(Loss::NewReadModel)));
    }
}
