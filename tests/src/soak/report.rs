//! What a soak saw: faults injected by kind, operator commands by how they ended, answers by kind, the
//! wrong ones told apart by whether Redis had just lost data, and how long the read model took to converge.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::faults::{Injector, Kind};
use super::prober::{tally, Answer, Heard};
use super::LOSS_WINDOW;

pub struct Report {
    injected: BTreeMap<Kind, u64>,
    ended: BTreeMap<(Kind, bool), u64>,
    answers: BTreeMap<Answer, u64>,
    /// Wrong answers given within [`LOSS_WINDOW`] of a loss, before it could be known: the answer, and how
    /// long after which loss.
    wrong_in_a_loss_window: Vec<(Heard, Duration, Kind)>,
    /// Wrong answers given anywhere else: the soak fails on the first.
    wrong: Vec<Heard>,
    exits: Vec<String>,
    published: u64,
    converged: Duration,
}

impl Report {
    pub(super) fn new(injector: &Injector, heard: &[Heard], converged: Duration, published: u64) -> Self {
        let loss = |h: &Heard| injector.losses.iter().rev().find(|(at, _)| *at <= h.at && h.at <= *at + LOSS_WINDOW);
        let excusable = |h: &Heard| {
            matches!(h.answer, Answer::LiveKeyRefused | Answer::ShortList | Answer::RevokedKeyOpened)
                && loss(h).is_some()
        };
        let wrong: Vec<Heard> = heard.iter().filter(|h| h.answer.is_wrong() && !excusable(h)).cloned().collect();
        Self {
            injected: injector.injected.clone(),
            ended: injector.ended.clone(),
            answers: tally(heard),
            wrong_in_a_loss_window: heard
                .iter()
                .filter(|h| h.answer.is_wrong() && excusable(h))
                .filter_map(|h| loss(h).map(|(at, kind)| (h.clone(), h.at - *at, *kind)))
                .collect(),
            wrong,
            exits: injector.exits.clone(),
            published,
            converged,
        }
    }

    /// No wrong answer outside a loss window, and no projector that ended by itself.
    pub fn passed(&self) -> bool {
        self.wrong.is_empty() && self.exits.is_empty()
    }
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
        let window = &self.wrong_in_a_loss_window;
        writeln!(f, "wrong answers within {LOSS_WINDOW:?} of a loss of Redis data: {}", window.len())?;
        for (heard, after, kind) in window.iter().take(10) {
            writeln!(f, "  {}, {} ms after {kind:?}", describe(heard), after.as_millis())?;
        }
        writeln!(f, "wrong answers anywhere else: {}", self.wrong.len())?;
        for heard in self.wrong.iter().take(10) {
            writeln!(f, "  {}", describe(heard))?;
        }
        writeln!(f, "projectors that ended by themselves: {}", self.exits.len())?;
        for exit in &self.exits {
            writeln!(f, "  {exit}")?;
        }
        write!(
            f,
            "converged {:.1} s after the faults ended, equal to a build from scratch",
            self.converged.as_secs_f64()
        )
    }
}

/// A wrong answer, to find in the logs.
fn describe(heard: &Heard) -> String {
    let total = heard.total.map(|t| format!(" (total {t})")).unwrap_or_default();
    format!("{:?}{total} for {} at {}", heard.answer, heard.org, heard.when.format("%H:%M:%S%.3f"))
}
