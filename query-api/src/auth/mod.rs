//! API-key authentication (api.md section 5): the request's credential ([`credential`]), looked up by its
//! SHA-256 among the keys kept in memory (Redis pushing their changes: `crate::read::push`) or else in
//! Redis, then the throttles ([`rate_limit`]). The SHA-256 and its organization may be kept in memory;
//! the key never is.

pub mod client;
pub mod credential;
pub mod invalid;
pub mod rate_limit;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::Keyspace;

use crate::metrics::Metrics;
use crate::read::model::{self, KeyLookup, ReadModel};
use crate::read::push::{Kind, Known, Tracker};
use client::Client;
use invalid::InvalidKeys;
use rate_limit::{RateLimit, Refused, Standing, UnknownKeys};

/// The organization the request's API key belongs to, and the read-model generation the request reads.
#[derive(Debug, Clone)]
pub struct Organization {
    pub id: String,
    pub keys: Keyspace,
    /// Where the key's rate limit stands after this request, when there is one.
    pub standing: Option<Standing>,
}

/// Why a request is not authenticated.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("missing or invalid API key")]
    Unauthorized,
    /// An invalid key (kept as such: [`invalid`]) from a client whose throttle of unknown keys is closed
    /// for this long: 401 all the same, the throttle told by a header.
    #[error("invalid API key, from a client sending too many unknown ones lately")]
    InvalidWhileThrottled(Duration),
    /// The key's rate limit is spent; a token comes back after `wait`.
    #[error("rate limit exceeded")]
    RateLimited(Refused),
    /// The client sent too many unknown keys lately: its keys not kept in memory are not looked up for this
    /// long.
    #[error("too many unknown API keys from this client lately")]
    Throttled(Duration),
    /// The key index held keys in this generation and is gone: Redis lost it, and no projector has
    /// marked the loss yet. Whether the key is valid is not known.
    #[error("the key index was lost and is not projected again yet")]
    IndexLost,
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

pub struct Auth {
    model: ReadModel,
    /// Keys kept in memory, unless that is off (`API_KEY_CACHE_SIZE=0`).
    kept: Option<Tracker>,
    per_key: Option<RateLimit>,
    unknown: Option<UnknownKeys>,
    /// Keys found in no organization, while the key index's epoch Redis pushes is the one read with them.
    invalid: Option<InvalidKeys>,
    /// The proxies whose `X-Forwarded-For` names the client.
    trusted_proxies: Vec<ipnet::IpNet>,
    /// Whether this instance has seen a key index holding keys (its epoch), in any generation: every
    /// generation is built from the same topics, so once one held keys, a generation without a key index
    /// lost it (Redis lost it, or a switch came to a generation Redis had lost), and no key is refused for
    /// its absence. A read model that never held a key (no key event yet) has no epoch either.
    index_seen: AtomicBool,
    /// Requests whose `X-Forwarded-For` came from a peer not in `TRUSTED_PROXIES` (its clients are then
    /// throttled as one): told on the admin readiness detail, and logged.
    untrusted_forwards: AtomicU64,
    metrics: Arc<Metrics>,
}

/// A proxy not trusted, logged once a minute at most.
static UNTRUSTED_PROXY: shared::log_every::LogEvery = shared::log_every::LogEvery::millis(60_000);

impl Auth {
    pub fn new(
        model: ReadModel,
        kept: Option<Tracker>,
        throttles: (Option<RateLimit>, Option<UnknownKeys>),
        invalid: Option<InvalidKeys>,
        trusted_proxies: Vec<ipnet::IpNet>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let (per_key, unknown) = throttles;
        // Invalid keys are vouched for by the key index's epoch, which only the tracker keeps.
        let invalid = invalid.filter(|_| kept.is_some());
        let index_seen = AtomicBool::new(false);
        let untrusted_forwards = AtomicU64::new(0);
        Self { model, kept, per_key, unknown, invalid, trusted_proxies, index_seen, untrusted_forwards, metrics }
    }

    /// Whether `digest` is kept as invalid, under the key index's epoch Redis pushes now.
    fn known_invalid(&self, keys: &Keyspace, digest: &[u8; 32]) -> bool {
        let (Some(invalid), Some(kept)) = (&self.invalid, &self.kept) else { return false };
        let epoch_key = keys.api_key_epoch();
        match kept.known(&epoch_key) {
            Some(Known::Value(epoch)) => invalid.contains(digest, &epoch),
            // Not kept, or no longer vouched for: read again, and the key looked up.
            _ => {
                kept.keep(&epoch_key, model::key_index_epoch(keys), Kind::KeyIndex);
                false
            }
        }
    }

    /// Who sent a request from `peer` with `headers` ([`client`]).
    pub fn client(&self, peer: Option<std::net::SocketAddr>, headers: &axum::http::HeaderMap) -> Client {
        if let Some(peer) = peer.filter(|_| headers.contains_key("x-forwarded-for")) {
            let ip = peer.ip().to_canonical();
            if !self.trusted_proxies.iter().any(|net| net.contains(&ip)) {
                self.untrusted_forwards.fetch_add(1, Ordering::Relaxed);
                if let Some(skipped) = UNTRUSTED_PROXY.allow() {
                    tracing::warn!(
                        peer = %ip,
                        skipped,
                        "X-Forwarded-For from a peer not in TRUSTED_PROXIES: every client behind it is throttled as \
                         one; if it is your proxy, add its range to TRUSTED_PROXIES"
                    );
                }
            }
        }
        Client::from_request(peer, headers, &self.trusted_proxies)
    }

    /// Requests whose `X-Forwarded-For` came from a peer not trusted, since the start.
    pub fn untrusted_forwards(&self) -> u64 {
        self.untrusted_forwards.load(Ordering::Relaxed)
    }

    /// The per-key rate limit, when one is configured.
    pub fn rate_limit(&self) -> Option<&RateLimit> {
        self.per_key.as_ref()
    }

    /// The throttle of unknown keys, when one is configured.
    pub fn unknown_keys(&self) -> Option<&UnknownKeys> {
        self.unknown.as_ref()
    }

    /// The organization of an API key (a request's [`credential`]), sent by `client`, in the generation
    /// `keys` is of.
    pub async fn organization(&self, key: &str, client: Client, keys: Keyspace) -> Result<Organization, AuthError> {
        let digest = shared::keys::key_digest(key);
        let sha256 = hex::encode(digest);
        let entry = keys.api_key_sha(&sha256);
        let id = match self.kept.as_ref().and_then(|kept| kept.known(&entry)) {
            Some(Known::Value(id)) => {
                self.metrics.key_lookups_memory.inc();
                id.to_string()
            }
            Some(Known::Absent) => {
                self.metrics.key_lookups_memory.inc();
                return Err(AuthError::Unauthorized);
            }
            None if self.known_invalid(&keys, &digest) => {
                self.metrics.key_lookups_memory.inc();
                let throttled = self.unknown.as_ref().and_then(|u| u.admits(client, Instant::now()).err());
                return Err(throttled.map_or(AuthError::Unauthorized, AuthError::InvalidWhileThrottled));
            }
            None => {
                let now = Instant::now();
                if let Some(unknown) = &self.unknown {
                    unknown.admits(client, now).map_err(AuthError::Throttled)?;
                }
                self.metrics.key_lookups_redis.inc();
                let mut epoch = None;
                let org = match self.model.key_lookup(&keys, &sha256).await? {
                    // Not kept either: the absence is the loss's, not the key's.
                    KeyLookup::IndexMissing if self.index_seen.load(Ordering::Relaxed) => {
                        return Err(AuthError::IndexLost);
                    }
                    KeyLookup::IndexMissing => None,
                    found => {
                        // The index has its epoch: it holds keys.
                        if !self.index_seen.load(Ordering::Relaxed) {
                            self.index_seen.store(true, Ordering::Relaxed);
                        }
                        match found {
                            KeyLookup::Organization(id) => Some(id),
                            KeyLookup::Unknown(read) => {
                                epoch = Some(read);
                                None
                            }
                            KeyLookup::IndexMissing => None,
                        }
                    }
                };
                // A live key is kept from a read of its own, on the connection Redis pushes the key's changes
                // on; an invalid one here, beside the epoch read with it.
                match (&self.kept, &org, epoch, &self.invalid) {
                    (Some(kept), Some(_), ..) => kept.keep(&entry, model::organization_of(&keys, &sha256), Kind::Key),
                    (Some(kept), None, Some(epoch), Some(invalid)) => {
                        invalid.insert(digest, &epoch);
                        kept.keep(&keys.api_key_epoch(), model::key_index_epoch(&keys), Kind::KeyIndex);
                    }
                    _ => {}
                }
                let Some(id) = org else {
                    if let Some(unknown) = &self.unknown {
                        unknown.unknown(client, now);
                    }
                    return Err(AuthError::Unauthorized);
                };
                id
            }
        };
        let standing = match &self.per_key {
            Some(limit) => Some(limit.take(&digest).map_err(AuthError::RateLimited)?),
            None => None,
        };
        Ok(Organization { id, keys, standing })
    }
}
