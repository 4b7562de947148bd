//! The credentials video links are signed with, kept so that signing never waits on the AWS SDK's chain
//! in steady state: fetched again in the background ahead of expiry (or every 5 minutes, to follow
//! rotations) while the cached ones keep serving; a fetch is bounded by a timeout; and a failure is
//! remembered for a few seconds, so that while the chain is failing no request, and no link of a page,
//! waits on it again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use chrono::{DateTime, Utc};

use super::sigv4::{Keys, SigningKey};

/// Lifetime of a video link (api.md section 8).
pub const LINK_LIFETIME: Duration = Duration::from_secs(900);

/// Credentials without an expiry are fetched again this often, to follow rotations.
const REFRESH_EVERY: Duration = Duration::from_secs(300);
/// How long a failed fetch is remembered before the chain is asked again.
const FAILURE_BACKOFF: Duration = Duration::from_secs(5);
/// The longest a fetch may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Credentials as signing uses them.
#[derive(Clone)]
pub struct Cached {
    pub keys: Keys,
    pub expiry: Option<SystemTime>,
    fetched: Instant,
    /// Derived for the day the credentials were fetched.
    pub signing_key: SigningKey,
}

#[derive(Clone)]
pub struct CredentialCache(Arc<Shared>);

struct Shared {
    provider: SharedCredentialsProvider,
    region: String,
    timeout: Duration,
    cached: RwLock<Option<Cached>>,
    failed: RwLock<Option<Instant>>,
    /// One fetch at a time.
    fetch: tokio::sync::Mutex<()>,
    refreshing: AtomicBool,
}

impl CredentialCache {
    pub fn new(provider: SharedCredentialsProvider, region: &str, timeout: Duration) -> Self {
        Self(Arc::new(Shared {
            provider,
            region: region.to_string(),
            timeout,
            cached: RwLock::new(None),
            failed: RwLock::new(None),
            fetch: tokio::sync::Mutex::new(()),
            refreshing: AtomicBool::new(false),
        }))
    }

    /// Credentials to sign with `now`: the cached ones while they can still sign a link (refreshed in
    /// the background once they are due), else a fetch, unless one failed within the last few seconds.
    pub async fn get(&self, now: SystemTime) -> Option<Cached> {
        let cached = self.0.cached.read().expect("credential cache").clone();
        if let Some(cached) = cached.filter(|c| lifetime(c.expiry, now).is_some()) {
            if due(&cached, now) {
                self.refresh_in_background(now);
            }
            return Some(cached);
        }
        if self.0.failed.read().expect("credential cache").is_some_and(|at| at.elapsed() < FAILURE_BACKOFF) {
            return None;
        }
        self.0.fetch(now).await
    }

    fn refresh_in_background(&self, now: SystemTime) {
        if self.0.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = self.0.clone();
        tokio::spawn(async move {
            shared.fetch(now).await;
            shared.refreshing.store(false, Ordering::Release);
        });
    }
}

/// Whether credentials should be fetched again: they expire within a link's lifetime (plus a minute), they
/// are old, or it is a new day (for the signing key).
fn due(cached: &Cached, now: SystemTime) -> bool {
    let today = DateTime::<Utc>::from(now).format("%Y%m%d").to_string();
    let short = cached.expiry.is_some_and(|e| e <= now + LINK_LIFETIME + Duration::from_secs(60));
    short || cached.fetched.elapsed() >= REFRESH_EVERY || cached.signing_key.date() != today
}

impl Shared {
    /// Asks the chain, one fetch at a time and at most `timeout`; what is usable afterwards.
    async fn fetch(&self, now: SystemTime) -> Option<Cached> {
        let _one_at_a_time = self.fetch.lock().await;
        let cached = self.cached.read().expect("credential cache").clone();
        if let Some(cached) = cached.as_ref().filter(|c| !due(c, now)) {
            return Some(cached.clone());
        }
        match tokio::time::timeout(self.timeout, self.provider.provide_credentials()).await {
            Ok(Ok(credentials)) => {
                let keys = Keys {
                    access_key_id: credentials.access_key_id().to_string(),
                    secret_access_key: credentials.secret_access_key().to_string(),
                    session_token: credentials.session_token().map(String::from),
                };
                let today = DateTime::<Utc>::from(now).format("%Y%m%d").to_string();
                let signing_key = SigningKey::derive(&keys.secret_access_key, &today, &self.region);
                let fresh = Cached { keys, expiry: credentials.expiry(), fetched: Instant::now(), signing_key };
                *self.cached.write().expect("credential cache") = Some(fresh.clone());
                *self.failed.write().expect("credential cache") = None;
                Some(fresh)
            }
            failure => {
                match failure {
                    Ok(Err(e)) => tracing::warn!(error = %e, "no AWS credentials for video links"),
                    _ => tracing::warn!(timeout = ?self.timeout, "the AWS credential chain did not answer in time"),
                }
                *self.failed.write().expect("credential cache") = Some(Instant::now());
                // Keep serving with credentials that are still valid, if any.
                cached.filter(|c| lifetime(c.expiry, now).is_some())
            }
        }
    }
}

/// Seconds a link made `now` may live: the link lifetime, cut to what the credentials have left;
/// `None` when they have expired.
pub fn lifetime(expiry: Option<SystemTime>, now: SystemTime) -> Option<u64> {
    let full = LINK_LIFETIME.as_secs();
    match expiry {
        None => Some(full),
        Some(expiry) => expiry.duration_since(now).ok().map(|left| left.as_secs().min(full)).filter(|s| *s > 0),
    }
}

#[cfg(test)]
#[path = "credentials_tests.rs"]
mod tests;
