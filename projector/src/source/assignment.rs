//! Which partitions this projector reads, and where from: the share it is given (by the consumer
//! group, or by the Redis membership) and its placing at the read model's positions. A group member is
//! never moved by reassigning: its partitions are paused, sought and resumed.

use std::collections::BTreeSet;

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::Offset;

use super::group::GroupShare;
use super::{offsets, BrokerError, Partition, Source};

impl Source {
    /// Joins the consumer group: from now on its coordinator says which partitions this consumer may read
    /// ([`Source::group_share`]), and each is read once [`Source::assign`] has placed it.
    pub fn join(&mut self) -> Result<(), BrokerError> {
        *self.consumer().context().group.lock().expect("group assignment") = Some(GroupShare::default());
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        Ok(self.consumer().subscribe(&topics)?)
    }

    /// The partitions the consumer group has assigned to this consumer; `None` when it joined none.
    pub fn group_share(&self) -> Option<BTreeSet<Partition>> {
        self.consumer().context().group.lock().expect("group assignment").as_ref().map(|g| g.held.clone())
    }

    /// The partitions of `share` that [`Source::assign`] places at the read model's positions: those
    /// this consumer does not read yet, and those the group assigned (again) since they were last placed,
    /// which wait paused.
    pub fn to_place(&self, share: &BTreeSet<Partition>) -> Vec<Partition> {
        let group = self.consumer().context().group.lock().expect("group assignment");
        let unplaced = |p: &Partition| group.as_ref().is_some_and(|g| g.unplaced.contains(p));
        share.iter().filter(|p| !self.assigned.contains(*p) || unplaced(p)).cloned().collect()
    }

    /// Reads `share`: a partition this consumer reads already goes on from where it is; one to place
    /// ([`Source::to_place`]) starts at `start(partition)`, the position the read model holds (`None`:
    /// from the earliest offset). False when the share is what this consumer reads already. What was
    /// applied is committed first. After a failure every partition of the next share is placed again.
    pub fn assign(
        &mut self,
        share: BTreeSet<Partition>,
        start: impl Fn(&Partition) -> Option<i64>,
    ) -> Result<bool, BrokerError> {
        let new = self.to_place(&share);
        if share == self.assigned && new.is_empty() {
            return Ok(false);
        }
        // Partitions handed to another instance by the Redis membership are committed before it reads
        // them (under the group, commits never wait: see `commit_offsets`).
        self.commit_applied();
        self.applied.retain(|partition, _| share.contains(partition));
        self.recorded.retain(|partition| share.contains(partition));
        self.limit.retain(|partition| share.contains(partition));
        let mut starts = Vec::new();
        for partition in new.iter().cloned() {
            match start(&partition) {
                Some(offset) => {
                    starts.push((partition.clone(), offset));
                    self.recorded.hold([(partition.clone(), offset)]);
                    self.applied.insert(partition, offset)
                }
                None => {
                    self.recorded.forget(&partition);
                    self.applied.remove(&partition)
                }
            };
        }
        self.assigned = share;
        if let Err(e) = self.reposition() {
            self.assigned.clear();
            return Err(e);
        }
        if let Some(group) = self.consumer().context().group.lock().expect("group assignment").as_mut() {
            for partition in &new {
                group.unplaced.remove(partition);
            }
        }
        // The group's offsets say where each partition is read from, whatever was committed before (an
        // operator's reset): lag exporters and `kafka-consumer-groups --describe` show the truth at once.
        self.commit_offsets(starts.iter().map(|(p, o)| (p, *o)), CommitMode::Async);
        Ok(true)
    }

    /// Assigns every partition of the share at its position in `applied`, or at its earliest offset;
    /// but a partition halted by the dead-letter limit and waiting, which is not read.
    pub(super) fn reposition(&mut self) -> Result<(), BrokerError> {
        let at = |p: &Partition| self.applied.get(p).map_or(Offset::Beginning, |o| Offset::Offset(*o));
        let Some(group) = self.group_share() else {
            let read = self.assigned.iter().filter(|p| !self.limit.is_waiting(p));
            self.consumer().assign(&offsets::partition_list(read.map(|p| (p, at(p))))?)?;
            return Ok(());
        };
        // A group member keeps the partitions the group gave it, and moves them: each is held, placed
        // where it stands (a seek drops what was fetched of it before), and read again unless it waits.
        let held: Vec<&Partition> = self.assigned.iter().filter(|p| group.contains(*p)).collect();
        if held.is_empty() {
            return Ok(());
        }
        let all = offsets::partition_list(held.iter().map(|p| (*p, Offset::Invalid)))?;
        self.consumer().pause(&all)?;
        let placed = offsets::partition_list(held.iter().map(|p| (*p, at(p))))?;
        let placed = tokio::task::block_in_place(|| self.consumer().seek_partitions(placed, offsets::BROKER_TIMEOUT))?;
        if let Some(e) = placed.elements().iter().find_map(|e| e.error().err()) {
            return Err(BrokerError(e));
        }
        let read =
            offsets::partition_list(held.iter().filter(|p| !self.limit.is_waiting(p)).map(|p| (*p, Offset::Invalid)))?;
        self.consumer().resume(&read)?;
        Ok(())
    }
}
