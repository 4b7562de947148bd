//! How an aggregate's stored sequence and state are read before its events are folded: its state's hash
//! and, for an interview, its document, from which a served one's state stored without it (layout 2 on) is
//! read back. Read in every layout the projector reads.

use redis::{Cmd, Value};
use shared::codec::StoredDocument;
use shared::{Keyspace, Topic};

use super::{Group, Pending, Store, StoreError};
use crate::fold::{stored, State};

impl Store {
    /// Reads the states of the pending aggregates not loaded yet, in one round trip.
    pub(super) async fn load_missing(&mut self, pending: &mut [Pending<'_>]) -> Result<(), StoreError> {
        let missing: Vec<usize> = (0..pending.len()).filter(|&i| pending[i].loaded.is_none()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let (mut commands, mut ends) = (Vec::new(), Vec::with_capacity(missing.len()));
        for &i in &missing {
            let (group, org) = (pending[i].group, pending[i].org);
            commands.extend(state_reads(&self.keys, group.topic, org, group.aggregate_id));
            ends.push(commands.len());
        }
        let replies = self.query(&commands).await?;
        let mut start = 0;
        for (&i, end) in missing.iter().zip(ends) {
            pending[i].loaded = Some(self.decode_state(pending[i].group, pending[i].org, &replies[start..end])?);
            start = end;
        }
        Ok(())
    }

    pub(super) fn decode_state(
        &self,
        group: &Group<'_>,
        org: &str,
        replies: &[Value],
    ) -> Result<(u64, State), StoreError> {
        decode_state(group.topic, replies).map_err(|reason| StoreError::CorruptState {
            key: self.keys.aggregate(group.topic, org, group.aggregate_id),
            reason,
        })
    }
}

/// The reads of an aggregate's stored sequence and state: the state's hash, and for an interview its
/// document, from which a served one's state stored without it is read back. Read in every layout: a
/// generation whose meta Redis lost reads as layout 1, and may hold such states written before.
pub(super) fn state_reads(keys: &Keyspace, topic: Topic, org: &str, id: &str) -> Vec<Cmd> {
    let mut state = redis::cmd("HMGET");
    state.arg(keys.aggregate(topic, org, id)).arg("seq").arg("state");
    if topic != Topic::Interview {
        return vec![state];
    }
    let mut document = redis::cmd("HGET");
    document.arg(keys.interview_documents(org)).arg(id);
    vec![state, document]
}

/// An aggregate's stored sequence and state from the replies to [`state_reads`] (the document's, if
/// any, after the state's); an unreadable one says why.
pub(super) fn decode_state(topic: Topic, replies: &[Value]) -> Result<(u64, State), String> {
    let (seq, state): (Option<u64>, Option<String>) =
        redis::from_redis_value_ref(&replies[0]).map_err(|e| e.to_string())?;
    let document: Option<StoredDocument> = match replies.get(1) {
        Some(reply) => redis::from_redis_value_ref(reply).map_err(|e| e.to_string())?,
        None => None,
    };
    let document = document.map(|d| d.0);
    let state = match state {
        Some(json) => stored::decode(topic, &json, document.as_deref()).map_err(|e| e.to_string())?,
        None => State::new(topic),
    };
    Ok((seq.unwrap_or(0), state))
}
