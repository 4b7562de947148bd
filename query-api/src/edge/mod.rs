//! The HTTP edge: the accept loop ([`accept`]), the middleware every request goes through, in the order it
//! goes through them ([`app`]), and the background tasks the server owns ([`tasks`]).

pub mod accept;
pub mod conditional;
pub mod connections;
mod deadlines;
pub mod freshness;
pub mod limits;
pub mod metrics;
pub mod panic;
pub mod rate_limit;
pub mod tasks;
pub mod trace;

use axum::error_handling::HandleErrorLayer;
use axum::http::{header, HeaderName, HeaderValue};
use axum::routing::get;
use axum::Router;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};

use crate::api;
use crate::config::Config;
use crate::state::AppState;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The public router: every route, behind the middleware, listed in the order a request meets them.
/// `/livez` is outside the limits: an overloaded instance is alive, and a liveness probe that met the
/// load shedding or the concurrency cap would have it restarted, which moves its load onto the others.
/// Every answer is counted, the limits' refusals and a panic's 500 included.
pub fn app(state: AppState, config: &Config) -> Router {
    let ceiling = api::ceiling::Ceiling::of(config.bench_ceiling_bytes as usize);
    let v1 = api::v1_router(ceiling, |data| {
        data.layer(axum::middleware::from_fn_with_state(state.clone(), freshness::headers))
    })
    .layer(axum::middleware::from_fn_with_state(state.clone(), rate_limit::headers));
    let limits = ServiceBuilder::new()
        // The limits: their refusals become responses, overload is shed, then the cap and the timeout.
        .layer(HandleErrorLayer::new(limits::refuse))
        .load_shed()
        // Global: the router applies a layer to each route, and the cap is one for the whole server.
        .layer(GlobalConcurrencyLimitLayer::new(config.max_concurrent_requests as usize))
        .timeout(config.request_timeout());
    let limited = Router::new()
        .nest("/v1", v1)
        .route("/readyz", get(api::health::readyz))
        .fallback(api::health::not_found)
        .method_not_allowed_fallback(api::health::method_not_allowed)
        .with_state(state.clone())
        .layer(limits);
    let edge = ServiceBuilder::new()
        // The caller's x-request-id, or a new UUID, on the request and then on its response.
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .layer(
            // A failed answer is in the access log with its status; the layer's own line is for debugging.
            TraceLayer::new_for_http()
                .make_span_with(trace::span)
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        // Outside the panic handler and the limits: their answers are counted too.
        .layer(axum::middleware::from_fn_with_state(state.metrics.clone(), metrics::track))
        .layer(CatchPanicLayer::custom(panic::answer))
        .layer(SetResponseHeaderLayer::overriding(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")))
        .layer(SetResponseHeaderLayer::overriding(header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
        // Outside compression: a compressed body's tag names its coding before If-None-Match is compared.
        .layer(axum::middleware::from_fn(conditional::not_modified))
        .layer(CompressionLayer::new());
    Router::new().route("/livez", get(api::health::livez)).merge(limited).layer(edge)
}

/// The admin listener's router: metrics and the detail of readiness, for operators, never the public.
pub fn admin_app(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics::render).with_state(state.metrics.clone()))
        .route("/readyz", get(api::health::readyz_detail))
        .route("/livez", get(api::health::livez))
        .with_state(state)
        .layer(SetResponseHeaderLayer::overriding(header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
}
