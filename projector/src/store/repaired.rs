//! The one write of the store that is not the live path's: an aggregate folded from scratch by a repair
//! ([`crate::repair`](mod@crate::repair)), written over the stored one with the live path's own write script and the repair's
//! token, and the read of the stored state it starts from. Here, beside the script whose arguments only the
//! store knows; the rest of a repair's Redis side (hold, staging, swap) is the repair's own.

use shared::Topic;

use super::write::{ScriptReply, Write};
use super::{Store, StoreError};
use crate::fold::{Folded, IndexChange, State};

impl Store {
    /// Writes one aggregate folded from scratch over the stored one at `expected`, with the live path's
    /// write script and the repair's `token` (which opens the repair's own hold). The transcript is
    /// replaced. For an API key, the index entries of every hash the stored state had are let go unless
    /// the repaired state keeps them.
    pub async fn write_repaired(
        &mut self,
        topic: Topic,
        org: &str,
        id: &str,
        expected: (u64, State),
        mut folded: Folded,
        token: &str,
    ) -> Result<ScriptReply, StoreError> {
        if let (State::ApiKey(stored), State::ApiKey(repaired)) = (&expected.1, &folded.state) {
            let stale =
                stored.sha256.iter().chain(&stored.retired).filter(|sha| repaired.sha256.as_ref() != Some(*sha));
            let stale: Vec<String> = stale.cloned().collect();
            match &mut folded.index {
                IndexChange::KeyLive { retired } | IndexChange::KeyRevoked { retired } => {
                    for sha in stale {
                        if !retired.contains(&sha) {
                            retired.push(sha);
                        }
                    }
                }
                _ => {}
            }
        }
        let layout = self.layout().await?;
        let write = Write {
            topic,
            org,
            aggregate_id: id,
            expected: expected.0,
            folded: &folded,
            epoch_written: false,
            repair: Some(token),
            // What the organization is as of stays what its epoch says (the swap keeps it).
            as_of_micros: 0,
            layout,
            replacement: None,
        };
        let command = self.write.invocation(&self.keys, &write);
        let reply = self.query(&[command]).await?.pop().expect("one reply");
        Ok(super::write::WriteScript::reply(reply)?)
    }

    /// The stored sequence and state of one aggregate.
    pub async fn stored(&mut self, topic: Topic, org: &str, id: &str) -> Result<(u64, State), StoreError> {
        let replies = self.query(&super::states::state_reads(&self.keys, topic, org, id)).await?;
        super::states::decode_state(topic, &replies)
            .map_err(|reason| StoreError::CorruptState { key: self.keys.aggregate(topic, org, id), reason })
    }
}
