//! Presigned video links (api.md section 8): a SigV4 query-signed GET for the stored object, made on every
//! request and valid 15 minutes, or less when the credentials expire sooner, so a link never outlives its
//! credentials. Signing makes no network call: credentials come from the AWS SDK's provider chain, kept and
//! refreshed ahead of expiry by [`credentials`]; the signing key is derived once a day ([`sigv4`]); the
//! bucket an event names is checked first ([`bucket`]). A request resolves its credentials once, however
//! many links it signs ([`Links`]). Any failure gives no link, never a failed request.

mod bucket;
mod credentials;
pub mod sigv4;

use std::time::SystemTime;

use chrono::{DateTime, Utc};
#[cfg(test)]
use shared::VideoObject;

use crate::config::Config;
use bucket::Allowed;
use credentials::{lifetime, Cached, CredentialCache, FETCH_TIMEOUT};
use sigv4::{Endpoint, Signer, SigningKey};

pub struct Presigner {
    endpoint: Endpoint,
    default_bucket: Option<String>,
    allowed: Allowed,
    credentials: CredentialCache,
}

impl Presigner {
    /// A presigner from the configuration and the AWS SDK's credential chain; `None` when links are off.
    pub async fn from_config(config: &Config) -> Option<Self> {
        if config.s3_disabled {
            return None;
        }
        let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(config.s3_region.clone()))
            .load()
            .await;
        let Some(provider) = shared.credentials_provider() else {
            tracing::warn!("no AWS credentials provider: video links are off");
            return None;
        };
        let (url, path_style) = match &config.s3_endpoint {
            Some(url) => (url.clone(), config.s3_force_path_style),
            None => (format!("https://s3.{}.amazonaws.com", config.s3_region), config.s3_force_path_style),
        };
        let Some(endpoint) = Endpoint::parse(&url, &config.s3_region, path_style) else {
            tracing::error!(endpoint = %url, "S3_ENDPOINT is not a base URL (scheme://host[:port]): video links are off");
            return None;
        };
        Some(Self {
            endpoint,
            default_bucket: config.s3_bucket.clone().filter(|b| !b.is_empty()),
            allowed: Allowed::parse(config.s3_allowed_buckets.as_deref()),
            credentials: CredentialCache::new(provider, &config.s3_region, FETCH_TIMEOUT),
        })
    }

    /// The links of one request: credentials are resolved once for all of them.
    pub fn links(&self) -> Links<'_> {
        Links { presigner: self, signer: None }
    }

    /// A fresh link to one object; see [`Links::url`].
    #[cfg(test)]
    pub async fn url(&self, video: &VideoObject) -> Result<String, NoLink> {
        self.links().url(video.bucket.as_deref(), &video.key).await
    }
}

/// Links signed for one request, all with the same time, lifetime and credentials.
pub struct Links<'a> {
    presigner: &'a Presigner,
    /// The request's signer, once its credentials are resolved (`None` inside when there were no usable
    /// ones to be had).
    signer: Option<Option<Signer<'a>>>,
}

impl Links<'_> {
    /// A fresh link to the object. No link when the event named no usable object: an empty key, or a
    /// bucket (its own, or the default for an empty or missing one) that is not a valid bucket name or not
    /// allowed; nor without usable credentials.
    pub async fn url(&mut self, bucket: Option<&str>, key: &str) -> Result<String, NoLink> {
        let p = self.presigner;
        let bucket = bucket.filter(|b| !b.is_empty()).or(p.default_bucket.as_deref());
        let bucket = bucket.ok_or(NoLink::NoBucket)?;
        if key.is_empty() || !p.allowed.permits(bucket) {
            return Err(NoLink::Refused);
        }
        if self.signer.is_none() {
            let now = SystemTime::now();
            self.signer = Some(p.credentials.get(now).await.and_then(|cached| p.signer(&cached, now)));
        }
        let signer = self.signer.as_ref().and_then(Option::as_ref).ok_or(NoLink::NoCredentials)?;
        Ok(signer.link(bucket, key))
    }
}

impl Presigner {
    /// The signer of links made `now` with these credentials; `None` once they have expired.
    fn signer(&self, cached: &Cached, now: SystemTime) -> Option<Signer<'_>> {
        let lifetime = lifetime(cached.expiry, now)?;
        let amz_date = DateTime::<Utc>::from(now).format("%Y%m%dT%H%M%SZ").to_string();
        let derived;
        let signing_key = if cached.signing_key.date() == &amz_date[..8] {
            &cached.signing_key
        } else {
            derived = SigningKey::derive(&cached.keys.secret_access_key, &amz_date[..8], &self.endpoint.region);
            &derived
        };
        Some(Signer::new(&self.endpoint, &cached.keys, signing_key, &amz_date, lifetime))
    }
}

/// Why a video gets no link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoLink {
    /// Stored without a bucket, and no default bucket is configured.
    NoBucket,
    /// The event named an empty key, or a bucket that is not a valid name or not allowed.
    Refused,
    /// No usable credentials.
    NoCredentials,
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use aws_credential_types::Credentials;
    use clap::Parser;

    use super::*;

    /// Virtual-host links to an AWS-like endpoint with default bucket `videos`, whatever the environment says.
    async fn presigner(allowed: Option<&str>) -> Presigner {
        let config = Config {
            s3_endpoint: Some("https://s3.example.net".into()),
            s3_bucket: Some("videos".into()),
            s3_allowed_buckets: allowed.map(String::from),
            s3_force_path_style: false,
            s3_disabled: false,
            ..Config::parse_from(["query-api"])
        };
        let mut presigner = Presigner::from_config(&config).await.expect("links on");
        let credentials = Credentials::new("AKIDEXAMPLE", "secret", Some("token".into()), None, "test");
        let provider = aws_credential_types::provider::SharedCredentialsProvider::new(credentials);
        presigner.credentials = CredentialCache::new(provider, "us-east-1", FETCH_TIMEOUT);
        presigner
    }

    fn video(bucket: Option<&str>, key: &str) -> VideoObject {
        VideoObject { bucket: bucket.map(String::from), key: key.into() }
    }

    #[tokio::test]
    async fn a_bucket_that_is_not_a_bucket_name_gets_no_link_and_sends_no_credential_anywhere() {
        let presigner = presigner(None).await;
        for bucket in ["attacker.example/", "evil.com:443#", "a/b", "Videos"] {
            assert_eq!(presigner.url(&video(Some(bucket), "x")).await, Err(NoLink::Refused), "{bucket}");
        }
        let link = presigner.url(&video(Some("archive"), "a/b.mp4")).await.expect("a valid bucket is signed");
        assert!(link.starts_with("https://archive.s3.example.net/a/b.mp4?"), "{link}");
    }

    #[tokio::test]
    async fn an_empty_bucket_is_the_default_one_and_an_empty_key_gets_no_link() {
        let presigner = presigner(None).await;
        let link = presigner.url(&video(Some(""), "k.mp4")).await.expect("the default bucket");
        assert!(link.starts_with("https://videos.s3.example.net/k.mp4?"), "{link}");
        assert_eq!(presigner.url(&video(None, "")).await, Err(NoLink::Refused));
        assert_eq!(presigner.url(&video(Some("videos"), "")).await, Err(NoLink::Refused));
    }

    #[tokio::test]
    async fn with_a_list_only_its_buckets_get_links() {
        let presigner = presigner(Some("videos,archive")).await;
        assert!(presigner.url(&video(Some("archive"), "k")).await.is_ok());
        assert!(presigner.url(&video(None, "k")).await.is_ok());
        assert_eq!(presigner.url(&video(Some("other"), "k")).await, Err(NoLink::Refused));
    }

    #[test]
    fn a_link_never_outlives_its_credentials() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(lifetime(None, now), Some(900));
        assert_eq!(lifetime(Some(now + Duration::from_secs(3600)), now), Some(900));
        assert_eq!(lifetime(Some(now + Duration::from_secs(300)), now), Some(300));
        assert_eq!(lifetime(Some(now), now), None);
        assert_eq!(lifetime(Some(now - Duration::from_secs(1)), now), None);
    }
}
