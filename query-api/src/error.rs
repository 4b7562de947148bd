//! The one error type of the HTTP layer, mapped to the spec's status codes and body shapes (section 7):
//! 400 is a JSON string, 401 and 404 an object with `error`. Internal failures are logged here and
//! answered with a fixed message, so nothing internal reaches a client.

use shared::log_every::LogEvery;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::auth::AuthError;
use crate::read::generation::NotServed;
use crate::read::ReadError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Invalid pagination parameters.
    #[error("{0}")]
    BadRequest(String),
    #[error("missing or invalid API key")]
    Unauthorized,
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The key's rate limit is spent; a token comes back after this long.
    #[error("rate limit exceeded")]
    TooManyRequests(Duration),
    /// An invalid API key from a client whose throttle of unknown keys is closed for this long: 401, the
    /// throttle told by `RateLimit: "unknown-keys";r=0;t=<seconds>`.
    #[error("missing or invalid API key")]
    InvalidWhileThrottled(Duration),
    /// The client sent too many unknown API keys lately: 429 with `Retry-After`.
    #[error("too many unknown API keys from this client lately")]
    Throttled(Duration),
    /// Redis unreachable, slow or failing: the client should retry with backoff.
    #[error("read model unavailable: {0}")]
    Unavailable(#[from] redis::RedisError),
    /// Shed or cut short to protect the server (too many requests in flight, or one took too long).
    #[error("overloaded: {0}")]
    Overloaded(&'static str),
    /// No read model to serve (not known yet, healing, lost...), or not the organization's part of it:
    /// retry with backoff.
    #[error("read model not ready: {}", .0.why())]
    NotReady(NotServed),
    #[error("internal error: {0}")]
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::BadRequest(message) => (StatusCode::BAD_REQUEST, Json(message)).into_response(),
            ApiError::Unauthorized => {
                let mut response = error(StatusCode::UNAUTHORIZED, "missing or invalid API key");
                response.headers_mut().insert("www-authenticate", "Bearer".parse().expect("valid header"));
                response
            }
            ApiError::InvalidWhileThrottled(wait) => {
                let mut response = ApiError::Unauthorized.into_response();
                let throttle = format!("\"unknown-keys\";r=0;t={}", retry_after(wait));
                response.headers_mut().insert("ratelimit", throttle.parse().expect("valid header"));
                response
            }
            ApiError::NotFound(what) => error(StatusCode::NOT_FOUND, &format!("{what} not found")),
            ApiError::MethodNotAllowed => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
            ApiError::TooManyRequests(wait) => {
                let mut response = error(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded for this API key");
                response.headers_mut().insert("retry-after", retry_after(wait).into());
                response
            }
            // A reply that does not read: a record of a later release (a dictionary or a layout this build
            // lacks) or a damaged one. Redis answers; what it holds cannot be served by this build.
            ApiError::Unavailable(e) if e.kind() == redis::ErrorKind::Parse => {
                if let Some(skipped) = UNREADABLE.allow() {
                    tracing::error!(error = %e, skipped, "a record of the read model does not read");
                }
                unavailable(Refused("unreadable"))
            }
            ApiError::Unavailable(e) => {
                if let Some(skipped) = UNAVAILABLE.allow() {
                    tracing::error!(error = %e, skipped, "read model unavailable");
                }
                unavailable(Refused("redis"))
            }
            ApiError::Overloaded(why) => {
                if let Some(skipped) = OVERLOADED.allow() {
                    tracing::warn!(why, skipped, "request refused to protect the server");
                }
                unavailable(Refused("overloaded"))
            }
            ApiError::Throttled(wait) => {
                if let Some(skipped) = THROTTLED.allow() {
                    tracing::warn!(
                        ?wait,
                        skipped,
                        "a client's API keys not kept in memory are not looked up for a while: it sent too many unknown ones"
                    );
                }
                let mut response = error(StatusCode::TOO_MANY_REQUESTS, crate::api::openapi::examples::UNKNOWN_KEYS);
                response.headers_mut().insert("retry-after", retry_after(wait).into());
                response
            }
            ApiError::NotReady(not_served) => {
                if let Some(skipped) = NOT_READY.allow() {
                    tracing::warn!(why = not_served.why(), skipped, "read model not ready");
                }
                unavailable(Refused(not_served.label()))
            }
            ApiError::Internal(e) => {
                tracing::error!(error = %e, "internal error");
                error(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
            }
        }
    }
}

/// Per-request refusals during an outage or an overload are logged once a second at most, each line with
/// how many were left out before it: every request still has its access log line.
static UNAVAILABLE: LogEvery = LogEvery::second();
static UNREADABLE: LogEvery = LogEvery::second();
static OVERLOADED: LogEvery = LogEvery::second();
static THROTTLED: LogEvery = LogEvery::second();
static NOT_READY: LogEvery = LogEvery::second();

/// Whole seconds, at least 1.
fn retry_after(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::Unauthorized => ApiError::Unauthorized,
            AuthError::InvalidWhileThrottled(wait) => ApiError::InvalidWhileThrottled(wait),
            AuthError::RateLimited(refused) => ApiError::TooManyRequests(refused.wait),
            AuthError::Throttled(wait) => ApiError::Throttled(wait),
            AuthError::IndexLost => ApiError::NotReady(NotServed::KeyIndexLost),
            AuthError::Redis(e) => ApiError::Unavailable(e),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Redis(e) => ApiError::Unavailable(e),
            ReadError::SlotLost => ApiError::NotReady(NotServed::OrganizationLost),
        }
    }
}

/// Why a 503 was answered, as the `cause` label of `api_refused_total`: carried from here to the metrics
/// layer (`crate::edge::metrics`) in the response's extensions, never sent to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused(pub &'static str);

/// 503 with `Retry-After: 1`, the same body whatever the cause.
fn unavailable(cause: Refused) -> Response {
    let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "service temporarily unavailable; retry later");
    response.headers_mut().insert("retry-after", "1".parse().expect("valid header"));
    response.extensions_mut().insert(cause);
    response
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(e: ApiError) -> (StatusCode, Option<Refused>) {
        let response = e.into_response();
        (response.status(), response.extensions().get::<Refused>().copied())
    }

    #[test]
    fn every_503_carries_its_cause_for_the_metrics_and_no_other_answer_does() {
        let healing = refused(ApiError::NotReady(NotServed::OrganizationHealing));
        assert_eq!(healing, (StatusCode::SERVICE_UNAVAILABLE, Some(Refused("healing"))));
        assert_eq!(refused(ApiError::NotReady(NotServed::Unsure)).1, Some(Refused("unsure")));
        assert_eq!(refused(ApiError::Overloaded("too many requests in flight")).1, Some(Refused("overloaded")));
        let redis = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(refused(ApiError::Unavailable(redis)).1, Some(Refused("redis")));
        let parse = redis::RedisError::from((redis::ErrorKind::Parse, "a stored record does not read"));
        assert_eq!(refused(ApiError::Unavailable(parse)).1, Some(Refused("unreadable")));
        assert_eq!(refused(ApiError::Unauthorized), (StatusCode::UNAUTHORIZED, None));
    }
}
