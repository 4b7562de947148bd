//! The four endpoints of api.md section 4, and the operational ones.
//!
//! Authentication runs first (it is an extractor), then pagination, then one read of the read model.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, value::RawValue};
use shared::{InterviewDocument, StudyDocument};

use crate::auth::Organization;
use crate::error::ApiError;
use crate::models::{ErrorBody, Interview, InterviewPage, PageInfo, PageQuery, RawPage, Study, StudyPage};
use crate::pagination::Pagination;
use crate::presign::{Links, NoLink, Presigner};
use crate::read_model::StoredInterview;
use crate::state::AppState;

/// Completed studies of the key's organization, by completion date, newest first.
#[utoipa::path(
    get,
    path = "/studies",
    tag = "studies",
    operation_id = "listStudies",
    params(PageQuery),
    responses(
        (status = 200, description = "A page of completed studies", body = StudyPage),
        (status = 400, description = "Invalid pagination parameters", body = String, content_type = "application/json"),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 503, description = "Temporarily unavailable; retry with backoff", body = ErrorBody),
    )
)]
pub async fn list_studies(
    org: Organization,
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let page = Pagination::parse(query.as_deref())?;
    let found = state.read_model().await?.studies(&org.keys, &org.id, page).await?;
    let items = found.items.into_iter().map(RawValue::from_string).collect::<Result<_, _>>().map_err(internal)?;
    let pagination = PageInfo { total: found.total, page: page.page, page_size: page.page_size };
    Ok(Json(RawPage { items, pagination }).into_response())
}

/// One completed study of the key's organization.
#[utoipa::path(
    get,
    path = "/studies/{id}",
    tag = "studies",
    operation_id = "getStudy",
    params(("id" = String, Path, description = "The study identifier")),
    responses(
        (status = 200, description = "The study", body = Study),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No completed study with this id in the organization", body = ErrorBody),
        (status = 503, description = "Temporarily unavailable; retry with backoff", body = ErrorBody),
    )
)]
pub async fn get_study(
    org: Organization,
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Study>, ApiError> {
    let Ok(Path(id)) = id else { return Err(ApiError::NotFound("study")) };
    let doc = state.read_model().await?.study(&org.keys, &org.id, &id).await?.ok_or(ApiError::NotFound("study"))?;
    let doc: StudyDocument = serde_json::from_str(&doc).map_err(internal)?;
    Ok(Json(Study {
        id: doc.id,
        internal_title: doc.internal_title,
        created_at: doc.created_at,
        updated_at: doc.updated_at,
    }))
}

/// Completed, visible interviews of a completed study, by creation time, newest first.
#[utoipa::path(
    get,
    path = "/studies/{studyId}/interviews",
    tag = "interviews",
    operation_id = "listStudyInterviews",
    params(("studyId" = String, Path, description = "The study identifier"), PageQuery),
    responses(
        (status = 200, description = "A page of interviews", body = InterviewPage),
        (status = 400, description = "Invalid pagination parameters", body = String, content_type = "application/json"),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No completed study with this id in the organization", body = ErrorBody),
        (status = 503, description = "Temporarily unavailable; retry with backoff", body = ErrorBody),
    )
)]
pub async fn list_interviews(
    org: Organization,
    State(state): State<AppState>,
    study_id: Result<Path<String>, PathRejection>,
    RawQuery(query): RawQuery,
) -> Result<Json<InterviewPage>, ApiError> {
    let Ok(Path(study_id)) = study_id else { return Err(ApiError::NotFound("study")) };
    let page = Pagination::parse(query.as_deref())?;
    let read_model = state.read_model().await?;
    let found = read_model.interviews(&org.keys, &org.id, &study_id, page).await?.ok_or(ApiError::NotFound("study"))?;
    let items = served_interviews(&state, found.items).await?;
    let pagination = PageInfo { total: found.total, page: page.page, page_size: page.page_size };
    Ok(Json(InterviewPage { items, pagination }))
}

/// One completed, visible interview of the organization, whatever the state of its study.
#[utoipa::path(
    get,
    path = "/interviews/{id}",
    tag = "interviews",
    operation_id = "getInterview",
    params(("id" = String, Path, description = "The interview identifier")),
    responses(
        (status = 200, description = "The interview", body = Interview),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No completed, visible interview with this id in the organization", body = ErrorBody),
        (status = 503, description = "Temporarily unavailable; retry with backoff", body = ErrorBody),
    )
)]
pub async fn get_interview(
    org: Organization,
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<Interview>, ApiError> {
    let Ok(Path(id)) = id else { return Err(ApiError::NotFound("interview")) };
    let read_model = state.read_model().await?;
    let stored = read_model.interview(&org.keys, &org.id, &id).await?.ok_or(ApiError::NotFound("interview"))?;
    let mut links = state.presigner().map(Presigner::links);
    Ok(Json(interview(&state, stored, &mut links).await?))
}

/// Builds the served interview: the stored document, its transcript, and a fresh video link signed by
/// the request's `links` (none when links are off).
async fn interview(
    state: &AppState,
    (doc, transcript): StoredInterview,
    links: &mut Option<Links<'_>>,
) -> Result<Interview, ApiError> {
    let doc: InterviewDocument = serde_json::from_str(&doc).map_err(internal)?;
    let video_download_url = match (links, &doc.video) {
        (Some(links), Some(video)) => match links.url(video).await {
            Ok(url) => Some(url),
            Err(NoLink::Refused) => {
                state.metrics().video_links_refused.inc();
                None
            }
            Err(NoLink::NoBucket | NoLink::NoCredentials) => {
                state.metrics().presign_failures.inc();
                None
            }
        },
        _ => None,
    };
    Ok(Interview {
        id: doc.id,
        participant: doc.participant.map(Into::into),
        facets: doc.facets.into_iter().map(Into::into).collect(),
        video_download_url,
        transcript_as_web_vtt: transcript,
        created_at: doc.created_at,
        updated_at: doc.updated_at,
    })
}

async fn served_interviews(state: &AppState, stored: Vec<StoredInterview>) -> Result<Vec<Interview>, ApiError> {
    let mut items = Vec::with_capacity(stored.len());
    let mut links = state.presigner().map(Presigner::links);
    for one in stored {
        items.push(interview(state, one, &mut links).await?);
    }
    Ok(items)
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}

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
            let freshness = state.freshness();
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
    let read_model = state.read_model().await.map_err(|_| "redis is unreachable")?;
    if read_model.active_generation(state.prefix()).await.is_err() {
        return Err("redis is unreachable");
    }
    state.refresh_generation().await;
    state.serving()
}

pub async fn not_found() -> ApiError {
    ApiError::NotFound("resource")
}

pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
