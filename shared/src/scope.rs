//! Which slots a loss of data touched ([`crate::loss::Loss::scope`]): while the read model heals, only the
//! organizations whose keys live in those slots are answered 503 and every other one keeps being served.
//! A loss that names no slots (a single server, a check that cannot tell where) touched everything.

/// The slots of a loss, or every slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope(Option<Vec<(u16, u16)>>);

impl Scope {
    pub fn everything() -> Self {
        Self(None)
    }

    pub fn nothing() -> Self {
        Self(Some(Vec::new()))
    }

    /// These inclusive ranges of slots.
    pub fn slots(ranges: Vec<(u16, u16)>) -> Self {
        Self(Some(ranges))
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
    fn a_scope_widened_by_everything_is_everything() {
        let mut scope = Scope::slots(vec![(0, 10)]);
        scope.add(&Scope::slots(vec![(20, 30)]));
        assert!(scope.contains(5) && scope.contains(25) && !scope.contains(15));
        scope.add(&Scope::everything());
        assert!(scope.is_everything() && scope.contains(15));
        assert!(!Scope::nothing().contains(0));
    }
}
