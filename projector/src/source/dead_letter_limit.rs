//! The dead-letter limit. A release that cannot decode or write any event (a broken decoder, a write
//! script Redis no longer loads) would set every message aside as poison, and the read model would fall
//! silently behind its topics while the dead-letter topics fill. So, per partition, the outcomes of the
//! last messages are kept (getsentry/arroyo's `DlqLimit` is the model): once a batch would make more than
//! `ratio` of them, and at least `min_letters`, dead letters, the partition halts at the batch's first
//! letter. Nothing of it from there is set aside, applied past that point or committed; it is not read
//! while halted, and `/readyz` and `projector_partitions_halted` say so. Every `retry` it is read again
//! from where it stopped: if its first message there goes through (Redis loads the script again; a fixed
//! release starts with no history), it goes on, and no letter was needed; else it halts again.
//!
//! Poison that stays below the limit (a bad message now and then) is set aside as always.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use super::Partition;

/// When a partition halts, and how often a halted one is tried again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitSettings {
    /// How many of a partition's latest messages count.
    pub window: usize,
    /// The share of dead letters among them above which it halts (1 or more: never).
    pub ratio: f64,
    /// The fewest dead letters among them that halt it.
    pub min_letters: usize,
    /// How long a halted partition waits before it is read again.
    pub retry: Duration,
}

/// One partition halted: where, since when, why, and whether it is being read again.
#[derive(Debug, Clone, PartialEq)]
pub struct Halt {
    pub offset: i64,
    pub since: Instant,
    pub reason: String,
    retrying: bool,
}

/// The latest outcomes of one partition: true for a dead letter.
#[derive(Debug, Default)]
struct Window {
    outcomes: VecDeque<bool>,
    letters: usize,
}

impl Window {
    fn push(&mut self, letter: bool, size: usize) {
        self.outcomes.push_back(letter);
        self.letters += letter as usize;
        while self.outcomes.len() > size {
            self.letters -= self.outcomes.pop_front().expect("longer than size") as usize;
        }
    }

    fn over(&self, settings: &LimitSettings) -> bool {
        self.letters >= settings.min_letters && self.letters as f64 > settings.ratio * self.outcomes.len() as f64
    }
}

/// The limit's state: every partition's latest outcomes, and the partitions halted.
#[derive(Debug)]
pub struct DeadLetterLimit {
    settings: LimitSettings,
    windows: HashMap<Partition, Window>,
    halted: BTreeMap<Partition, Halt>,
}

/// One message of a batch as the limit sees it: its offset, and why it would be set aside, if it would.
pub type Seen<'a> = (i64, Option<&'a str>);

impl DeadLetterLimit {
    pub fn new(settings: LimitSettings) -> Self {
        Self { settings, windows: HashMap::new(), halted: BTreeMap::new() }
    }

    /// Takes a batch's messages, per partition in offset order: returns the partitions that halt, each
    /// at its first dead letter in the batch, and records the outcomes of every other message. A partition
    /// read again after a halt halts again at once if its first message would still be a dead letter.
    pub fn check(&mut self, batch: &BTreeMap<Partition, Vec<Seen<'_>>>, now: Instant) -> Vec<(Partition, i64)> {
        let halts = self.would_halt(batch);
        for (partition, seen) in batch {
            match halts.get(partition) {
                Some(&(offset, reason)) => {
                    let before = seen.iter().take_while(|(at, _)| *at < offset).count();
                    self.record(partition, &seen[..before]);
                    let halt = Halt { offset, since: now, reason: reason.to_string(), retrying: false };
                    self.halted.insert(partition.clone(), halt);
                }
                None => {
                    self.record(partition, seen);
                    self.halted.remove(partition);
                }
            }
        }
        halts.into_iter().map(|(partition, (offset, _))| (partition, offset)).collect()
    }

    /// What [`DeadLetterLimit::check`] would halt, and where and why, changing nothing: more letters in
    /// the same batch never halt fewer partitions, or any later.
    pub fn would_halt<'a>(&self, batch: &BTreeMap<Partition, Vec<Seen<'a>>>) -> BTreeMap<Partition, (i64, &'a str)> {
        let mut halts = BTreeMap::new();
        for (partition, seen) in batch {
            let Some(first) = seen.iter().position(|(_, reason)| reason.is_some()) else { continue };
            let retried = self.halted.get(partition).is_some_and(|h| h.retrying);
            let trips = (retried && first == 0) || {
                let mut trial = match self.windows.get(partition) {
                    Some(window) => Window { outcomes: window.outcomes.clone(), letters: window.letters },
                    None => Window::default(),
                };
                seen.iter().any(|(_, reason)| {
                    trial.push(reason.is_some(), self.settings.window);
                    trial.over(&self.settings)
                })
            };
            if trips {
                let (offset, reason) = seen[first];
                halts.insert(partition.clone(), (offset, reason.expect("a letter")));
            }
        }
        halts
    }

    fn record(&mut self, partition: &Partition, seen: &[Seen<'_>]) {
        let window = self.windows.entry(partition.clone()).or_default();
        for (_, reason) in seen {
            window.push(reason.is_some(), self.settings.window);
        }
    }

    /// The halted partitions whose wait is over, now read again (they stay listed as halted until a
    /// message of theirs goes through).
    pub fn due(&mut self, now: Instant) -> Vec<Partition> {
        let retry = self.settings.retry;
        let due = self.halted.iter_mut().filter(|(_, h)| !h.retrying && now.duration_since(h.since) >= retry);
        due.map(|(partition, halt)| {
            halt.retrying = true;
            partition.clone()
        })
        .collect()
    }

    /// Whether `partition` is halted and waiting (not to be read).
    pub fn is_waiting(&self, partition: &Partition) -> bool {
        self.halted.get(partition).is_some_and(|h| !h.retrying)
    }

    /// Every halted partition, read again or not.
    pub fn halted(&self) -> &BTreeMap<Partition, Halt> {
        &self.halted
    }

    /// Forgets the partitions this consumer no longer reads.
    pub fn retain(&mut self, reads: impl Fn(&Partition) -> bool) {
        self.windows.retain(|p, _| reads(p));
        self.halted.retain(|p, _| reads(p));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit() -> DeadLetterLimit {
        DeadLetterLimit::new(LimitSettings { window: 10, ratio: 0.5, min_letters: 3, retry: Duration::from_secs(30) })
    }

    /// Offsets from `from`, each a letter where `pattern` has an `x`.
    fn batch(partition: &Partition, from: i64, pattern: &str) -> BTreeMap<Partition, Vec<Seen<'static>>> {
        let seen = pattern.chars().enumerate().map(|(i, c)| (from + i as i64, (c == 'x').then_some("bad json")));
        BTreeMap::from([(partition.clone(), seen.collect())])
    }

    #[test]
    fn poison_now_and_then_is_set_aside_and_a_run_of_it_halts_the_partition_at_its_first_letter() {
        let (p, now) = (Partition::new("t", 0), Instant::now());
        let mut limit = limit();
        assert!(limit.check(&batch(&p, 0, "..x...x..."), now).is_empty(), "two letters in ten");
        assert!(limit.check(&batch(&p, 10, ".x.."), now).is_empty());
        // Five letters in a row after these make more than half of the last ten, at the fifth.
        assert_eq!(limit.check(&batch(&p, 14, "..xxxxx"), now), [(p.clone(), 16)]);
        assert_eq!(limit.halted()[&p].offset, 16);
        assert_eq!(limit.halted()[&p].reason, "bad json");
        assert!(limit.is_waiting(&p));
    }

    #[test]
    fn a_partition_of_only_letters_halts_once_it_has_the_fewest_that_count() {
        let (p, now) = (Partition::new("t", 0), Instant::now());
        let mut limit = limit();
        assert!(limit.check(&batch(&p, 0, "xx"), now).is_empty(), "two letters are below the fewest");
        assert_eq!(limit.check(&batch(&p, 2, "x"), now), [(p, 2)]);
    }

    #[test]
    fn a_halted_partition_is_read_again_after_its_wait_and_goes_on_only_if_its_first_message_does() {
        let (p, q, now) = (Partition::new("t", 0), Partition::new("t", 1), Instant::now());
        let mut limit = limit();
        assert_eq!(limit.check(&batch(&p, 0, "xxxx"), now), [(p.clone(), 0)]);
        assert!(limit.due(now + Duration::from_secs(29)).is_empty());
        assert_eq!(limit.due(now + Duration::from_secs(30)), std::slice::from_ref(&p));
        assert!(!limit.is_waiting(&p) && limit.halted().contains_key(&p), "read again, still listed");
        // Still poison where it stopped: halted again at once, whatever the window holds.
        let later = now + Duration::from_secs(31);
        assert_eq!(limit.check(&batch(&p, 0, "x..."), later), [(p.clone(), 0)]);
        assert!(limit.is_waiting(&p));
        assert_eq!(limit.due(later + Duration::from_secs(30)), std::slice::from_ref(&p));
        // Fixed: it goes on, and a letter later is judged by the window again.
        assert!(limit.check(&batch(&p, 0, "...."), later).is_empty());
        assert!(limit.halted().is_empty());
        assert!(limit.check(&batch(&q, 0, "....x"), later).is_empty(), "another partition has its own window");
    }

    #[test]
    fn a_ratio_of_one_never_halts() {
        let p = Partition::new("t", 0);
        let mut limit = limit();
        limit.settings.ratio = 1.0;
        assert!(limit.check(&batch(&p, 0, &"x".repeat(50)), Instant::now()).is_empty());
    }
}
