//! The commands that claim and read an aggregate's owner record ([`shared::owners`]), in the form its
//! generation's layout keeps it: the batch's first round trip claims, a repair claims and reads.

use redis::Cmd;
use shared::owners::Record;

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
