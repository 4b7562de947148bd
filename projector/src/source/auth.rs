//! How every Kafka client of the projector proves who it is when the properties alone cannot say it:
//! AWS MSK IAM. MSK (and MSK Serverless, which accepts nothing else) takes SASL OAUTHBEARER with a token
//! that is a SigV4-signed `kafka-cluster:Connect` request, made from IAM credentials. librdkafka asks for a
//! token when a client starts and again at 80% of the last one's lifetime (12 of its 15 minutes); each is
//! signed with the credentials the AWS SDK's default chain gives at that moment (environment, web
//! identity as with IRSA, the container or instance role), so rotated credentials are picked up.
//!
//! The SASL and TLS settings of the other setups (PLAIN, SCRAM, librdkafka's own OIDC method) are plain
//! properties and need nothing here.

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use aws_credential_types::provider::SharedCredentialsProvider;
use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::consumer::ConsumerContext;
use tokio::sync::OnceCell;

/// How long one token may take to make (credentials from the instance or STS, then the signature)
/// before librdkafka is told it failed; it asks again ten seconds later.
const MAKE_WITHIN: Duration = Duration::from_secs(10);

/// How the clients authenticate beyond what the Kafka properties say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum KafkaAuth {
    /// SASL and TLS exactly as the Kafka properties say (none, PLAIN, SCRAM, OAUTHBEARER with
    /// `sasl.oauthbearer.method=oidc`).
    #[default]
    Properties,
    /// SASL OAUTHBEARER with AWS MSK IAM tokens, signed with credentials from the AWS SDK's default chain.
    AwsMskIam,
}

/// The maker of MSK IAM tokens, shared by every client of the process.
pub struct MskIam {
    maker: Arc<Maker>,
    /// Where tokens are made: a runtime of one thread of its own. librdkafka asks for a token inside a
    /// poll, which may run on a worker of the process's runtime and block it until the token comes: with
    /// one worker (a CPU limit of 1) a token made on that runtime would wait for the worker it blocks
    /// (credentials from STS or the instance's metadata need its IO and timers), and the projector would
    /// hang, `/livez` with it.
    runtime: TokenRuntime,
}

struct Maker {
    /// The region given, or the SDK's own (AWS_REGION, the profile, the instance's).
    region: Option<String>,
    /// The region and credentials provider, resolved at the first token (the provider caches
    /// credentials and renews them before they expire).
    sdk: OnceCell<(Region, SharedCredentialsProvider)>,
}

/// A runtime stopped without waiting when dropped (it may be dropped inside another runtime).
struct TokenRuntime(Option<tokio::runtime::Runtime>);

impl TokenRuntime {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("msk-iam-tokens")
            .enable_all()
            .build()
            .expect("a runtime for MSK IAM tokens");
        TokenRuntime(Some(runtime))
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("running until dropped").handle()
    }
}

impl Drop for TokenRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for MskIam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MskIam").field("region", &self.maker.region).finish_non_exhaustive()
    }
}

/// Why no token could be made.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("no AWS region for MSK IAM: set KAFKA_AWS_REGION or AWS_REGION")]
    NoRegion,
    #[error("no AWS credentials provider for MSK IAM")]
    NoCredentials,
    #[error("no MSK IAM token within {MAKE_WITHIN:?}")]
    Timeout,
    #[error("MSK IAM token: {0}")]
    Signer(String),
}

impl MskIam {
    /// A token maker with the SDK's default credentials chain.
    pub fn new(region: Option<String>) -> Arc<Self> {
        let maker = Arc::new(Maker { region, sdk: OnceCell::new() });
        Arc::new(Self { maker, runtime: TokenRuntime::new() })
    }

    /// A token maker with credentials of its own (tests).
    #[cfg(test)]
    pub fn with_credentials(region: &str, credentials: SharedCredentialsProvider) -> Arc<Self> {
        let sdk = OnceCell::new_with(Some((Region::new(region.to_string()), credentials)));
        let maker = Arc::new(Maker { region: Some(region.to_string()), sdk });
        Arc::new(Self { maker, runtime: TokenRuntime::new() })
    }

    /// A fresh token, signed now with the current credentials, made on the tokens' own runtime.
    #[cfg(test)]
    pub async fn token(&self) -> Result<OAuthToken, TokenError> {
        let maker = Arc::clone(&self.maker);
        let made = self.runtime.handle().spawn(async move { maker.token().await });
        made.await.map_err(|e| TokenError::Signer(format!("the task making the token failed: {e}")))?
    }

    /// [`MskIam::token`] for librdkafka, which asks on a thread of its own or inside a poll (possibly on a
    /// worker of the process's runtime): the token is made on the tokens' runtime, and waited for here.
    fn token_blocking(&self) -> Result<OAuthToken, TokenError> {
        let (sent, made) = std::sync::mpsc::sync_channel(1);
        let maker = Arc::clone(&self.maker);
        self.runtime.handle().spawn(async move {
            let _ = sent.send(tokio::time::timeout(MAKE_WITHIN, maker.token()).await);
        });
        made.recv_timeout(MAKE_WITHIN + Duration::from_secs(1))
            .map_err(|_| TokenError::Timeout)?
            .map_err(|_| TokenError::Timeout)?
    }
}

impl Maker {
    async fn token(&self) -> Result<OAuthToken, TokenError> {
        let (region, credentials) = self.sdk.get_or_try_init(|| self.resolve()).await?;
        let (token, expires_ms) =
            aws_msk_iam_sasl_signer::generate_auth_token_from_credentials_provider(region.clone(), credentials.clone())
                .await
                .map_err(|e| TokenError::Signer(e.to_string()))?;
        // The broker takes the principal from the signature; librdkafka needs none.
        Ok(OAuthToken { token, principal_name: String::new(), lifetime_ms: expires_ms })
    }

    async fn resolve(&self) -> Result<(Region, SharedCredentialsProvider), TokenError> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        let sdk = loader.load().await;
        let region = sdk.region().cloned().ok_or(TokenError::NoRegion)?;
        Ok((region, sdk.credentials_provider().ok_or(TokenError::NoCredentials)?))
    }
}

/// The context of every Kafka client the projector makes that needs no other: it answers librdkafka's
/// requests for an OAUTHBEARER token with MSK IAM tokens when they are configured.
#[derive(Clone, Default)]
pub struct Auth(pub(super) Option<Arc<MskIam>>);

impl Auth {
    /// A token for librdkafka. Without MSK IAM there is none to give: librdkafka asks only when
    /// OAUTHBEARER is configured without its OIDC method (and its unsecured test tokens make their own).
    pub fn oauth_token(&self) -> Result<OAuthToken, Box<dyn StdError>> {
        match &self.0 {
            Some(iam) => Ok(iam.token_blocking().inspect_err(|e| tracing::warn!(error = %e, "no MSK IAM token"))?),
            None => Err("sasl.mechanism is OAUTHBEARER but no token source is configured: set \
                         sasl.oauthbearer.method=oidc or KAFKA_AUTH=aws-msk-iam"
                .into()),
        }
    }
}

impl ClientContext for Auth {
    const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

    fn generate_oauth_token(&self, _config: Option<&str>) -> Result<OAuthToken, Box<dyn StdError>> {
        self.oauth_token()
    }
}

impl ConsumerContext for Auth {}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
