//! Response bodies of the list and interview routes, written from the stored bytes.
//!
//! The projector stores every document ready to serve, but for what only a request can add: an
//! interview's fresh video link and its transcript, which lives under a key of its own. So the API never
//! parses a document into owned values to serialize it again: a page of studies is the stored documents
//! joined, and an interview is its stored fields (found in the stored JSON, borrowed, not copied) with the
//! link and the transcript written between them. Tests keep the bytes identical to serializing
//! [`crate::api::models::Interview`] and [`crate::api::models::StudyPage`].

use axum::body::{Body, Bytes};
use futures::{StreamExt, TryStreamExt};

use crate::api::models::PageInfo;
use crate::read::budget::{Budget, Held};
use crate::read::document::Fields;
use crate::read::model::ReadModel;
use crate::read::transcript::{self, escape, Long, Packed, Transcript};

/// A JSON body being written: in memory, but for long transcripts, which are read from Redis while the
/// body is sent ([`crate::read::transcript`]).
pub struct JsonBody {
    written: Vec<u8>,
    /// What comes before `written`, when a long transcript is in the body.
    parts: Vec<Part>,
}

enum Part {
    Written(Vec<u8>),
    /// A long transcript, escaped as a JSON string's contents.
    Long(Long),
    /// A compressed transcript, decompressed and escaped as a JSON string's contents.
    Packed(Packed),
}

impl JsonBody {
    pub fn with_capacity(bytes: usize) -> Self {
        Self { written: Vec::with_capacity(bytes), parts: Vec::new() }
    }

    /// `{"items":[` — a page's opening.
    pub fn open_page(&mut self) {
        self.written.extend_from_slice(b"{\"items\":[");
    }

    /// A separator before every item but the first.
    pub fn item(&mut self, index: usize) {
        if index > 0 {
            self.written.push(b',');
        }
    }

    /// A stored document, served as it is.
    pub fn stored(&mut self, json: &str) {
        self.written.extend_from_slice(json.as_bytes());
    }

    /// One served interview: the stored fields with the link and the transcript.
    pub fn interview(&mut self, doc: &Fields<'_>, link: Option<&str>, transcript: &Transcript) {
        let out = &mut self.written;
        out.extend_from_slice(b"{\"id\":");
        out.extend_from_slice(doc.id.as_bytes());
        out.extend_from_slice(b",\"participant\":");
        out.extend_from_slice(doc.participant.as_bytes());
        out.extend_from_slice(b",\"facets\":");
        out.extend_from_slice(doc.facets.as_bytes());
        out.extend_from_slice(b",\"videoDownloadURL\":");
        link_or_null(out, link);
        out.extend_from_slice(b",\"transcriptAsWebVTT\":");
        match transcript {
            Transcript::None => out.extend_from_slice(b"null"),
            Transcript::Whole(text) => text.write_json(out),
            Transcript::Long(long) => {
                out.push(b'"');
                let before = std::mem::take(out);
                self.parts.push(Part::Written(before));
                self.parts.push(Part::Long(long.clone()));
                self.written.push(b'"');
            }
            Transcript::Packed(packed) => {
                out.push(b'"');
                let before = std::mem::take(out);
                self.parts.push(Part::Written(before));
                self.parts.push(Part::Packed(packed.clone()));
                self.written.push(b'"');
            }
        }
        let out = &mut self.written;
        out.extend_from_slice(b",\"createdAt\":");
        out.extend_from_slice(doc.created_at.as_bytes());
        out.extend_from_slice(b",\"updatedAt\":");
        out.extend_from_slice(doc.updated_at.as_bytes());
        out.push(b'}');
    }

    /// `],"pagination":{...}}` — a page's closing.
    pub fn close_page(&mut self, pagination: &PageInfo) {
        self.written.extend_from_slice(b"],\"pagination\":");
        serde_json::to_writer(&mut self.written, pagination).expect("writing to memory");
        self.written.push(b'}');
    }

    /// The body written in memory, for a body with no long transcript (see [`JsonBody::into_body`]).
    pub fn into_bytes(self) -> Vec<u8> {
        assert!(self.parts.is_empty(), "a body with a long transcript is sent with into_body");
        self.written
    }

    /// The body, sent whole when it is all in memory, else in parts, each long transcript read from
    /// `model` a chunk at a time as the client takes it.
    pub fn into_body(self, model: &ReadModel, budget: &Budget) -> Body {
        if self.parts.is_empty() {
            return Body::from(self.written);
        }
        let mut parts = self.parts;
        parts.push(Part::Written(self.written));
        let (model, budget) = (model.clone(), budget.clone());
        let stream = futures::stream::iter(parts).flat_map(move |part| match part {
            Part::Written(bytes) => futures::stream::once(std::future::ready(Ok(Bytes::from(bytes)))).boxed(),
            Part::Long(long) => transcript::chunks(model.clone(), long, budget.clone()).map_ok(escaped).boxed(),
            Part::Packed(packed) => transcript::unpacked(packed, budget.clone()).map_ok(escaped).boxed(),
        });
        Body::from_stream(stream)
    }
}

/// A chunk of a transcript escaped, holding its share of the budget until it is sent.
fn escaped((raw, held): (Vec<u8>, Held)) -> Bytes {
    let mut escaped = Vec::with_capacity(raw.len() + raw.len() / 8);
    escape(&mut escaped, &raw);
    // The chunk's share of the budget goes back once the chunk is sent.
    Bytes::from_owner(Escaped(escaped, held))
}

/// A chunk of a long transcript, escaped, and what it holds of the process's byte budget (given back
/// when dropped).
struct Escaped(Vec<u8>, #[allow(dead_code)] Held);

impl AsRef<[u8]> for Escaped {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// A video link: percent-encoded by its signer, so it holds nothing JSON escapes and is written as it is,
/// once a check that does not stop early (and so runs a word at a time) says so. Escaping each link's
/// 600 bytes took 6.4% of the page of interviews' CPU (BENCHMARKS.md, row "API: interviews, a page of 100
/// with 100 signed links"; history in "A kept interview's fields found once").
fn link_or_null(out: &mut Vec<u8>, link: Option<&str>) {
    match link {
        Some(link) if !link.bytes().fold(false, |escaped, b| escaped | (b < 0x20) | (b == b'"') | (b == b'\\')) => {
            out.push(b'"');
            out.extend_from_slice(link.as_bytes());
            out.push(b'"');
        }
        other => string_or_null(out, other),
    }
}

fn string_or_null(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => serde_json::to_writer(out, value).expect("writing to memory"),
        None => out.extend_from_slice(b"null"),
    }
}

#[cfg(test)]
mod tests {
    use shared::{Facet, InterviewDocument, Participant, StudyDocument, VideoObject};

    use super::*;
    use crate::api::models::{Interview, InterviewPage, StudyListItem, StudyPage};
    use crate::read::document::InterviewDoc;
    use crate::read::transcript::Whole;

    fn document(participant: Option<Participant>, video: Option<VideoObject>) -> InterviewDocument {
        InterviewDocument {
            id: "int \"1\"\u{2028}".into(),
            study_id: Some("s".into()),
            participant,
            facets: vec![Facet { label: "Mood</script>".into(), values: vec!["a\\b".into(), "é\u{0}".into()] }],
            video,
            created_at: "2026-01-02T03:04:05.123Z".into(),
            updated_at: "2026-01-02T03:04:06Z".into(),
        }
    }

    /// What serializing the response model gives for `doc`, the way the API used to build it.
    fn served(doc: &InterviewDocument, link: Option<&str>, transcript: Option<&str>) -> Interview {
        Interview {
            id: doc.id.clone(),
            participant: doc.participant.clone().map(Into::into),
            facets: doc.facets.iter().cloned().map(Into::into).collect(),
            video_download_url: link.map(String::from),
            transcript_as_web_vtt: transcript.map(String::from),
            created_at: doc.created_at.clone(),
            updated_at: doc.updated_at.clone(),
        }
    }

    #[test]
    fn an_interview_page_is_byte_for_byte_what_the_response_model_serializes_to() {
        let docs = [
            document(Some(Participant { id: "p\n1".into(), name: Some("Zoë Q.".into()) }), None),
            document(
                Some(Participant { id: "p2".into(), name: None }),
                Some(VideoObject { bucket: None, key: "k".into() }),
            ),
            document(None, Some(VideoObject { bucket: Some("b\\u0041".into()), key: "a/\"b\".mp4".into() })),
        ];
        let cases = [
            (None, None),
            (Some("https://x/y?a=1&b=%2F"), Some("WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n\"hi\"\t<b>")),
            (None, Some("")),
        ];
        let mut body = JsonBody::with_capacity(0);
        body.open_page();
        let mut expected = Vec::new();
        for (i, (doc, (link, transcript))) in docs.iter().zip(cases).enumerate() {
            let stored = InterviewDoc::new(serde_json::to_string(doc).unwrap());
            let parsed = stored.fields().unwrap();
            let video = parsed.video.map(|v| (v.bucket.clone(), v.key.clone()));
            assert_eq!(video, doc.video.clone().map(|v| (v.bucket, v.key)), "the video's fields are read unescaped");
            body.item(i);
            let read = transcript.map_or(Transcript::None, |t| Transcript::Whole(Whole::of(t.to_string())));
            body.interview(&parsed, link, &read);
            expected.push(served(doc, link, transcript));
        }
        let pagination = PageInfo { total: 3, page: 1, page_size: 20 };
        body.close_page(&pagination);
        let model = serde_json::to_vec(&InterviewPage { items: expected, pagination }).unwrap();
        assert_eq!(String::from_utf8(body.into_bytes()).unwrap(), String::from_utf8(model).unwrap());
    }

    #[test]
    fn a_link_is_written_as_serde_json_writes_it_whatever_it_holds() {
        for link in
            [None, Some(""), Some("https://s3/b/k%2F?X-Amz-Signature=ab"), Some("a\"b"), Some("\\"), Some("\u{1}x")]
        {
            let mut out = Vec::new();
            link_or_null(&mut out, link);
            assert_eq!(out, serde_json::to_vec(&link).unwrap(), "{link:?}");
        }
    }

    #[test]
    fn a_page_of_studies_is_its_stored_documents_joined() {
        let docs: Vec<StudyDocument> = (0..3)
            .map(|i| StudyDocument {
                id: format!("s{i}\u{7f}"),
                internal_title: "T \"q\" \\".into(),
                completed_on: "2026-01-02".into(),
                created_at: "2026-01-01T00:00:00Z".into(),
                updated_at: "2026-01-02T00:00:00.000001Z".into(),
            })
            .collect();
        let mut body = JsonBody::with_capacity(0);
        body.open_page();
        for (i, doc) in docs.iter().enumerate() {
            body.item(i);
            body.stored(&serde_json::to_string(doc).unwrap());
        }
        let pagination = PageInfo { total: 9, page: 2, page_size: 3 };
        body.close_page(&pagination);
        let items = docs
            .into_iter()
            .map(|d| StudyListItem {
                id: d.id,
                internal_title: d.internal_title,
                completed_on: d.completed_on,
                created_at: d.created_at,
                updated_at: d.updated_at,
            })
            .collect();
        let model = serde_json::to_vec(&StudyPage { items, pagination }).unwrap();
        assert_eq!(body.into_bytes(), model);
    }
}
