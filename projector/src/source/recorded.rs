//! How far a commit may go: no further than the positions the read model holds. A start's check
//! ([`crate::heal::behind_commits`]) takes a committed offset ahead of the position Redis holds for a loss
//! (what was applied between the two would not be there), and it looks at every partition, those other
//! live projectors are applying too. So an offset is committed only once a look has recorded it in Redis
//! (or it was read there), never straight after its batch is applied: the commit follows the record.

use std::collections::HashMap;

use super::Partition;

/// The positions Redis holds for this projector's partitions, as far as it knows, and what it last
/// committed of them.
#[derive(Debug, Default)]
pub struct Recorded {
    held: HashMap<Partition, i64>,
    sent: HashMap<Partition, i64>,
}

impl Recorded {
    /// Redis holds these positions now: recorded by a look, or read there to start from.
    pub fn hold(&mut self, positions: impl IntoIterator<Item = (Partition, i64)>) {
        self.held.extend(positions);
    }

    /// Forgets `partition`: it is read from its earliest offset, and nothing of it is held.
    pub fn forget(&mut self, partition: &Partition) {
        self.held.remove(partition);
    }

    /// Keeps only the partitions `keep` says.
    pub fn retain(&mut self, keep: impl Fn(&Partition) -> bool) {
        self.held.retain(|p, _| keep(p));
        self.sent.retain(|p, _| keep(p));
    }

    /// What to commit of `applied`: for each partition Redis holds a position of, the lower of the two.
    /// With `changed_only`, only what differs from the last commit sent.
    pub fn committable(&mut self, applied: &HashMap<Partition, i64>, changed_only: bool) -> Vec<(Partition, i64)> {
        let mut out: Vec<(Partition, i64)> = applied
            .iter()
            .filter_map(|(p, at)| Some((p, (*at).min(*self.held.get(p)?))))
            .filter(|(p, at)| !changed_only || self.sent.get(*p) != Some(at))
            .map(|(p, at)| (p.clone(), at))
            .collect();
        out.sort();
        self.sent.extend(out.iter().cloned());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: i32) -> Partition {
        Partition::new("t", n)
    }

    #[test]
    fn a_commit_goes_no_further_than_redis_holds_and_not_at_all_where_it_holds_nothing() {
        let mut recorded = Recorded::default();
        let applied = HashMap::from([(p(0), 50), (p(1), 20), (p(2), 9)]);
        recorded.hold([(p(0), 40), (p(1), 30)]);
        // p0 applied past what was recorded: up to the record; p1 rewound below it: where it is.
        assert_eq!(recorded.committable(&applied, true), vec![(p(0), 40), (p(1), 20)]);
    }

    #[test]
    fn only_what_changed_is_sent_again_unless_everything_is_asked_for() {
        let mut recorded = Recorded::default();
        let mut applied = HashMap::from([(p(0), 50), (p(1), 20)]);
        recorded.hold([(p(0), 50), (p(1), 20)]);
        assert_eq!(recorded.committable(&applied, true).len(), 2);
        applied.insert(p(0), 60);
        recorded.hold([(p(0), 60)]);
        assert_eq!(recorded.committable(&applied, true), vec![(p(0), 60)]);
        assert_eq!(recorded.committable(&applied, true), vec![]);
        assert_eq!(recorded.committable(&applied, false), vec![(p(0), 60), (p(1), 20)]);
    }

    #[test]
    fn a_partition_forgotten_or_given_up_is_not_committed() {
        let mut recorded = Recorded::default();
        let applied = HashMap::from([(p(0), 5), (p(1), 7)]);
        recorded.hold([(p(0), 5), (p(1), 7)]);
        recorded.forget(&p(0));
        recorded.retain(|partition| *partition != p(1));
        assert_eq!(recorded.committable(&applied, false), vec![]);
    }
}
