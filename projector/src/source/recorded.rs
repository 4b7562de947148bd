//! How far a commit may go: no further than the positions the read model holds. A start's check
//! ([`crate::heal::behind_commits`]) takes a committed offset ahead of the position Redis holds for a loss
//! (what was applied between the two would not be there), and it looks at every partition, those other
//! live projectors are applying too. So an offset is committed only once a look has recorded it in Redis
//! (or it was read there), never straight after its batch is applied: the commit follows the record.
//!
//! What did not move since the last commit is not sent again, but for one commit of everything every
//! [`RESEND_EVERY`]: a commit sent without waiting that the broker refuses (one that meets a rebalance, a
//! coordinator moving) is only logged by librdkafka, whose event for it never comes without a callback of
//! its own, and a quiet partition would keep the group's offsets behind (lag exporters and `--describe`
//! showing lag that is not there) until its next message.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::Partition;

/// How often everything recorded is committed again, moved or not: one small request per instance.
pub const RESEND_EVERY: Duration = Duration::from_secs(5);

/// The positions Redis holds for this projector's partitions, as far as it knows, and what it last
/// committed of them.
#[derive(Debug, Default)]
pub struct Recorded {
    held: HashMap<Partition, i64>,
    sent: HashMap<Partition, i64>,
    /// When everything was last sent.
    all_sent: Option<Instant>,
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
    /// With `changed_only`, only what differs from the last commit sent, unless everything was last sent
    /// [`RESEND_EVERY`] or longer before `now`.
    pub fn committable(
        &mut self,
        applied: &HashMap<Partition, i64>,
        changed_only: bool,
        now: Instant,
    ) -> Vec<(Partition, i64)> {
        let changed_only =
            changed_only && self.all_sent.is_some_and(|at| now.saturating_duration_since(at) < RESEND_EVERY);
        if !changed_only {
            self.all_sent = Some(now);
        }
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

    fn at(secs: u64) -> Instant {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *START.get_or_init(Instant::now) + Duration::from_secs(secs)
    }

    #[test]
    fn a_commit_goes_no_further_than_redis_holds_and_not_at_all_where_it_holds_nothing() {
        let mut recorded = Recorded::default();
        let applied = HashMap::from([(p(0), 50), (p(1), 20), (p(2), 9)]);
        recorded.hold([(p(0), 40), (p(1), 30)]);
        // p0 applied past what was recorded: up to the record; p1 rewound below it: where it is.
        assert_eq!(recorded.committable(&applied, true, at(0)), vec![(p(0), 40), (p(1), 20)]);
    }

    #[test]
    fn only_what_changed_is_sent_again_unless_everything_is_asked_for() {
        let mut recorded = Recorded::default();
        let mut applied = HashMap::from([(p(0), 50), (p(1), 20)]);
        recorded.hold([(p(0), 50), (p(1), 20)]);
        assert_eq!(recorded.committable(&applied, true, at(0)).len(), 2);
        applied.insert(p(0), 60);
        recorded.hold([(p(0), 60)]);
        assert_eq!(recorded.committable(&applied, true, at(1)), vec![(p(0), 60)]);
        assert_eq!(recorded.committable(&applied, true, at(2)), vec![]);
        assert_eq!(recorded.committable(&applied, false, at(3)), vec![(p(0), 60), (p(1), 20)]);
    }

    #[test]
    fn everything_is_sent_again_once_every_resend_interval_moved_or_not() {
        let mut recorded = Recorded::default();
        let applied = HashMap::from([(p(0), 50), (p(1), 20)]);
        recorded.hold([(p(0), 50), (p(1), 20)]);
        assert_eq!(recorded.committable(&applied, true, at(10)).len(), 2, "the first sends everything");
        let quiet = at(10) + RESEND_EVERY - Duration::from_millis(1);
        assert_eq!(recorded.committable(&applied, true, quiet), vec![], "nothing moved");
        let due = at(10) + RESEND_EVERY;
        assert_eq!(recorded.committable(&applied, true, due), vec![(p(0), 50), (p(1), 20)], "sent again");
        assert_eq!(recorded.committable(&applied, true, due), vec![], "and not again at once");
    }

    #[test]
    fn a_partition_forgotten_or_given_up_is_not_committed() {
        let mut recorded = Recorded::default();
        let applied = HashMap::from([(p(0), 5), (p(1), 7)]);
        recorded.hold([(p(0), 5), (p(1), 7)]);
        recorded.forget(&p(0));
        recorded.retain(|partition| *partition != p(1));
        assert_eq!(recorded.committable(&applied, false, at(0)), vec![]);
    }
}
