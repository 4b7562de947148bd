//! The API's response bodies (api.md section 2), with their OpenAPI schemas.

use serde::Serialize;
use utoipa::{IntoParams, ToSchema};

/// A completed study as listed by `GET /studies`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StudyListItem {
    /// Identifier of the study.
    pub id: String,
    /// Internal title of the study.
    pub internal_title: String,
    /// Completion date (UTC), `YYYY-MM-DD`; the list is ordered by it.
    #[schema(format = Date, example = "2026-11-02")]
    pub completed_on: String,
    /// Creation timestamp, ISO 8601 UTC.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// Last-update timestamp, ISO 8601 UTC.
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// One completed study, from `GET /studies/{id}`: no `completedOn`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Study {
    pub id: String,
    pub internal_title: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

/// A completed, visible interview.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Interview {
    /// Identifier of the interview.
    pub id: String,
    /// Participant identity when available; null otherwise. Always present.
    #[schema(required = true)]
    pub participant: Option<Participant>,
    /// Facets associated with the interview.
    pub facets: Vec<Facet>,
    /// Temporary link to download the stored video, valid 15 minutes from this response; null when there is
    /// no downloadable stored video, its storage details are unavailable, or the link could not be made.
    /// Always present. Request the interview again for a fresh link.
    #[serde(rename = "videoDownloadURL")]
    #[schema(format = "uri", required = true)]
    pub video_download_url: Option<String>,
    /// The participant's messages as a WebVTT document; null when there are none. Always present.
    #[serde(rename = "transcriptAsWebVTT")]
    #[schema(required = true)]
    pub transcript_as_web_vtt: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Participant {
    /// Identifier of the participant.
    pub id: String,
    /// First name and the initial of the last name; null when unavailable. Always present.
    #[schema(required = true)]
    pub name: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Facet {
    /// Name of the facet.
    pub label: String,
    /// Values of the facet.
    pub values: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PageInfo {
    /// Total number of items.
    pub total: u64,
    /// Current page number.
    pub page: u64,
    /// Number of items per page.
    pub page_size: u64,
}

/// A page of studies.
#[derive(Debug, Serialize, ToSchema)]
pub struct StudyPage {
    pub items: Vec<StudyListItem>,
    pub pagination: PageInfo,
}

/// A page of interviews.
#[derive(Debug, Serialize, ToSchema)]
pub struct InterviewPage {
    pub items: Vec<Interview>,
    pub pagination: PageInfo,
}

/// The body of 401 and 404 responses (and of 5xx ones).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// Pagination parameters of the list endpoints.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct PageQuery {
    /// Page number, from 1. A page past the last one answers an empty `items` list.
    #[param(minimum = 1, default = 1)]
    page: Option<u64>,
    /// Items per page, from 1 to 100.
    #[param(rename = "pageSize", minimum = 1, maximum = 100, default = 20)]
    page_size: Option<u64>,
}

/// The conditional request header of the study routes (`super::etag`).
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)]
pub struct IfNoneMatch {
    /// Entity tags of representations the client holds, or `*`: if one is current, the answer is 304.
    #[param(rename = "If-None-Match", nullable = false)]
    if_none_match: Option<String>,
}

impl From<shared::Participant> for Participant {
    fn from(p: shared::Participant) -> Self {
        Self { id: p.id, name: p.name }
    }
}

impl From<shared::Facet> for Facet {
    fn from(f: shared::Facet) -> Self {
        Self { label: f.label, values: f.values }
    }
}
