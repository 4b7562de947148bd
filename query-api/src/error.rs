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
    /// The client sent too many unknown API keys lately: 429 with `Retry-After`.
    #[error("too many unknown API keys from this client lately")]
    Throttled(Duration),
    /// Redis unreachable, slow or failing: the client should retry with backoff.
    #[error("read model unavailable: {0}")]
    Unavailable(#[from] redis::RedisError),
    /// Shed or cut short to protect the server (too many requests in flight, or one took too long).
    #[error("overloaded: {0}")]
    Overloaded(&'static str),
    /// No read model to serve yet (its active generation is unknown): retry with backoff.
    #[error("read model not ready: {0}")]
    NotReady(&'static str),
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
            ApiError::NotFound(what) => error(StatusCode::NOT_FOUND, &format!("{what} not found")),
            ApiError::MethodNotAllowed => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
            ApiError::TooManyRequests(wait) => {
                let mut response = error(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded for this API key");
                response.headers_mut().insert("retry-after", retry_after(wait).into());
                response
            }
            ApiError::Unavailable(e) => {
                if let Some(skipped) = UNAVAILABLE.allow() {
                    tracing::error!(error = %e, skipped, "read model unavailable");
                }
                unavailable()
            }
            ApiError::Overloaded(why) => {
                if let Some(skipped) = OVERLOADED.allow() {
                    tracing::warn!(why, skipped, "request refused to protect the server");
                }
                unavailable()
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
            ApiError::NotReady(why) => {
                if let Some(skipped) = NOT_READY.allow() {
                    tracing::warn!(why, skipped, "read model not ready");
                }
                unavailable()
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
            AuthError::RateLimited(refused) => ApiError::TooManyRequests(refused.wait),
            AuthError::Throttled(wait) => ApiError::Throttled(wait),
            AuthError::IndexLost => ApiError::NotReady("the key index was lost and is not projected again yet"),
            AuthError::Redis(e) => ApiError::Unavailable(e),
        }
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Redis(e) => ApiError::Unavailable(e),
            ReadError::SlotLost => ApiError::NotReady("an organization's data was lost and is not projected again yet"),
        }
    }
}

/// 503 with `Retry-After: 1`.
fn unavailable() -> Response {
    let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "service temporarily unavailable; retry later");
    response.headers_mut().insert("retry-after", "1".parse().expect("valid header"));
    response
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}
