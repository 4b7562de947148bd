//! Which live projectors there are, and, under Redis membership, which partitions each one reads.
//!
//! Every live projector reports itself in `P:projectors` every 250 ms (its group, generation, whether it
//! is paused, a heartbeat, how many partitions it reads), and reads the others in the same round trip:
//! `projector status`, the API's `/readyz` and a rebuild's handover read these reports whatever the
//! membership.
//!
//! Under group membership (the default) the broker's group coordinator assigns the partitions. Under
//! Redis membership (`PROJECTOR_MEMBERSHIP=redis`, for a broker whose coordinator cannot be relied on,
//! such as the local stack's, which keeps no commit metadata) each one reads the partitions that
//! rendezvous hashing gives it among the instances of its group that reported within the last few
//! seconds. Every instance computes the same answer from the same list, so they agree without talking to
//! each other, and a change of membership moves only the partitions of the instance that came or went.
//! Offsets are still committed to the Kafka consumer group, which shows no members.
//!
//! Two instances may briefly read the same partition while their views of the membership differ; that
//! is harmless, as every write checks the aggregate's sequence and an event applied twice changes nothing.

use std::collections::{BTreeSet, HashMap};

use redis::aio::ConnectionLike;
use redis::RedisResult;
use sha2::{Digest, Sha256};
use shared::keys::PROJECTORS_SINCE;
use shared::projectors::LIVENESS_TIMEOUT_SECS;
use shared::Keyspace;

use crate::observe::now;
use crate::source::Partition;

/// What a live projector reports about itself: one type with the query API, which reads the same reports.
pub use shared::ProjectorReport as Instance;

/// Reports this instance and reads every live projector (this one included) in one round trip: both
/// commands touch the same key, so they stay one pipeline on a cluster too.
pub async fn report<C: ConnectionLike + Send>(
    conn: &mut C,
    prefix: &str,
    id: &str,
    instance: &Instance,
) -> RedisResult<HashMap<String, Instance>> {
    let json = serde_json::to_string(instance).expect("instance state serializes");
    let (all,): (HashMap<String, String>,) = redis::pipe()
        .cmd("HSETNX")
        .arg(Keyspace::projectors(prefix))
        .arg(PROJECTORS_SINCE)
        .arg(now())
        .ignore()
        .cmd("HSET")
        .arg(Keyspace::projectors(prefix))
        .arg(id)
        .arg(json)
        .ignore()
        .cmd("HGETALL")
        .arg(Keyspace::projectors(prefix))
        .query_async(conn)
        .await?;
    live(conn, prefix, all).await
}

pub async fn leave<C: ConnectionLike + Send>(conn: &mut C, prefix: &str, id: &str) -> RedisResult<()> {
    redis::cmd("HDEL").arg(Keyspace::projectors(prefix)).arg(id).query_async(conn).await
}

/// Live projectors heard from recently, by instance id; older entries are removed.
pub async fn live_instances<C: ConnectionLike + Send>(
    conn: &mut C,
    prefix: &str,
) -> RedisResult<HashMap<String, Instance>> {
    let all: HashMap<String, String> =
        redis::cmd("HGETALL").arg(Keyspace::projectors(prefix)).query_async(conn).await?;
    live(conn, prefix, all).await
}

/// The live projectors, and how long the reports have been known whole (`None`: they were lost, and
/// the hash is made again now, or no projector ever reported): a missing report is evidence of a
/// projector gone only once that is [`LIVENESS_TIMEOUT_SECS`] or more, since every live projector
/// reports within that.
pub async fn live_instances_known_for<C: ConnectionLike + Send>(
    conn: &mut C,
    prefix: &str,
) -> RedisResult<(HashMap<String, Instance>, Option<f64>)> {
    let mut all: HashMap<String, String> =
        redis::cmd("HGETALL").arg(Keyspace::projectors(prefix)).query_async(conn).await?;
    let since = all.remove(PROJECTORS_SINCE).and_then(|since| since.parse::<f64>().ok());
    if since.is_none() {
        let _: () = redis::cmd("HSETNX")
            .arg(Keyspace::projectors(prefix))
            .arg(PROJECTORS_SINCE)
            .arg(now())
            .query_async(conn)
            .await?;
    }
    Ok((live(conn, prefix, all).await?, since.map(|since| now() - since)))
}

/// Whether reports known whole for `known_for` (see [`live_instances_known_for`]) tell every live
/// projector: a missing report then means a projector gone.
pub fn tells_everyone(known_for: Option<f64>) -> bool {
    known_for.is_some_and(|seconds| seconds >= LIVENESS_TIMEOUT_SECS)
}

/// The reports heard from recently; older or unreadable ones are removed.
async fn live<C: ConnectionLike + Send>(
    conn: &mut C,
    prefix: &str,
    all: HashMap<String, String>,
) -> RedisResult<HashMap<String, Instance>> {
    let now = now();
    let mut live = HashMap::new();
    for (id, json) in all {
        if id == PROJECTORS_SINCE {
            continue;
        }
        match serde_json::from_str::<Instance>(&json) {
            Ok(instance) if instance.is_live(now) => {
                live.insert(id, instance);
            }
            _ => leave(conn, prefix, &id).await?,
        }
    }
    Ok(live)
}

/// The partitions `me` reads among `members` (which should include `me`).
pub fn share(me: &str, members: &[String], partitions: &[Partition]) -> BTreeSet<Partition> {
    partitions.iter().filter(|partition| owner(members, partition) == Some(me)).cloned().collect()
}

/// The member with the highest weight for a partition; ties (practically impossible) go to the smaller id.
fn owner<'m>(members: &'m [String], partition: &Partition) -> Option<&'m str> {
    members
        .iter()
        .map(|member| (weight(member, &partition.topic, partition.partition), std::cmp::Reverse(member.as_str())))
        .max()
        .map(|(_, std::cmp::Reverse(member))| member)
}

fn weight(member: &str, topic: &str, partition: i32) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in [member.as_bytes(), topic.as_bytes(), &partition.to_be_bytes()] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partitions() -> Vec<Partition> {
        ["studies", "interviews", "keys"].iter().flat_map(|t| (0..6).map(move |p| Partition::new(*t, p))).collect()
    }

    fn members(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("instance-{i}")).collect()
    }

    #[test]
    fn every_partition_has_exactly_one_reader() {
        for n in 1..=5 {
            let members = members(n);
            let mut seen = Vec::new();
            for me in &members {
                seen.extend(share(me, &members, &partitions()));
            }
            seen.sort();
            let mut all = partitions();
            all.sort();
            assert_eq!(seen, all, "{n} members");
        }
    }

    #[test]
    fn a_lone_instance_reads_everything() {
        assert_eq!(share("only", &["only".to_string()], &partitions()).len(), partitions().len());
    }

    #[test]
    fn an_instance_that_leaves_hands_over_only_its_own_partitions() {
        let before = members(3);
        let after: Vec<String> = before[..2].to_vec();
        for me in &after {
            let kept = share(me, &before, &partitions());
            let now = share(me, &after, &partitions());
            assert!(kept.is_subset(&now), "{me} keeps what it had");
        }
    }

    #[test]
    fn the_split_is_roughly_even() {
        let members = members(3);
        for me in &members {
            let n = share(me, &members, &partitions()).len();
            assert!((2..=10).contains(&n), "{me} reads {n} of 18");
        }
    }
}
