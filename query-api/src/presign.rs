//! Presigned video links: a SigV4 query-signed GET for the stored object, made on every request (no
//! network call: signing is local), valid 15 minutes. Any failure gives no link, never a failed request.

use std::time::Duration;

use aws_sdk_s3::presigning::PresigningConfig;
use shared::VideoObject;

use crate::config::Config;

/// Lifetime of a video link (api.md section 8).
pub const LINK_LIFETIME: Duration = Duration::from_secs(900);

#[derive(Clone)]
pub struct Presigner {
    client: aws_sdk_s3::Client,
    default_bucket: Option<String>,
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
        let mut s3 = aws_sdk_s3::config::Builder::from(&shared).force_path_style(config.s3_force_path_style);
        if let Some(endpoint) = &config.s3_endpoint {
            s3 = s3.endpoint_url(endpoint);
        }
        Some(Self { client: aws_sdk_s3::Client::from_conf(s3.build()), default_bucket: config.s3_bucket.clone() })
    }

    /// A fresh link to the object, or `None` when there is no bucket for it or signing fails.
    pub async fn url(&self, video: &VideoObject) -> Option<String> {
        let bucket = video.bucket.as_ref().or(self.default_bucket.as_ref())?;
        let presigning = PresigningConfig::expires_in(LINK_LIFETIME).ok()?;
        match self.client.get_object().bucket(bucket).key(&video.key).presigned(presigning).await {
            Ok(request) => Some(request.uri().to_string()),
            Err(e) => {
                tracing::warn!(error = %e, "could not presign a video link");
                None
            }
        }
    }
}
