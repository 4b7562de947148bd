//! The examples of the document: a study, a page of studies, an interview (a short transcript and a
//! presigned video link) and a page of interviews, and the error bodies.

use serde_json::{json, Value};

use crate::api::pagination::Pagination;

/// The body of a 401.
pub const UNAUTHORIZED: &str = "missing or invalid API key";
/// The body of a 429.
pub const TOO_MANY_REQUESTS: &str = "rate limit exceeded for this API key";
/// The body of a 429 for a client that sent too many unknown keys (the response's description says so).
pub const UNKNOWN_KEYS: &str = "too many unknown API keys from this client";
/// The body of a 500.
pub const INTERNAL: &str = "internal error";
/// The body of a 503.
pub const UNAVAILABLE: &str = "service temporarily unavailable; retry later";

/// A transcript of one participant message.
pub const TRANSCRIPT: &str = "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello.\n";

/// A presigned link, in the shape S3 signs (SigV4 in the query, valid 900 seconds).
pub const VIDEO_LINK: &str = "https://acme-interviews.s3.eu-west-1.amazonaws.com/videos/int_acme_01_01.mp4\
    ?X-Amz-Algorithm=AWS4-HMAC-SHA256\
    &X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20261102%2Feu-west-1%2Fs3%2Faws4_request\
    &X-Amz-Date=20261102T174512Z&X-Amz-Expires=900&X-Amz-SignedHeaders=host\
    &X-Amz-Signature=5f0e3c1b9a6d4e2f8b7a0c3d6e9f1a4b7c0d3e6f9a2b5c8d1e4f7a0b3c6d9e2f";

/// The success body of a response of `schema`, by its name.
pub fn body(schema: &str) -> Option<Value> {
    match schema {
        "Study" => Some(study()),
        "StudyPage" => Some(study_page()),
        "Interview" => Some(interview()),
        "InterviewPage" => Some(interview_page()),
        _ => None,
    }
}

pub fn study() -> Value {
    json!({
        "id": "std_acme_01",
        "internalTitle": "Onboarding interviews, autumn",
        "createdAt": "2026-09-01T08:30:00Z",
        "updatedAt": "2026-11-02T17:45:12Z"
    })
}

pub fn study_page() -> Value {
    json!({
        "items": [
            {
                "id": "std_acme_01",
                "internalTitle": "Onboarding interviews, autumn",
                "completedOn": "2026-11-02",
                "createdAt": "2026-09-01T08:30:00Z",
                "updatedAt": "2026-11-02T17:45:12Z"
            },
            {
                "id": "std_acme_02",
                "internalTitle": "Pricing page feedback",
                "completedOn": "2026-10-15",
                "createdAt": "2026-08-20T13:05:41Z",
                "updatedAt": "2026-10-15T09:12:03Z"
            }
        ],
        "pagination": { "total": 2, "page": 1, "pageSize": 20 }
    })
}

pub fn interview() -> Value {
    json!({
        "id": "int_acme_01_01",
        "participant": { "id": "ptc_4f2a", "name": "Ada L." },
        "facets": [
            { "label": "Segment", "values": ["Enterprise"] },
            { "label": "Region", "values": ["EMEA", "France"] }
        ],
        "videoDownloadURL": VIDEO_LINK,
        "transcriptAsWebVTT": TRANSCRIPT,
        "createdAt": "2026-10-28T14:02:11Z",
        "updatedAt": "2026-10-28T14:31:57Z"
    })
}

/// A page of two interviews: one with everything, one with nothing to give (its nullable fields null).
pub fn interview_page() -> Value {
    json!({
        "items": [
            interview(),
            {
                "id": "int_acme_01_03",
                "participant": null,
                "facets": [],
                "videoDownloadURL": null,
                "transcriptAsWebVTT": null,
                "createdAt": "2026-10-27T09:40:00Z",
                "updatedAt": "2026-10-27T09:58:26Z"
            }
        ],
        "pagination": { "total": 2, "page": 1, "pageSize": 20 }
    })
}

/// The 400 body of an out-of-bounds `pageSize`, as the pagination writes it.
pub fn bad_request() -> Value {
    let message = Pagination::parse(Some("pageSize=101")).expect_err("101 is past the bound").to_string();
    Value::String(message)
}

pub fn error(message: &str) -> Value {
    json!({ "error": message })
}
