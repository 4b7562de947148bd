//! The commands that claim and read an aggregate's owner record ([`shared::owners`]), in the form its
//! generation's layout keeps it: the batch's first round trip claims, a repair claims and reads; and the
//! owners a projector already knows, whose aggregates' later events claim nothing.

use redis::Cmd;
use shared::owners::Record;
use shared::Topic;

/// Records `org` as the aggregate's owner unless one is recorded: one or two commands, the last of whose
/// replies is the owner recorded before (nil when none was: `org` is now) or, for a field, after (then
/// `org` when this claim recorded it). Either way, a reply other than nil or `org` names the owner.
pub fn claim(record: &Record, org: &str) -> Vec<Cmd> {
    match record {
        Record::Key(key) => {
            let mut set = redis::cmd("SET");
            set.arg(key).arg(org).arg("NX").arg("GET");
            vec![set]
        }
        Record::Field { hash, id } => {
            let mut set = redis::cmd("HSETNX");
            set.arg(hash).arg(id).arg(org);
            vec![set, read(record)]
        }
    }
}

/// Reads the owner recorded (nil: none).
pub fn read(record: &Record) -> Cmd {
    match record {
        Record::Key(key) => redis::cmd("GET").arg(key).clone(),
        Record::Field { hash, id } => redis::cmd("HGET").arg(hash).arg(id).clone(),
    }
}

/// How many aggregates' owners a projector keeps in memory; the map is emptied when full. In the replay
/// benchmark 65,536 raised the projector's peak from about 49 MB to 71; 16,384 keeps it at 52, and the
/// apply path's rate is the same with either (BENCHMARKS.md, row "replay end to end"; history in "Projector
/// replay of 1,000,000 events").
const KNOWN: usize = 16_384;

/// The owners this projector recorded or read in its generation since the last loss of Redis data, so
/// that an aggregate's later events skip the claim: an owner, once recorded, never changes. Emptied at a
/// loss (the records may be gone, and the events projected again claim them anew) and at a new
/// generation.
#[derive(Debug, Default)]
pub struct Known([std::collections::HashMap<String, String>; 3]);

impl Known {
    fn of(&self, topic: Topic) -> &std::collections::HashMap<String, String> {
        &self.0[index(topic)]
    }

    pub fn get(&self, topic: Topic, id: &str) -> Option<&str> {
        self.of(topic).get(id).map(String::as_str)
    }

    pub fn insert(&mut self, topic: Topic, id: &str, owner: &str) {
        if self.0.iter().map(|known| known.len()).sum::<usize>() >= KNOWN {
            self.clear();
        }
        self.0[index(topic)].insert(id.to_string(), owner.to_string());
    }

    pub fn clear(&mut self) {
        self.0.iter_mut().for_each(std::collections::HashMap::clear);
    }
}

fn index(topic: Topic) -> usize {
    match topic {
        Topic::Study => 0,
        Topic::Interview => 1,
        Topic::ApiKey => 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_owners_are_kept_by_aggregate_and_emptied_when_full() {
        let mut known = Known::default();
        known.insert(Topic::Study, "a", "org1");
        assert_eq!((known.get(Topic::Study, "a"), known.get(Topic::Interview, "a")), (Some("org1"), None));
        for n in 1..KNOWN {
            known.insert(Topic::Interview, &n.to_string(), "org2");
        }
        assert_eq!(known.get(Topic::Study, "a"), Some("org1"));
        known.insert(Topic::ApiKey, "k", "org3");
        assert_eq!(
            (known.get(Topic::Study, "a"), known.get(Topic::ApiKey, "k")),
            (None, Some("org3")),
            "emptied, then kept"
        );
    }
}
