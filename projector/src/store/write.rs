//! The write script and the only Rust that knows its arguments: one atomic script per aggregate, in its
//! organization's slot, that applies what a fold produced unless the stored sequence moved since it was read.

use redis::{Cmd, Script, Value};
use shared::{Keyspace, Topic};

use crate::fold::{stored, Folded, IndexChange, State, TranscriptChange, TRANSCRIPT_HEADER};

const SOURCE: &str = include_str!("write.lua");

/// What the script did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptReply {
    Applied,
    /// Applied, except that the key's hash is claimed by another key id, so it opens nothing for this one.
    ClaimRefused,
    /// The stored sequence was this one, not the one the fold started from: nothing was written.
    Conflict(u64),
    /// A repair holds the aggregate: nothing was written; the live path tries again shortly.
    Held,
    /// The epoch this projector wrote before is gone: Redis lost data; nothing was written.
    Lost,
}

pub struct WriteScript(Script);

/// One aggregate's write: which aggregate, of which organization, folded from which sequence.
pub struct Write<'a> {
    pub topic: Topic,
    pub org: &'a str,
    pub aggregate_id: &'a str,
    pub expected: u64,
    pub folded: &'a Folded,
    /// This projector wrote the epoch this write sets before (see [`Write::sets_epoch`]), with no loss
    /// since: it must still exist.
    pub epoch_written: bool,
    /// The token of the repair writing this aggregate from scratch, None on the live path. A repair's
    /// write passes its own hold, and its transcript replaces the stored one instead of appending to it.
    pub repair: Option<&'a str>,
    /// The latest `occurredAt` of the events written, in microseconds since the Unix epoch (0: none): an
    /// organization's epoch carries the latest applied to it, which the API says its answers are as of.
    pub as_of_micros: i64,
    /// The generation's layout, which decides how the state is stored ([`crate::fold::stored`]).
    pub layout: u32,
    /// The transcript written whole in place of the stored one (layout 6 on, see [`super::whole`]):
    /// `None` appends the fold's cues, or keeps or deletes the transcript, as the fold says.
    pub replacement: Option<&'a Replacement>,
}

/// A transcript written whole, as it is stored ([`shared::layout::stored_transcript`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    pub stored: Vec<u8>,
    /// The interview was served before the write: the organization's rewrite token is written anew, so
    /// that a long transcript being sent stops rather than mixing two versions.
    pub rewrite: bool,
}

impl Write<'_> {
    /// Whether the script sets the epoch this write checks: an organization's epoch with every write of
    /// a study or an interview, the key index's with a key's index entry.
    pub fn sets_epoch(&self) -> bool {
        self.topic != Topic::ApiKey
            || matches!(self.folded.index, IndexChange::KeyLive { .. } | IndexChange::KeyRevoked { .. })
    }
}

impl WriteScript {
    pub fn new() -> Self {
        Self(Script::new(SOURCE))
    }

    /// Loads the script into Redis (after a restart, a failover, or a slot moving to a node without it).
    pub fn load(&self) -> redis::ScriptInvocation<'_> {
        self.0.prepare_invoke()
    }

    /// The script's call for one aggregate; its keys are in the organization's slot (or the API keys').
    pub fn invocation(&self, keys: &Keyspace, w: &Write<'_>) -> Cmd {
        let (topic, org, id, folded) = (w.topic, w.org, w.aggregate_id, w.folded);
        let state_key = keys.aggregate(topic, org, id);
        let index_key = match (&folded.state, &folded.index) {
            (_, IndexChange::None) => state_key.clone(),
            (State::Study(_), _) => keys.studies(org),
            (State::Interview(i), _) => keys.interviews(org, i.study_id.as_deref().unwrap_or_default()),
            (State::ApiKey(k), _) => keys.api_key_sha(k.sha256.as_deref().unwrap_or_default()),
        };
        let document_op = if folded.document.is_some() { "set" } else { "delete" };
        // An API key has no document; its third key is the key index's epoch, replaced by every key event.
        let (documents_key, document_op) = match topic {
            Topic::ApiKey => (keys.api_key_epoch(), "none"),
            Topic::Study => (keys.study_documents(org), document_op),
            Topic::Interview => (keys.interview_documents(org), document_op),
        };
        let transcript_key = match topic {
            Topic::Interview => keys.transcript(org, id),
            _ => state_key.clone(),
        };
        let hold_key = match topic {
            Topic::ApiKey => keys.api_key_hold(id),
            _ => keys.hold(org),
        };
        let (op, score_or_org) = match &folded.index {
            IndexChange::None => ("none", String::new()),
            IndexChange::Add(score) => ("add", format!("{}", *score as i64)),
            IndexChange::Remove => ("remove", String::new()),
            IndexChange::KeyLive { .. } => ("key-live", org.to_string()),
            IndexChange::KeyRevoked { .. } => ("key-revoked", String::new()),
        };
        // After the five keys: an API key's retired index entries, or the organization's epoch (and for
        // an interview, the token of the organization's last transcript rewrite).
        let more: Vec<String> = match (&folded.index, topic) {
            (IndexChange::KeyLive { retired } | IndexChange::KeyRevoked { retired }, _) => {
                retired.iter().map(|sha| keys.api_key_sha(sha)).collect()
            }
            (_, Topic::ApiKey) => Vec::new(),
            (_, Topic::Study) => vec![keys.org_epoch(org)],
            (_, Topic::Interview) => vec![keys.org_epoch(org), keys.transcripts_rewritten(org)],
        };
        // Folded from scratch, a served interview's transcript is stored as its layout stores one.
        let repaired = match (&folded.transcript, w.repair) {
            (TranscriptChange::Append(cues), Some(_)) if folded.state.is_served_interview() => {
                Some(shared::layout::stored_transcript(&format!("{TRANSCRIPT_HEADER}{cues}"), w.layout).into_owned())
            }
            _ => None,
        };
        let (transcript_op, cues, rewrite): (_, &[u8], _) =
            match (&folded.transcript, w.repair.is_some(), w.replacement, &repaired) {
                (TranscriptChange::Delete, _, _, _) => ("delete", b"", false),
                (_, _, Some(whole), _) => ("replace", &whole.stored, whole.rewrite),
                (_, true, None, Some(stored)) => ("replace", stored, true),
                (TranscriptChange::Keep, false, None, _) => ("keep", b"", false),
                (TranscriptChange::Append(cues), false, None, _) => ("append", cues.as_bytes(), false),
                (TranscriptChange::Append(cues), true, None, _) => ("set", cues.as_bytes(), false),
                // Folded from scratch, an interview without cues has no transcript.
                (TranscriptChange::Keep, true, None, _) if topic == Topic::Interview => ("delete", b"", false),
                (TranscriptChange::Keep, true, None, _) => ("keep", b"", false),
            };
        let state = stored::encode(&folded.state, folded.document.as_deref(), w.layout);
        let mut invocation = redis::cmd("EVALSHA");
        invocation
            .arg(self.0.get_hash())
            .arg(5 + more.len())
            .arg(state_key)
            .arg(index_key)
            .arg(documents_key)
            .arg(transcript_key)
            .arg(hold_key);
        for key in more {
            invocation.arg(key);
        }
        invocation
            .arg(w.expected)
            .arg(folded.sequence)
            .arg(state)
            .arg(id)
            .arg(document_op)
            .arg(
                folded
                    .document
                    .as_deref()
                    .map(|doc| shared::layout::stored_document(doc, w.layout))
                    .unwrap_or_default()
                    .as_ref(),
            )
            .arg(op)
            .arg(score_or_org)
            .arg(transcript_op)
            .arg(cues)
            .arg(TRANSCRIPT_HEADER)
            .arg(uuid::Uuid::new_v4().simple().to_string())
            .arg(if w.epoch_written { "1" } else { "0" })
            .arg(w.repair.unwrap_or(""))
            .arg(w.as_of_micros.max(0))
            .arg(if rewrite { "1" } else { "0" });
        invocation
    }

    /// Reads the script's reply: the status `APPLIED`, or the sequence it found as a string. Anything
    /// else is an error, never taken for applied.
    pub fn reply(value: Value) -> Result<ScriptReply, ReplyError> {
        match &value {
            Value::SimpleString(status) if status == "APPLIED" => Ok(ScriptReply::Applied),
            Value::SimpleString(status) if status == "CLAIM-REFUSED" => Ok(ScriptReply::ClaimRefused),
            Value::SimpleString(status) if status == "LOST" => Ok(ScriptReply::Lost),
            Value::SimpleString(status) if status == "HELD" => Ok(ScriptReply::Held),
            Value::BulkString(found) => {
                let found = std::str::from_utf8(found).ok().and_then(|s| s.parse().ok());
                found.map(ScriptReply::Conflict).ok_or(ReplyError(value))
            }
            _ => Err(ReplyError(value)),
        }
    }
}

/// A reply the write script never gives.
#[derive(Debug, thiserror::Error)]
#[error("unexpected reply from the write script: {0:?}")]
pub struct ReplyError(Value);

impl ReplyError {
    pub fn new(value: Value) -> Self {
        Self(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_applied_status_reads_as_applied() {
        let applied = WriteScript::reply(Value::SimpleString("APPLIED".into())).unwrap();
        assert_eq!(applied, ScriptReply::Applied);
        let found = WriteScript::reply(Value::BulkString(b"18446744073709551615".to_vec())).unwrap();
        assert_eq!(found, ScriptReply::Conflict(u64::MAX));
        for other in [Value::Int(-1), Value::Int(3), Value::Okay, Value::Nil, Value::BulkString(b"-1".to_vec())] {
            assert!(WriteScript::reply(other).is_err());
        }
    }
}
