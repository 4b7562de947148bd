//! The four endpoints of api.md section 4. One request's life: authentication first (the [`Organization`]
//! extractor: api.md section 5), then pagination (section 4.5), then one read (`crate::read::Reads`), then
//! the body written from the stored bytes (`super::json`) with fresh video links (`crate::links`).

use axum::extract::rejection::PathRejection;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, FromRequestParts, OriginalUri, Path, RawQuery, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Uri};
use axum::response::{IntoResponse, Response};
use shared::StudyDocument;

use super::etag;
use super::json::JsonBody;
use super::models::{ErrorBody, IfNoneMatch, Interview, InterviewPage, PageInfo, PageQuery, Study, StudyPage};
use super::pagination::Pagination;
use crate::auth::credential::credential;
use crate::auth::rate_limit::Report;
use crate::auth::{AuthError, Organization};
use crate::error::ApiError;
use crate::links::{Links, NoLink, Presigner};
use crate::read::freshness;
use crate::read::model::InterviewRead;
use crate::state::AppState;

impl FromRequestParts<AppState> for Organization {
    type Rejection = ApiError;

    /// A request without a credential is refused before anything is read; else the key is looked up in the
    /// generation being served. Where the key's rate limit stands is reported for the response's headers.
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let key = credential(&parts.headers).ok_or(ApiError::Unauthorized)?;
        let keys = state.keyspace().await?;
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|info| info.0);
        let client = state.auth.client(peer, &parts.headers);
        let found = state.auth.organization(key, client, keys).await;
        let standing = match &found {
            Ok(org) => org.standing,
            Err(AuthError::RateLimited(refused)) => Some(refused.standing),
            Err(_) => None,
        };
        if let (Some(report), Some(standing)) = (parts.extensions.get::<Report>(), standing) {
            report.set(standing);
        }
        let org = found?;
        // For the access log: whose request it was, never with which key.
        tracing::Span::current().record("organization", org.id.as_str());
        state.serves_organization(&org)?;
        Ok(org)
    }
}

/// Completed studies of the key's organization, by completion date, newest first.
#[utoipa::path(
    get,
    path = "/studies",
    tag = "studies",
    operation_id = "listStudies",
    params(PageQuery, IfNoneMatch),
    responses(
        (status = 200, description = "A page of completed studies", body = StudyPage, headers(
            ("ETag" = String, description = "Strong entity tag of this representation"),
            ("Link" = String, description = "RFC 8288 links to the first, previous, next and last pages")
        )),
        (status = 304, description = "Not modified: the representation If-None-Match names is current", headers(
            ("ETag" = String, description = "Strong entity tag of this representation")
        )),
        (status = 400, description = "Invalid pagination parameters", body = String, content_type = "application/json"),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 503, description = "Temporarily unavailable; retry with backoff", body = ErrorBody),
    )
)]
pub async fn list_studies(
    org: Organization,
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let page = Pagination::parse(query.as_deref())?;
    let found = state.reads.studies(&org.keys, &org.id, page.span()).await?;
    let mut body = JsonBody::with_capacity(64 + found.items.iter().map(|doc| doc.len() + 1).sum::<usize>());
    body.open_page();
    for (i, doc) in found.items.iter().enumerate() {
        body.item(i);
        body.stored(doc);
    }
    body.close_page(&PageInfo { total: found.total, page: page.page, page_size: page.page_size });
    // A page of studies is all in memory: it has no transcript.
    let (page_number, page_size) = (page.page.to_string(), page.page_size.to_string());
    let version = etag::Version {
        generation: org.keys.generation(),
        org: &org.id,
        epoch: found.epoch.as_deref(),
        asked: &["studies", &page_number, &page_size],
    };
    let mut response = etag::tagged(body.into_bytes(), &version);
    linked(&mut response, &page, &uri, found.total);
    freshness::as_of(&mut response, found.epoch.as_deref());
    Ok(response)
}

/// One completed study of the key's organization.
#[utoipa::path(
    get,
    path = "/studies/{id}",
    tag = "studies",
    operation_id = "getStudy",
    params(("id" = String, Path, description = "The study identifier"), IfNoneMatch),
    responses(
        (status = 200, description = "The study", body = Study, headers(
            ("ETag" = String, description = "Strong entity tag of this representation")
        )),
        (status = 304, description = "Not modified: the representation If-None-Match names is current", headers(
            ("ETag" = String, description = "Strong entity tag of this representation")
        )),
        (status = 401, description = "Missing or invalid API key", body = ErrorBody),
        (status = 404, description = "No completed study with this id in the organization", body = ErrorBody),
        (status = 503, description = "Temporarily unavailable; retry with backoff", body = ErrorBody),
    )
)]
pub async fn get_study(
    org: Organization,
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let Ok(Path(id)) = id else { return Err(ApiError::NotFound("study")) };
    let stored = state.reads.study(&org.keys, &org.id, &id).await?;
    let doc = stored.found.as_deref().ok_or(ApiError::NotFound("study"))?;
    let doc: StudyDocument = serde_json::from_str(doc).map_err(internal)?;
    let study = Study {
        id: doc.id,
        internal_title: doc.internal_title,
        created_at: doc.created_at,
        updated_at: doc.updated_at,
    };
    let version = etag::Version {
        generation: org.keys.generation(),
        org: &org.id,
        epoch: stored.epoch.as_deref(),
        asked: &["study", &id],
    };
    let mut response = etag::tagged(serde_json::to_vec(&study).map_err(internal)?, &version);
    freshness::as_of(&mut response, stored.epoch.as_deref());
    Ok(response)
}

/// Completed, visible interviews of a completed study, by creation time, newest first.
#[utoipa::path(
    get,
    path = "/studies/{studyId}/interviews",
    tag = "interviews",
    operation_id = "listStudyInterviews",
    params(("studyId" = String, Path, description = "The study identifier"), PageQuery),
    responses(
        (status = 200, description = "A page of interviews", body = InterviewPage, headers(
            ("Link" = String, description = "RFC 8288 links to the first, previous, next and last pages")
        )),
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
    OriginalUri(uri): OriginalUri,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let Ok(Path(study_id)) = study_id else { return Err(ApiError::NotFound("study")) };
    let page = Pagination::parse(query.as_deref())?;
    let read = state.reads.interviews(&org.keys, &org.id, &study_id, page.span()).await?;
    let found = read.found.as_ref().as_ref().ok_or(ApiError::NotFound("study"))?;
    let mut body = JsonBody::with_capacity(64 + found.items.iter().map(served_size).sum::<usize>());
    let mut links = state.links.as_deref().map(Presigner::links);
    body.open_page();
    for (i, stored) in found.items.iter().enumerate() {
        body.item(i);
        interview(&state, &mut body, stored, &mut links).await?;
    }
    body.close_page(&PageInfo { total: found.total, page: page.page, page_size: page.page_size });
    let mut response = json(&state, body);
    linked(&mut response, &page, &uri, found.total);
    freshness::as_of(&mut response, read.epoch.as_deref());
    Ok(response)
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
) -> Result<Response, ApiError> {
    let Ok(Path(id)) = id else { return Err(ApiError::NotFound("interview")) };
    let read = state.reads.interview(&org.keys, &org.id, &id).await?;
    let stored = read.found.as_ref().as_ref().ok_or(ApiError::NotFound("interview"))?;
    let mut body = JsonBody::with_capacity(served_size(stored));
    let mut links = state.links.as_deref().map(Presigner::links);
    interview(&state, &mut body, stored, &mut links).await?;
    let mut response = json(&state, body);
    freshness::as_of(&mut response, read.epoch.as_deref());
    Ok(response)
}

/// Writes one served interview: the stored document, its transcript, and a fresh video link signed by
/// the request's `links` (none when links are off).
async fn interview(
    state: &AppState,
    body: &mut JsonBody,
    (doc, transcript): &InterviewRead,
    links: &mut Option<Links<'_>>,
) -> Result<(), ApiError> {
    let doc = doc.fields().map_err(internal)?;
    let link = match (links, doc.video) {
        (Some(links), Some(video)) => match links.url(video.bucket.as_deref(), &video.key).await {
            Ok(url) => Some(url),
            Err(NoLink::Refused) => {
                state.metrics.video_links_refused.inc();
                None
            }
            Err(NoLink::NoBucket | NoLink::NoCredentials) => {
                state.metrics.presign_failures.inc();
                None
            }
        },
        _ => None,
    };
    body.interview(&doc, link.as_deref(), transcript);
    Ok(())
}

/// About how many bytes an interview takes written in memory: its document, its transcript (escaped)
/// unless it is a long one, and a link.
fn served_size((doc, transcript): &InterviewRead) -> usize {
    doc.len() + transcript.inline_bytes() + 640
}

/// A JSON response of a body written, its long transcripts read from the read model as it is sent.
fn json(state: &AppState, body: JsonBody) -> Response {
    let body = body.into_body(state.reads.model(), state.reads.pages());
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

/// Adds the `Link` header of a page of `total` items to its response.
fn linked(response: &mut Response, page: &Pagination, uri: &Uri, total: u64) {
    let links = page.links(uri.path(), uri.query(), total);
    if let Ok(links) = HeaderValue::try_from(links) {
        response.headers_mut().insert(header::LINK, links);
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(e.to_string())
}
