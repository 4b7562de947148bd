//! Which slots a loss of data touched. The projector writes them into the id of the loss (which its
//! healing entries carry); the API reads them back, so that while the read model heals, only the
//! organizations whose keys live in those slots are answered 503 and every other one keeps being served.
//! A loss that names no slots (a single server, a check that cannot tell where) touched everything.

/// The slots of a loss, or every slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope(Option<Vec<(u16, u16)>>);

/// How a loss's id names its slots: ` slots=0-5460,10923-16383`.
const MARK: &str = " slots=";

/// The words a loss's id ends with to name `slots` (inclusive ranges); nothing when there are none.
pub fn describe(slots: &[(u16, u16)]) -> String {
    if slots.is_empty() {
        return String::new();
    }
    let ranges: Vec<String> = slots.iter().map(|(low, high)| format!("{low}-{high}")).collect();
    format!("{MARK}{}", ranges.join(","))
}

impl Scope {
    pub fn everything() -> Self {
        Self(None)
    }

    pub fn nothing() -> Self {
        Self(Some(Vec::new()))
    }

    /// The slots named by a loss's id, or by several joined with `"; "`: every slot as soon as one of
    /// them names none.
    pub fn of_loss(loss: &str) -> Self {
        let mut scope = Self::nothing();
        for part in loss.split("; ") {
            scope.add(&Self::of_one(part));
        }
        scope
    }

    fn of_one(loss: &str) -> Self {
        let Some((_, named)) = loss.rsplit_once(MARK) else { return Self::everything() };
        let ranges: Option<Vec<(u16, u16)>> = named
            .split(',')
            .map(|range| {
                let (low, high) = range.split_once('-')?;
                Some((low.parse().ok()?, high.trim_end().parse().ok()?))
            })
            .collect();
        match ranges {
            Some(ranges) if !ranges.is_empty() => Self(Some(ranges)),
            _ => Self::everything(),
        }
    }

    /// Widens this scope by `other`.
    pub fn add(&mut self, other: &Scope) {
        match (&mut self.0, &other.0) {
            (Some(mine), Some(theirs)) => mine.extend(theirs.iter().copied()),
            (mine, _) => *mine = None,
        }
    }

    pub fn is_everything(&self) -> bool {
        self.0.is_none()
    }

    pub fn contains(&self, slot: u16) -> bool {
        self.0.as_ref().is_none_or(|ranges| ranges.iter().any(|(low, high)| (*low..=*high).contains(&slot)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loss_naming_its_slots_touched_only_those() {
        let loss = format!("flush of 127.0.0.1:7001 (abc 1){}", describe(&[(0, 5460), (10923, 10999)]));
        let scope = Scope::of_loss(&loss);
        assert!(scope.contains(0) && scope.contains(5460) && scope.contains(10950));
        assert!(!scope.contains(5461) && !scope.contains(16383));
        assert!(!scope.is_everything());
    }

    #[test]
    fn a_loss_naming_no_slots_touched_everything_and_so_does_a_list_with_one() {
        assert!(Scope::of_loss("a new read model").is_everything());
        assert!(Scope::of_loss("positions lost on p/1 of generation 2").contains(12345));
        let both = format!("restart of a (x){}; an epoch is gone", describe(&[(0, 10)]));
        assert!(Scope::of_loss(&both).is_everything());
        let two = format!("restart of a (x){}; restart of b (y){}", describe(&[(0, 10)]), describe(&[(20, 30)]));
        let scope = Scope::of_loss(&two);
        assert!(scope.contains(5) && scope.contains(25) && !scope.contains(15));
    }

    #[test]
    fn a_healing_entry_reads_as_its_loss_and_garbage_after_the_mark_is_everything() {
        let entry = format!("4711 failover to c (rc){}", describe(&[(100, 200)]));
        assert!(Scope::of_loss(&entry).contains(150) && !Scope::of_loss(&entry).contains(99));
        assert!(Scope::of_loss("x slots=1-").is_everything());
        assert!(Scope::of_loss("x slots=").is_everything());
        assert_eq!(describe(&[]), "");
    }
}
