//! Limits a public API needs, so that a flood or a slow dependency cannot pile requests up without bound:
//! at most `MAX_CONCURRENT_REQUESTS` requests in flight (one more is shed at once, not queued), and at most
//! `REQUEST_TIMEOUT_MS` for each. Both answer 503 with `Retry-After`, in the spec's error shape.

use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::response::{IntoResponse, Response};
use axum::{BoxError, Router};
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::ServiceBuilder;

use crate::error::ApiError;

/// `router` behind the limits: errors become responses, overload is shed, then the cap and the timeout.
pub fn apply(router: Router, max_concurrent: usize, timeout: Duration) -> Router {
    router.layer(
        ServiceBuilder::new()
            .layer(HandleErrorLayer::new(refuse))
            .load_shed()
            // Global: the router applies a layer to each route, and the cap is one for the whole server.
            .layer(GlobalConcurrencyLimitLayer::new(max_concurrent))
            .timeout(timeout),
    )
}

async fn refuse(error: BoxError) -> Response {
    let refusal = if error.is::<tower::load_shed::error::Overloaded>() {
        ApiError::Overloaded("too many requests in flight")
    } else if error.is::<tower::timeout::error::Elapsed>() {
        ApiError::Overloaded("the request took longer than its timeout")
    } else {
        ApiError::Internal(error.to_string())
    };
    refusal.into_response()
}
