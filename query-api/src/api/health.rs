//! The operational routes: `/livez`, `/readyz` (public, and with its detail on the admin listener), and the
//! answers to a path or method the API does not serve.

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

/// Ready: Redis answers and a read model exists. The public answer says only that; the admin listener's
/// says which generation is served, or why not ready.
pub async fn readyz(State(state): State<AppState>) -> Response {
    match readiness(&state).await {
        Ok(_) => Json(json!({ "status": "ready" })).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "not ready" }))).into_response(),
    }
}

pub async fn readyz_detail(State(state): State<AppState>) -> Response {
    match readiness(&state).await {
        Ok(generation) => {
            let freshness = state.freshness.get();
            let body = json!({
                "status": "ready",
                "generation": generation,
                "latestEvent": freshness.as_of,
                "caughtUp": freshness.caught_up,
            });
            Json(body).into_response()
        }
        Err(reason) => {
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "not ready", "reason": reason }))).into_response()
        }
    }
}

/// The generation being served, or why there is none: read now, not as last followed.
async fn readiness(state: &AppState) -> Result<u64, &'static str> {
    if state.model.active_generation(state.generation.prefix()).await.is_err() {
        return Err("redis is unreachable");
    }
    state.refresh().await;
    state.generation.serving()
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound("resource")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
