//! Counts and times every request (`crate::metrics`), writes its access log line, and serves the metrics
//! on the admin listener.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::Refused;
use crate::metrics::{CauseLabels, Metrics, RequestLabels, RouteLabels};

/// Counts and times every request by its route pattern (never the raw path, which holds ids), and writes
/// one access log line for it at `info` (target `access`): method, route, status and latency, inside the
/// request's span, which holds its id and its key's organization.
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |p| p.as_str()).to_string();
    let method = method_label(request.method()).to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    metrics.latency.get_or_create(&RouteLabels { route: route.clone() }).observe(elapsed.as_secs_f64());
    let status = response.status().as_u16();
    let latency_ms = (elapsed.as_secs_f64() * 1000.0 * 100.0).round() / 100.0;
    tracing::info!(target: "access", method, route, status, latency_ms, "request");
    super::trace::answered(&method, &route, status);
    metrics.requests.get_or_create(&RequestLabels { route, method, status }).inc();
    if status == 401 {
        metrics.auth_failures.inc();
    } else if let Some(Refused(cause)) = (status == 503).then(|| response.extensions().get::<Refused>()).flatten() {
        metrics.refused.get_or_create(&CauseLabels { cause }).inc();
    }
    response
}

/// The `method` label: the API serves GET and HEAD; any other method token, which a client may make up at
/// will, is `other`, so that no request can add a label value.
fn method_label(method: &axum::http::Method) -> &'static str {
    match *method {
        axum::http::Method::GET => "GET",
        axum::http::Method::HEAD => "HEAD",
        _ => "other",
    }
}

pub async fn render(State(metrics): State<Arc<Metrics>>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], metrics.render()).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::Method;

    use super::method_label;

    #[test]
    fn only_get_and_head_are_labelled_by_name() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::HEAD), "HEAD");
        for method in [Method::POST, Method::DELETE, Method::from_bytes(&[b'X'; 2000]).unwrap()] {
            assert_eq!(method_label(&method), "other");
        }
    }
}
