//! The read-model documents: what the projector stores and the query API serves.
//!
//! A document is stored ready to serve except for what only the API can add: the presigned video link,
//! which must be fresh on every request, and the transcript, which lives under its own key so it is
//! appended to rather than rewritten.

use serde::{Deserialize, Serialize};

/// A completed study as `GET /studies` lists it. `GET /studies/{id}` serves the same fields but `completedOn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StudyDocument {
    pub id: String,
    pub internal_title: String,
    /// `YYYY-MM-DD`, the UTC date of `completedAt`.
    pub completed_on: String,
    pub created_at: String,
    pub updated_at: String,
}

/// A completed, visible interview, without its transcript and video link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InterviewDocument {
    pub id: String,
    pub study_id: Option<String>,
    pub participant: Option<Participant>,
    pub facets: Vec<Facet>,
    /// The stored video object, if any; the API presigns it on every request.
    pub video: Option<VideoObject>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Participant {
    pub id: String,
    /// First name and the initial of the last name, e.g. `Ada L.`.
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facet {
    pub label: String,
    pub values: Vec<String>,
}

/// Where an interview's video is stored. Without a bucket, the API's configured default bucket applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VideoObject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    pub key: String,
}
