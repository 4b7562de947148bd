//! `If-None-Match` on the tagged routes (`crate::api::etag`), answered after compression so that each
//! representation keeps a strong tag of its own: a compressed body's tag gets the coding's name appended,
//! then a request whose `If-None-Match` matches the tag it would get is answered `304 Not Modified`, with
//! no body and the headers the 200 would have had but for the body's own (`Content-Type`,
//! `Content-Encoding`, `Content-Length`). Responses without a tag pass unchanged.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use crate::api::etag;

pub async fn not_modified(request: Request, next: Next) -> Response {
    let wanted: Vec<HeaderValue> = request.headers().get_all(header::IF_NONE_MATCH).iter().cloned().collect();
    let mut response = next.run(request).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    let headers = response.headers();
    let Some(tag) = headers.get(header::ETAG).and_then(|tag| tag.to_str().ok()) else { return response };
    let coding = headers.get(header::CONTENT_ENCODING).and_then(|coding| coding.to_str().ok());
    let tag = match coding.and_then(|coding| etag::encoded(tag, coding)) {
        Some(coded) => coded,
        None => tag.to_string(),
    };
    let value = HeaderValue::try_from(tag.as_str()).expect("a tag made of a tag and a token");
    response.headers_mut().insert(header::ETAG, value);
    if !etag::none_match(wanted.iter().map(HeaderValue::as_bytes), &tag) {
        return response;
    }
    let (mut parts, _) = response.into_parts();
    parts.status = StatusCode::NOT_MODIFIED;
    for name in [header::CONTENT_TYPE, header::CONTENT_ENCODING, header::CONTENT_LENGTH] {
        parts.headers.remove(name);
    }
    Response::from_parts(parts, Body::empty())
}
