//! What can go wrong writing the read model, and which of it is worth trying again: Redis away, busy,
//! full or moving a slot is waited out; an event at fault (a key of the wrong type, a script error, a
//! state that does not read) is set aside as a dead letter. Read from Redis's error codes, which a
//! pipeline nests in the client's error.

use super::write;
use super::Doubt;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from redis: {0}")]
    Reply(#[from] redis::ParsingError),
    #[error(transparent)]
    Script(#[from] write::ReplyError),
    #[error("stored state of {key} is unreadable: {reason}")]
    CorruptState { key: String, reason: String },
    #[error("aggregate {0} kept changing under the projector")]
    Contended(String),
    #[error("aggregate {0} stayed held by a repair")]
    Held(String),
    /// A repair's hold or lease expired before its swap (the repair was too slow to renew it, or Redis lost
    /// it): nothing was swapped, and the live path may have written meanwhile.
    #[error("the repair's hold on the organization lapsed before the swap (it is not taken again: live writes may have been made meanwhile)")]
    HoldLost,
    /// A staged copy is not what the repair staged (lost to its TTL, a failover or a restart): nothing was
    /// swapped.
    #[error("the repair's staged copy of {0} is incomplete (lost to its TTL, a failover or a restart)")]
    StagingIncomplete(String),
    /// An epoch this projector wrote is gone: Redis lost data since the projector last looked.
    #[error("{0}, written by this projector, is gone")]
    Lost(String),
    /// The look before a write with a gap found a loss, or got no answer (see [`Store::apply`]).
    #[error("{0:?}")]
    Doubted(Doubt),
    /// The generation written has a layout this build does not read (its meta changed under the
    /// projector, which checks it before it writes to a generation).
    #[error(transparent)]
    Layout(#[from] shared::layout::UnknownLayout),
}

/// Redis's error codes that say "not now": the server is full, busy, loading, read-only, failing over or
/// moving a slot, or the projector's Redis user lacks a command of the write script (`NOPERM`: the script
/// then writes nothing, and an operator fixes the ACL; no event is at fault, so none is set aside).
/// Wherever they come from, a write script included, trying again later can succeed.
const TRANSIENT: [&str; 11] = [
    "OOM",
    "READONLY",
    "BUSY",
    "LOADING",
    "TRYAGAIN",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
    "NOREPLICAS",
    "NOPERM",
];

impl StoreError {
    /// Whether trying again cannot help: the events are at fault (a key of the wrong type, keys in two
    /// slots, a script error, a state that does not read), not Redis being away, busy or full.
    pub fn is_permanent(&self) -> bool {
        match self {
            StoreError::Redis(e) => {
                let codes = error_codes(e);
                if codes.iter().any(|c| TRANSIENT.contains(&c.as_str())) {
                    return false;
                }
                // Read from the text too: in a pipeline the server's error is nested in the client's.
                let text = e.to_string();
                codes.iter().any(|c| c == "WRONGTYPE" || c == "CROSSSLOT")
                    || ["WRONGTYPE", "CROSSSLOT", "@user_script", "Error running script"]
                        .iter()
                        .any(|s| text.contains(s))
            }
            StoreError::Reply(_) | StoreError::Script(_) | StoreError::CorruptState { .. } => true,
            StoreError::Contended(_)
            | StoreError::Held(_)
            | StoreError::HoldLost
            | StoreError::StagingIncomplete(_)
            | StoreError::Lost(_)
            | StoreError::Doubted(_)
            | StoreError::Layout(_) => false,
        }
    }

    /// Whether Redis refused the write for lack of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, StoreError::Redis(e) if error_codes(e).iter().any(|c| c == "OOM") || e.to_string().contains("OOM command"))
    }
}

/// The error codes of a Redis error: its own, or each of a pipeline's failed commands'.
fn error_codes(e: &redis::RedisError) -> Vec<String> {
    if let Some(code) = e.code() {
        return vec![code.to_string()];
    }
    match e.clone().into_server_errors() {
        Some(errors) => errors.iter().map(|(_, error)| error.code().to_string()).collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str, detail: &str) -> StoreError {
        StoreError::Redis(redis::make_extension_error(code.to_string(), Some(detail.to_string())))
    }

    #[test]
    fn a_refusal_from_inside_the_write_script_is_classified_by_its_code() {
        // As Redis 7.0.15 words an OOM met by a write inside the script.
        let oom =
            server("OOM", "command not allowed when used memory > 'maxmemory'. script: 1f0e, on @user_script:52.");
        assert!(!oom.is_permanent(), "a full Redis is waited out, not dead-lettered");
        assert!(oom.is_out_of_memory());
        for code in ["READONLY", "BUSY", "LOADING", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "MOVED", "ASK"] {
            let e = server(code, "You can't write against a read only replica. script: 1f0e, on @user_script:12.");
            assert!(!e.is_permanent(), "{code} is transient");
        }
        let wrong = server(
            "WRONGTYPE",
            "Operation against a key holding the wrong kind of value script: 1f0e, on @user_script:40.",
        );
        assert!(wrong.is_permanent());
        let failed = server("ERR", "user_script:9: Script attempted to access nonexistent global variable 'x' script: 1f0e, on @user_script:9.");
        assert!(failed.is_permanent());
        assert!(!StoreError::Contended("a".into()).is_permanent());
    }
}
