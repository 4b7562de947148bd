//! The consumer group's assignment as librdkafka hands it over, inside a poll: where an assigned
//! partition starts (nowhere that needs the coordinator), and the share a member holds, paused until the
//! live loop places each partition at the read model's position (`Source::assign`).

use std::collections::BTreeSet;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

use super::consumer::Context;
use super::Partition;

/// The partitions the consumer group assigned to a member.
#[derive(Debug, Default)]
pub struct GroupShare {
    pub held: BTreeSet<Partition>,
    /// Those of `held` that wait, paused, to be placed at the read model's positions: assigned since the
    /// live loop last placed them (an eager rebalance takes every partition away and gives them back).
    pub unplaced: BTreeSet<Partition>,
}

impl ConsumerContext for Context {
    /// Runs inside a poll when the group assigns or revokes partitions: librdkafka's own handling, but
    /// for where an assigned partition starts. librdkafka would start it at the group's committed offset,
    /// which it asks the coordinator for first, and it never starts a partition whose committed offset
    /// that request failed to return (a coordinator's error it does not retry, or retried too often):
    /// the member would hold the partition and never read it. The projector reads each partition from
    /// the read model's position (`Source::assign` moves it there), so the partition starts at its
    /// earliest offset, which needs no coordinator, and waits paused ([`Context::post_rebalance`]).
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, partitions: &mut TopicPartitionList) {
        let assigning = err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
        if assigning {
            if let Err(e) = partitions.set_all_offsets(Offset::Beginning) {
                tracing::warn!(error = %e, "could not start the assigned partitions at their earliest offsets");
            }
        }
        let cooperative = matches!(consumer.rebalance_protocol(), RebalanceProtocol::Cooperative);
        let done = match (assigning, cooperative) {
            (true, true) => consumer.incremental_assign(partitions),
            (true, false) => consumer.assign(partitions),
            (false, true) => consumer.incremental_unassign(partitions),
            (false, false) => consumer.unassign(),
        };
        if let Err(e) = done {
            tracing::warn!(error = %e, assigning, "librdkafka refused the group's assignment");
        }
        let rebalance = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Rebalance::Assign(partitions),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => Rebalance::Revoke(partitions),
            other => Rebalance::Error(KafkaError::Rebalance(other.into())),
        };
        self.post_rebalance(consumer, &rebalance);
    }

    /// Runs inside a poll, after librdkafka took or gave up the partitions. A partition the group assigns
    /// is paused at once: it is read only once the live loop has moved it to the position the read model
    /// holds (`Source::assign`), never from where librdkafka started it.
    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let mut group = self.group.lock().expect("group assignment");
        match rebalance {
            Rebalance::Assign(list) => {
                if let Err(e) = consumer.pause(list) {
                    tracing::warn!(error = %e, "could not hold the partitions the group assigned");
                }
                let share = group.get_or_insert_default();
                for e in list.elements() {
                    share.held.insert(Partition::new(e.topic(), e.partition()));
                    share.unplaced.insert(Partition::new(e.topic(), e.partition()));
                }
                let holding = share.held.len();
                tracing::info!(partitions = list.count(), holding, "partitions assigned by the group");
            }
            Rebalance::Revoke(list) => {
                let share = group.get_or_insert_default();
                for e in list.elements() {
                    let partition = Partition::new(e.topic(), e.partition());
                    share.unplaced.remove(&partition);
                    share.held.remove(&partition);
                }
                let holding = share.held.len();
                tracing::info!(partitions = list.count(), holding, "partitions revoked by the group");
            }
            Rebalance::Error(e) => tracing::warn!(error = %e, "consumer group rebalance failed"),
        }
    }
}
