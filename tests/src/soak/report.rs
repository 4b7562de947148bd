//! What a soak saw: faults injected by kind, operator commands by how they ended, answers by kind, every
//! wrong one (the one exception reported apart), and how long the read model took to converge.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use super::faults::{Injector, Kind};
use super::prober::{tally, Answer, Heard};
use super::PROMOTION_WINDOW;

pub struct Report {
    injected: BTreeMap<Kind, u64>,
    ended: BTreeMap<(Kind, bool), u64>,
    answers: BTreeMap<Answer, u64>,
    /// The one exception: a revoked key opened within [`PROMOTION_WINDOW`] of a replica's promotion in
    /// place of a crashed primary (the replica may lack the revocation until a projector sees the
    /// failover): the answer, and how long after the promotion.
    opened_after_a_promotion: Vec<(Heard, Duration)>,
    /// Every other wrong answer, whenever it came: the soak fails on the first.
    wrong: Vec<Heard>,
    exits: Vec<String>,
    published: u64,
    /// How long the read model took to converge after each burst of faults.
    gaps: Vec<Duration>,
    /// What a gap that did not converge within its bound left to read: the run ends there, failed.
    unconverged: Option<String>,
}

impl Report {
    pub(super) fn new(
        injector: &Injector,
        heard: &[Heard],
        gaps: Vec<Duration>,
        published: u64,
        unconverged: Option<String>,
    ) -> Self {
        let (opened_after_a_promotion, wrong) = judge(heard, &injector.promotions);
        Self {
            injected: injector.injected.clone(),
            ended: injector.ended.clone(),
            answers: tally(heard),
            opened_after_a_promotion,
            wrong,
            exits: injector.exits.clone(),
            published,
            gaps,
            unconverged,
        }
    }

    /// No wrong answer but the one exception, no projector that ended by itself, and every gap converged.
    pub fn passed(&self) -> bool {
        self.wrong.is_empty() && self.exits.is_empty() && self.unconverged.is_none()
    }
}

/// The wrong answers among `heard`: those the one exception excuses (a revoked key opened within
/// [`PROMOTION_WINDOW`] after one of the `promotions`, with how long after), and every other.
fn judge(heard: &[Heard], promotions: &[Instant]) -> (Vec<(Heard, Duration)>, Vec<Heard>) {
    let promotion = |h: &Heard| {
        let after = |at: &Instant| h.at.checked_duration_since(*at);
        promotions.iter().filter_map(after).filter(|d| *d <= PROMOTION_WINDOW).min()
    };
    let (mut excused, mut wrong) = (Vec::new(), Vec::new());
    for h in heard.iter().filter(|h| h.answer.is_wrong()) {
        match promotion(h) {
            Some(after) if h.answer == Answer::RevokedKeyOpened => excused.push((h.clone(), after)),
            _ => wrong.push(h.clone()),
        }
    }
    (excused, wrong)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| fault | injected |\n|---|---|")?;
        for (kind, count) in &self.injected {
            writeln!(f, "| {kind:?} | {count} |")?;
        }
        writeln!(f, "\n| operator command | succeeded | failed |\n|---|---|---|")?;
        for kind in [Kind::Rebuild, Kind::OverlappingRepairs] {
            let (ok, failed) = (self.ended.get(&(kind, true)), self.ended.get(&(kind, false)));
            writeln!(f, "| {kind:?} | {} | {} |", ok.unwrap_or(&0), failed.unwrap_or(&0))?;
        }
        writeln!(f, "\n| answer | count |\n|---|---|")?;
        for (answer, count) in &self.answers {
            let wrong = if answer.is_wrong() { " (wrong)" } else { "" };
            writeln!(f, "| {answer:?}{wrong} | {count} |")?;
        }
        writeln!(f, "\nevents published while faults ran: {}", self.published)?;
        let opened = &self.opened_after_a_promotion;
        writeln!(f, "revoked keys opened within {PROMOTION_WINDOW:?} of a promotion: {}", opened.len())?;
        for (heard, after) in opened.iter().take(10) {
            writeln!(f, "  {}, {} ms after the promotion", describe(heard), after.as_millis())?;
        }
        writeln!(f, "wrong answers: {}", self.wrong.len())?;
        for heard in self.wrong.iter().take(10) {
            writeln!(f, "  {}", describe(heard))?;
        }
        writeln!(f, "projectors that ended by themselves: {}", self.exits.len())?;
        for exit in &self.exits {
            writeln!(f, "  {exit}")?;
        }
        let slowest = self.gaps.iter().max().copied().unwrap_or_default();
        writeln!(
            f,
            "gaps after a burst that converged (equal to a build from scratch, the API ready): {}, the slowest in \
             {:.1} s",
            self.gaps.len(),
            slowest.as_secs_f64()
        )?;
        match &self.unconverged {
            Some(_) => write!(f, "a gap did NOT converge within its bound (what it left is printed above)"),
            None => write!(f, "every gap converged"),
        }
    }
}

/// A wrong answer, to find in the logs.
fn describe(heard: &Heard) -> String {
    let total = heard.total.map(|t| format!(" (total {t})")).unwrap_or_default();
    format!("{:?}{total} for {} at {}", heard.answer, heard.org, heard.when.format("%H:%M:%S%.3f"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heard(at: Instant, answer: Answer) -> Heard {
        Heard { at, when: chrono::Utc::now(), org: "o".into(), answer, total: None }
    }

    #[test]
    fn only_a_revoked_key_opened_within_a_second_of_a_promotion_is_excused_and_no_loss_excuses_anything() {
        let promoted = Instant::now();
        let (soon, late) = (promoted + Duration::from_millis(500), promoted + Duration::from_millis(1500));
        let answers = [
            heard(soon, Answer::RevokedKeyOpened),
            heard(late, Answer::RevokedKeyOpened),
            heard(soon, Answer::ShortList),
            heard(soon, Answer::LiveKeyRefused),
            heard(soon, Answer::Served),
            heard(soon, Answer::Throttled),
            heard(late, Answer::Unexpected(429)),
            heard(promoted - Duration::from_millis(10), Answer::RevokedKeyOpened),
        ];
        let (excused, wrong) = judge(&answers, &[promoted]);
        assert_eq!(excused.len(), 1);
        assert_eq!(excused[0].1, Duration::from_millis(500));
        let wrong: Vec<Answer> = wrong.iter().map(|h| h.answer).collect();
        // The unknown-keys throttle's 429 is counted apart; any other 429 is wrong.
        let expected = [
            Answer::RevokedKeyOpened,
            Answer::ShortList,
            Answer::LiveKeyRefused,
            Answer::Unexpected(429),
            Answer::RevokedKeyOpened,
        ];
        assert_eq!(wrong, expected);
        let (excused, wrong) = judge(&answers, &[]);
        assert!(excused.is_empty() && wrong.len() == 6, "without a promotion nothing is excused");
    }
}
