//! A stored interview document (`shared::InterviewDocument`) as the API serves it. The projector stores it
//! ready to serve but for what only a request adds (the video link, the transcript), so a response is its
//! stored fields with those two written between them. Where each field lies in the stored JSON is found
//! once, when the document is read from Redis, and kept with it: a response kept in memory copies byte
//! ranges, rather than scan the document again at every request (BENCHMARKS.md, row "API: interviews, a
//! page of 100 with 100 signed links"; history in "A kept interview's fields found once").

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

/// An interview document as read: its stored JSON, and where its fields lie in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterviewDoc {
    json: String,
    /// Why the stored JSON is not an interview document, when it is not (serving it fails, saying so).
    found: Result<Found, String>,
}

/// Where the served fields lie in the stored JSON, and where the video is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Found {
    id: Range<usize>,
    participant: Range<usize>,
    facets: Range<usize>,
    created_at: Range<usize>,
    updated_at: Range<usize>,
    video: Option<Video>,
}

/// Where an interview's video is stored (`shared::VideoObject`), unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Video {
    pub bucket: Option<String>,
    pub key: String,
}

/// An interview's served fields, each the stored JSON of its value.
pub struct Fields<'a> {
    pub id: &'a str,
    pub participant: &'a str,
    pub facets: &'a str,
    pub created_at: &'a str,
    pub updated_at: &'a str,
    pub video: Option<&'a Video>,
}

/// The stored document's fields, borrowed from its JSON.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    #[serde(borrow)]
    participant: &'a RawValue,
    #[serde(borrow)]
    facets: &'a RawValue,
    #[serde(borrow, default)]
    video: Option<StoredVideo<'a>>,
    #[serde(borrow)]
    created_at: &'a RawValue,
    #[serde(borrow)]
    updated_at: &'a RawValue,
}

#[derive(Deserialize)]
struct StoredVideo<'a> {
    #[serde(borrow, default)]
    bucket: Option<Cow<'a, str>>,
    #[serde(borrow)]
    key: Cow<'a, str>,
}

impl InterviewDoc {
    /// The document read, its fields found.
    pub fn new(json: String) -> Self {
        let found = find(&json).map_err(|e| format!("a stored interview document that does not read: {e}"));
        Self { json, found }
    }

    /// Its served fields, or why the stored JSON is not an interview document.
    pub fn fields(&self) -> Result<Fields<'_>, &str> {
        let found = self.found.as_ref().map_err(String::as_str)?;
        let at = |range: &Range<usize>| &self.json[range.clone()];
        Ok(Fields {
            id: at(&found.id),
            participant: at(&found.participant),
            facets: at(&found.facets),
            created_at: at(&found.created_at),
            updated_at: at(&found.updated_at),
            video: found.video.as_ref(),
        })
    }

    /// The stored JSON's length.
    pub fn len(&self) -> usize {
        self.json.len()
    }

    /// The bytes it holds in memory besides itself.
    pub fn heap_bytes(&self) -> usize {
        let found = match &self.found {
            Ok(found) => {
                found.video.as_ref().map_or(0, |v| v.key.capacity() + v.bucket.as_ref().map_or(0, String::capacity))
            }
            Err(why) => why.capacity(),
        };
        self.json.capacity() + found
    }
}

/// Where each field of `json` lies.
fn find(json: &str) -> serde_json::Result<Found> {
    let stored: Stored<'_> = serde_json::from_str(json)?;
    let start = json.as_ptr() as usize;
    let range = |raw: &RawValue| {
        let from = raw.get().as_ptr() as usize - start;
        from..from + raw.get().len()
    };
    Ok(Found {
        id: range(stored.id),
        participant: range(stored.participant),
        facets: range(stored.facets),
        created_at: range(stored.created_at),
        updated_at: range(stored.updated_at),
        video: stored.video.map(|v| Video { bucket: v.bucket.map(Cow::into_owned), key: v.key.into_owned() }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_field_is_its_stored_json_and_the_video_is_unescaped() {
        let json = r#"{"id":"i\"1","studyId":"s","participant":null,"facets":[{"label":"a","values":[]}],"video":{"bucket":"b\\1","key":"k\u00e9/x"},"createdAt":"2026-01-01T00:00:00Z","updatedAt":"2026-01-02T00:00:00Z"}"#;
        let doc = InterviewDoc::new(json.to_string());
        let fields = doc.fields().unwrap();
        assert_eq!(fields.id, r#""i\"1""#);
        assert_eq!(fields.participant, "null");
        assert_eq!(fields.facets, r#"[{"label":"a","values":[]}]"#);
        assert_eq!(fields.created_at, r#""2026-01-01T00:00:00Z""#);
        assert_eq!(fields.updated_at, r#""2026-01-02T00:00:00Z""#);
        assert_eq!(fields.video, Some(&Video { bucket: Some("b\\1".into()), key: "ké/x".into() }));
        assert_eq!(doc.len(), json.len());
    }

    #[test]
    fn a_document_that_is_not_an_interview_fails_when_served_and_says_why() {
        let doc = InterviewDoc::new(r#"{"id":"i"}"#.into());
        let err = doc.fields().err().expect("not an interview");
        assert!(err.contains("participant"), "{err}");
    }
}
