//! The projector's own small HTTP server: Prometheus `/metrics`, `/livez` (also `/healthz`) and `/readyz`.
//!
//! Ready means making progress: a projector that is behind (lag above zero) and has applied nothing for
//! `PROJECTOR_STALL_AFTER_SECS` is `stuck` and not ready, so a stalled projection never looks healthy; nor
//! is one whose Redis refuses writes for lack of memory, nor one with a partition halted by the dead-letter
//! limit. A rebuild that is still catching up, and a projector projecting again after Redis lost data,
//! say so, and are ready. Live means the process answers and is not stuck past `restart_stuck_after`
//! (see [`super::stuck`]): then Kubernetes restarts it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;

use super::Metrics;

#[derive(Clone)]
pub struct Health {
    pub metrics: Arc<Metrics>,
    /// How long stuck before `/livez` fails (none: never).
    pub restart_stuck_after: Option<Duration>,
    /// Set while this process is a rebuild that has not caught up yet.
    pub rebuilding: Arc<AtomicBool>,
}

fn router(health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        // `/healthz` is its older name, kept for probes already configured with it.
        .route("/livez", get(livez))
        .route("/healthz", get(livez))
        .route("/readyz", get(readyz))
        .with_state(health)
}

async fn metrics(State(health): State<Health>) -> Response {
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], health.metrics.render()).into_response()
}

/// The process answers, and is not stuck past the bound (a rebuild is never restarted this way: it has
/// bounds of its own).
async fn livez(State(health): State<Health>) -> Response {
    let stuck = health.metrics.stuck().filter(|_| !health.rebuilding.load(Ordering::Relaxed));
    match (stuck, health.restart_stuck_after) {
        (Some(stuck), Some(after)) if stuck.seconds >= after.as_secs_f64() => {
            let body = json!({
                "status": "stuck",
                "reason": stuck.reason,
                "secondsSinceProgress": stuck.seconds,
                "restartAfterSecs": after.as_secs(),
            });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
        _ => Json(json!({ "status": "ok" })).into_response(),
    }
}

async fn readyz(State(health): State<Health>) -> Response {
    let lag = health.metrics.total_lag();
    if health.metrics.halts.halted.get() > 0 {
        let body = json!({
            "status": "halted by the dead-letter limit",
            "partitions": health.metrics.halts.detail(),
            "reason": "so much of these partitions' latest messages would be set aside as poison that they stopped \
                where they are, setting nothing aside (a broken release, a write script Redis refuses): fix it \
                and they go on; they are read again every DEAD_LETTER_LIMIT_RETRY_SECS",
            "lag": lag,
        });
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    if health.rebuilding.load(Ordering::Relaxed) {
        let remaining = health.metrics.rebuild_remaining.get();
        return Json(json!({ "status": "rebuilding", "remaining": remaining })).into_response();
    }
    let redis = &health.metrics.redis;
    if redis.out_of_memory.get() > 0 {
        let body = json!({ "status": "redis out of memory", "reason": "Redis refuses writes: raise maxmemory or free memory; writes are retried" });
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    if let Some(error) = health.metrics.kafka.recent_consumer_error() {
        let body = json!({ "status": "kafka consumer error", "reason": format!("a partition cannot be read and stays where it is: {error}"), "lag": lag });
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    if let Some(stuck) = health.metrics.stuck() {
        let body = json!({
            "status": "stuck",
            "reason": stuck.reason,
            "lag": lag,
            "secondsSinceProgress": stuck.seconds,
            "restartAfterSecs": health.restart_stuck_after.map(|after| after.as_secs()),
        });
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response();
    }
    if redis.healing.get() > 0 {
        let body =
            json!({ "status": "healing", "partitions": redis.healing.get(), "reason": redis.reason(), "lag": lag });
        return Json(body).into_response();
    }
    let metrics = &health.metrics;
    let body = json!({
        "status": "ready",
        "lag": lag,
        "generation": metrics.generation.get(),
        "latestEvent": shared::time::format_unix(metrics.latest_event.get()),
        "caughtUp": metrics.caught_up(),
    });
    Json(body).into_response()
}

/// Starts the server in the background when an address is configured; returns where it listens.
/// Projecting matters more than reporting: when the address cannot be bound, it goes on without the
/// server, loudly.
pub async fn start(addr: Option<SocketAddr>, health: Health) -> Option<SocketAddr> {
    let addr = addr?;
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!(%addr, error = %e, "could not start the metrics and health server");
            return None;
        }
    };
    let bound = listener.local_addr().ok()?;
    tracing::info!(addr = %bound, "metrics and health");
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(health)).await {
            tracing::error!(error = %e, "the projector's HTTP server stopped");
        }
    });
    Some(bound)
}
