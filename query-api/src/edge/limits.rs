//! Limits a public API needs, so that a flood or a slow dependency cannot pile requests up without bound:
//! at most `MAX_CONCURRENT_REQUESTS` requests in flight (one more is shed at once, not queued), and at most
//! `REQUEST_TIMEOUT_MS` for each (both layers are in [`super::app`]). Both refusals answer 503 with
//! `Retry-After`, in the spec's error shape.

use axum::response::{IntoResponse, Response};
use axum::BoxError;

use crate::error::ApiError;

/// The answer to a request the limits refused.
pub async fn refuse(error: BoxError) -> Response {
    let refusal = if error.is::<tower::load_shed::error::Overloaded>() {
        ApiError::Overloaded("too many requests in flight")
    } else if error.is::<tower::timeout::error::Elapsed>() {
        ApiError::Overloaded("the request took longer than its timeout")
    } else {
        ApiError::Internal(error.to_string())
    };
    refusal.into_response()
}
