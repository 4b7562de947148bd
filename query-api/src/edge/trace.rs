//! The span of each request in the logs: its id, method and path, and the organization of its key once
//! known (never the key). In traces, a request that carries a
//! W3C `traceparent` (and `tracestate`) continues the caller's trace: its span is a child of the caller's.

use axum::http::{HeaderMap, Request};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tower_http::request_id::RequestId;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The path only: headers carry the API key, and a query string is no place for secrets to be logged.
pub fn span<B>(request: &Request<B>) -> Span {
    let id = request.extensions().get::<RequestId>().and_then(|id| id.header_value().to_str().ok());
    let span = tracing::info_span!(
        "request",
        id = id.unwrap_or("-"),
        method = %request.method(),
        path = %request.uri().path(),
        organization = tracing::field::Empty,
    );
    if request.headers().contains_key("traceparent") {
        let caller = TraceContextPropagator::new().extract(&Headers(request.headers()));
        // Fails only when traces are off (no layer to take it) or the span is filtered out.
        let _ = span.set_parent(caller);
    }
    span
}

/// The request's headers as the propagator reads them.
struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key)?.to_str().ok()
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|name| name.as_str()).collect()
    }
}
