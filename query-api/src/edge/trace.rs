//! The span of each request in the logs: its id, method and path.

use axum::http::Request;
use tower_http::request_id::RequestId;
use tracing::Span;

/// The path only: headers carry the API key, and a query string is no place for secrets to be logged.
pub fn span<B>(request: &Request<B>) -> Span {
    let id = request.extensions().get::<RequestId>().and_then(|id| id.header_value().to_str().ok());
    tracing::info_span!("request", id = id.unwrap_or("-"), method = %request.method(), path = %request.uri().path())
}
