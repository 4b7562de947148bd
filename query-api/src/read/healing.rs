//! What a generation's healing hash says to the API: nothing heals, these slots heal, or the hash itself was
//! lost. From layout 4 the hash keeps a field from the generation's start on (`shared::keys::HEALING_OPENED`),
//! so an absent hash is a loss the API answers 503 for, never a complete read model.

use std::collections::HashMap;

use shared::loss::HealingEntry;
use shared::scope::Scope;

/// What a generation's healing hash says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Healing {
    /// Nothing heals: the generation is complete.
    Nothing,
    /// These slots heal (every slot, for a loss that names none).
    Slots(Scope),
    /// The hash of a generation that keeps [`shared::keys::HEALING_OPENED`] was found without it: Redis
    /// lost it with its primary, and with it whatever was healing. Nothing is known to be complete.
    StateLost,
}

impl Healing {
    /// Reads a healing hash's fields; `opened`: the generation keeps [`shared::keys::HEALING_OPENED`].
    pub fn of(mut entries: HashMap<String, String>, opened: bool) -> Self {
        if entries.remove(shared::keys::HEALING_OPENED).is_none() && opened {
            return Self::StateLost;
        }
        if entries.is_empty() {
            return Self::Nothing;
        }
        let mut scope = Scope::nothing();
        for entry in entries.values() {
            scope.add(&HealingEntry::decode(entry).losses.scope());
        }
        Self::Slots(scope)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(fields: &[(&str, &str)]) -> HashMap<String, String> {
        fields.iter().map(|(f, v)| (f.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_healing_hash_without_its_opened_field_is_a_lost_healing_state_never_a_complete_read_model() {
        assert_eq!(Healing::of(hash(&[]), true), Healing::StateLost);
        assert_eq!(Healing::of(hash(&[("t/0", "7 restart of a (x) slots=0-10")]), true), Healing::StateLost);
        assert_eq!(Healing::of(hash(&[("opened", "1")]), true), Healing::Nothing);
        let healing = Healing::of(hash(&[("opened", "1"), ("t/0", "7 restart of a (x) slots=0-10")]), true);
        let Healing::Slots(scope) = healing else { panic!("{healing:?}") };
        assert!(scope.contains(5) && !scope.contains(11), "the field itself names no slot");
    }

    #[test]
    fn a_generation_of_a_layout_before_the_field_reads_an_absent_hash_as_nothing_healing() {
        assert_eq!(Healing::of(hash(&[]), false), Healing::Nothing);
        assert!(
            matches!(Healing::of(hash(&[("t/0", "7 a new read model")]), false), Healing::Slots(s) if s.is_everything())
        );
    }
}
