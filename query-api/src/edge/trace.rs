//! The span of each request in the logs: its id, method and path, and the organization of its key once
//! known (never the key). In traces, a request that carries a
//! W3C `traceparent` (and `tracestate`) continues the caller's trace: its span is a child of the caller's.
//! The span carries OpenTelemetry's HTTP server conventions, which trace backends key their service graphs
//! and span metrics on: kind `server`, `http.request.method`, `url.path`, and once answered (recorded by
//! `super::metrics::track`) `http.route`, `http.response.status_code`, the name `{method} {route}`, and
//! the status `error` for a 5xx.

use axum::http::{HeaderMap, Request};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
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
        "otel.kind" = "server",
        "otel.status_code" = tracing::field::Empty,
        "http.request.method" = %request.method(),
        "url.path" = %request.uri().path(),
        "http.route" = tracing::field::Empty,
        "http.response.status_code" = tracing::field::Empty,
    );
    if request.headers().contains_key("traceparent") {
        let caller = TraceContextPropagator::new().extract(&Headers(request.headers()));
        // Fails only when traces are off (no layer to take it) or the span is filtered out.
        let _ = span.set_parent(caller);
    }
    span
}

/// Records on the request's span (the current one) what is known once it is answered: its route pattern
/// (`unmatched` for none), its status, the name `{method} {route}`, and an error status for a 5xx.
pub fn answered(method: &str, route: &str, status: u16) {
    let span = Span::current();
    span.record("http.route", route);
    span.record("http.response.status_code", status);
    // A span already started (a caller's trace continued) takes a new name only this way; without traces
    // there is no span to rename, and nothing is done.
    let context = span.context();
    let otel = context.span();
    if otel.span_context().is_valid() {
        otel.update_name(format!("{method} {route}"));
    }
    if status >= 500 {
        span.record("otel.status_code", "error");
    }
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
