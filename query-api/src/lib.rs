//! The query API: a stateless, read-only HTTP server over the Redis read model (api.md).

pub mod auth;
mod body;
mod bucket;
pub mod config;
mod credentials;
mod docs;
pub mod error;
pub mod freshness;
pub mod key_cache;
mod limits;
pub mod metrics;
pub mod models;
pub mod openapi;
pub mod pagination;
pub mod presign;
mod rate_limit;
pub mod read_cache;
pub mod read_model;
mod reads;
pub mod routes;
mod serve;
pub mod sigv4;
pub mod state;

use std::future::{Future, IntoFuture};
use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, Request};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::compression::CompressionLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

pub use config::Config;
use error::ApiError;
use state::AppState;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Serves on `listener` until `shutdown` completes, then finishes the requests in flight.
pub async fn run(
    listener: TcpListener,
    admin: Option<TcpListener>,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.validate().map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let presigner = presign::Presigner::from_config(&config).await;
    let state = AppState::new(&config, presigner)?;
    let follower = tokio::spawn(state.clone().follow_generation(Duration::from_millis(config.generation_refresh_ms)));
    tracing::info!(addr = %listener.local_addr()?, prefix = %config.key_prefix, "query API listening");
    let admin = match admin {
        Some(admin) => {
            tracing::info!(addr = %admin.local_addr()?, "admin listener: /metrics, /readyz, /livez");
            Some(tokio::spawn(axum::serve(admin, admin_app(state.clone())).into_future()))
        }
        None => None,
    };
    serve::serve(listener, app(state, &config), config.header_read_timeout(), shutdown).await;
    follower.abort();
    if let Some(admin) = admin {
        admin.abort();
    }
    Ok(())
}

/// The router with every route and the HTTP layers.
pub fn app(state: AppState, config: &Config) -> Router {
    let metrics = state.metrics().clone();
    let v1 = Router::new()
        .route("/studies", get(routes::list_studies))
        .route("/studies/{id}", get(routes::get_study))
        .route("/studies/{id}/interviews", get(routes::list_interviews))
        .route("/interviews/{id}", get(routes::get_interview))
        .route("/openapi.json", get(openapi_json))
        .route("/docs", get(docs::page))
        .route("/docs/redoc.standalone.js", get(docs::renderer))
        .layer(axum::middleware::from_fn_with_state(state.clone(), freshness::headers));
    let router = Router::new()
        .nest("/v1", v1)
        .route("/livez", get(routes::livez))
        .route("/readyz", get(routes::readyz))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::method_not_allowed)
        .route_layer(axum::middleware::from_fn_with_state(metrics, metrics::track))
        .with_state(state);
    limits::apply(router, config.max_concurrent_requests as usize, config.request_timeout())
        .layer(CompressionLayer::new())
        .layer(SetResponseHeaderLayer::overriding(header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(CatchPanicLayer::custom(|_| {
            axum::response::IntoResponse::into_response(ApiError::Internal("handler panicked".into()))
        }))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(TraceLayer::new_for_http().make_span_with(|request: &Request<_>| {
            // The path only: headers carry the API key, and a query string is no place for secrets to be logged.
            let id = request.extensions().get::<RequestId>().and_then(|id| id.header_value().to_str().ok());
            tracing::info_span!("request", id = id.unwrap_or("-"), method = %request.method(), path = %request.uri().path())
        }))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
}

/// The admin listener's router: metrics and the detail of readiness, for operators, never the public.
pub fn admin_app(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(metrics::render).with_state(state.metrics().clone()))
        .route("/readyz", get(routes::readyz_detail))
        .route("/livez", get(routes::livez))
        .with_state(state)
        .layer(SetResponseHeaderLayer::overriding(header::CACHE_CONTROL, HeaderValue::from_static("no-store")))
}

async fn openapi_json() -> impl axum::response::IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], openapi::document())
}
