//! The operational routes: `/livez`, `/readyz` (public, and with its detail on the admin listener), and the
//! answers to a path or method the API does not serve. None of them sends a command to Redis.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

/// The process is up.
pub async fn livez() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

/// Ready once an active generation has been read: from then on the instance answers every request itself,
/// with data or with its own 503 and `Retry-After` while Redis is away or the read model is not servable,
/// so a Redis blip does not take every instance out of the load balancer. Answered from the state the
/// background refresh last read: a probe, or anyone calling it, causes no Redis command.
pub async fn readyz(State(state): State<AppState>) -> Response {
    if state.generation.known() {
        Json(json!({ "status": "ready" })).into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "not ready" }))).into_response()
    }
}

/// The admin listener's detail: which generation is served, as last refreshed, or why none is.
pub async fn readyz_detail(State(state): State<AppState>) -> Response {
    match state.generation.serving() {
        Ok(generation) => {
            let freshness = state.freshness.get();
            let body = json!({
                "status": "ready",
                "generation": generation,
                "latestEvent": freshness.as_of,
                "caughtUp": freshness.caught_up,
                "forwardedByUntrustedPeers": state.auth.untrusted_forwards(),
            });
            Json(body).into_response()
        }
        Err(reason) => {
            let untrusted = state.auth.untrusted_forwards();
            let body = json!({ "status": "not ready", "reason": reason.why(), "forwardedByUntrustedPeers": untrusted });
            (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
        }
    }
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound("resource")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
