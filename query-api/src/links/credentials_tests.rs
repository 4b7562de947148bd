use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{future, ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;

use super::CredentialCache;

/// A credential chain that counts how often it is asked, and answers as told.
#[derive(Debug, Clone)]
struct Chain {
    calls: Arc<AtomicUsize>,
    answer: Answer,
}

#[derive(Debug, Clone, Copy)]
enum Answer {
    Fail,
    Hang,
    /// Credentials expiring this long after the call.
    Expiring(Duration),
}

impl ProvideCredentials for Chain {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = self.answer;
        future::ProvideCredentials::new(async move {
            match answer {
                Answer::Fail => Err(CredentialsError::not_loaded("no credentials here")),
                Answer::Hang => std::future::pending().await,
                Answer::Expiring(left) => {
                    let expiry = SystemTime::now() + left;
                    Ok(Credentials::new(format!("AKID{n}"), "secret", None, Some(expiry), "test"))
                }
            }
        })
    }
}

fn cache(answer: Answer, timeout: Duration) -> (CredentialCache, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let chain = Chain { calls: calls.clone(), answer };
    (CredentialCache::new(SharedCredentialsProvider::new(chain), "us-east-1", timeout), calls)
}

#[tokio::test]
async fn a_failing_chain_is_asked_once_for_a_hundred_links() {
    let (cache, calls) = cache(Answer::Fail, Duration::from_secs(1));
    for _ in 0..100 {
        assert!(cache.get(SystemTime::now()).await.is_none());
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the failure is remembered");
}

#[tokio::test]
async fn a_chain_that_hangs_costs_one_timeout_not_one_per_link() {
    let (cache, calls) = cache(Answer::Hang, Duration::from_millis(100));
    let started = std::time::Instant::now();
    for _ in 0..20 {
        assert!(cache.get(SystemTime::now()).await.is_none());
    }
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn credentials_about_to_expire_keep_signing_while_fresh_ones_are_fetched_in_the_background() {
    // Valid ten minutes more: usable, but due for a refresh (less than a link's lifetime plus a minute).
    let (cache, calls) = cache(Answer::Expiring(Duration::from_secs(600)), Duration::from_secs(1));
    let first = cache.get(SystemTime::now()).await.expect("fetched");
    assert_eq!(first.keys.access_key_id, "AKID0");
    let again = cache.get(SystemTime::now()).await.expect("still usable");
    assert_eq!(again.keys.access_key_id, "AKID0", "served from the cache, not after a fetch");
    wait_until(|| calls.load(Ordering::SeqCst) >= 2).await;
    wait_until(|| {
        let cached = cache.0.cached.read().unwrap().clone();
        cached.is_some_and(|c| c.keys.access_key_id != "AKID0")
    })
    .await;
}

/// Polls `done` every 10 ms for up to 5 s.
async fn wait_until(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
